"""The JSONL state root as a :class:`~goondan.storage.contract.StorageBackend` (the default and
the reference backend).

Thin: the workspace classes conform to the contract directly (``InstanceStore`` with its
``TurnJournal``, ``ApprovalStore``); this module adds the backend object that opens them, and
:class:`JsonlQueue`, a :class:`~goondan.workspace.inbox.DurableInbox` with the claims of
:mod:`goondan.workspace.claims` behind the queue's ``claim``/``confirm``/``take``. Nothing here
changes a byte of what is written on disk.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from goondan.storage.contract import InstanceSnapshot, QueueRecord
from goondan.storage.jsonl_snapshot import (
    queue_records,
    queue_scopes,
    read_snapshot,
    read_version,
    restore_queue_record,
    restore_snapshot,
    workspace_ids,
)
from goondan.workspace.approvals import ApprovalStore
from goondan.workspace.catalog import delete_instance as delete_instance_dir
from goondan.workspace.catalog import find_instances, iter_instances
from goondan.workspace.claims import STARTED, claim, claim_states, confirm, owner_alive
from goondan.workspace.inbox import DurableInbox, InboxEntry, read_records
from goondan.workspace.journal import OpenTurn, interrupted_instances, open_turns
from goondan.workspace.paths import StateLayout
from goondan.workspace.store import InstanceStore

__all__ = ["JsonlBackend", "JsonlQueue", "marker_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SCOPE_PART = re.compile(r"[A-Za-z0-9._-]+")


def marker_name(agent: str, instance_key: str) -> str:
    """The claim file name of (agent, instanceKey): the agent process's name
    (``goondan.ipc.logs.process_name``, the same rule)."""
    key = _UNSAFE.sub("-", instance_key).strip("-") or "default"
    return f"{agent}.{key}"[:128]


class JsonlQueue(DurableInbox):
    """A durable inbox directory with the queue operations of the contract. A start is claimed
    in the claim file ``started/<process>.jsonl`` of the instance (``marker_path``)."""

    @classmethod
    def of_claim_file(cls, path: Path) -> JsonlQueue:
        """The queue a claim file belongs to (a JSONL start marker names one, docs/orchestrator.md
        "Durable inputs"): its starts are claimed in that file whoever claims them."""
        return cls(path.parent.parent, lambda _agent, _key: path.stem)

    def claim(self, agent: str, instance_key: str, input_id: str, *, owner: str | None = None,
              written: bool = False) -> bool:
        return claim(self.marker_path(agent, instance_key), input_id, owner=owner,
                     written=lambda: written)

    def confirm(self, agent: str, instance_key: str, input_id: str) -> None:
        confirm(self.marker_path(agent, instance_key), input_id)

    def records(self) -> list[QueueRecord]:
        return queue_records(self)

    def restore(self, record: QueueRecord) -> bool:
        return restore_queue_record(self, record)

    def take(self, agent: str, instance_key: str, *, owner: str) -> InboxEntry | None:
        # The JSONL inbox is pushed by its one writer (the orchestrator); taking is a scan of
        # the inbox for the first entry of the instance that nobody started or holds.
        marker = self.marker_path(agent, instance_key)
        states = claim_states(marker)
        for raw, _line in read_records(self.path):
            try:
                entry = InboxEntry.from_dict(raw)
            except (KeyError, TypeError):
                continue
            if (entry.agent, entry.instance_key) != (agent, instance_key):
                continue
            state = states.get(entry.id)
            if state == STARTED or (state is not None and owner_alive(state)):
                continue
            if self._accept is not None and not self._accept(entry):
                continue
            if claim(marker, entry.id, owner=owner):
                return entry
        return None


class JsonlBackend:
    """A state root directory (``--state-root``)."""

    def __init__(self, state_root: Path, *, fsync: bool = True, fsync_events: bool = False,
                 marker: Callable[[str, str], str] = marker_name) -> None:
        self.state_root = Path(state_root)
        self.layout = StateLayout(self.state_root)
        self._fsync = fsync
        self._fsync_events = fsync_events
        self._marker = marker

    def __repr__(self) -> str:
        return f"JsonlBackend({str(self.state_root)!r})"

    def open_instance(self, workspace_id: str, agent_name: str, instance_key: str, *,
                      create: bool = True) -> InstanceStore:
        return InstanceStore.open(self.state_root, workspace_id, agent_name, instance_key,
                                  create=create, fsync=self._fsync,
                                  fsync_events=self._fsync_events)

    def instances(self, workspace_id: str) -> Iterator[dict[str, Any]]:
        for info in iter_instances(self.state_root, workspace_id=workspace_id):
            if info.agent_name is None:
                continue
            yield {**info.metadata, "agentName": info.agent_name,
                   "instanceKey": info.instance_key, "status": info.status}

    def delete_instance(self, workspace_id: str, agent_name: str, instance_key: str) -> bool:
        found = [info for info in find_instances(self.state_root, instance_key,
                                                 agent=agent_name, workspace_id=workspace_id)
                 if info.instance_key == instance_key]
        for info in found:
            delete_instance_dir(info)
        return bool(found)

    def open_turns(self, workspace_id: str) -> list[tuple[str, str, OpenTurn]]:
        return open_turns(self.state_root, workspace_id)

    def interrupted_instances(self, workspace_id: str) -> list[tuple[str, str]]:
        return interrupted_instances(self.state_root, workspace_id)

    def approvals(self, workspace_id: str) -> ApprovalStore:
        return ApprovalStore(self.state_root, workspace_id)

    def workspaces(self) -> list[str]:
        return workspace_ids(self.state_root)

    def queue_scopes(self, workspace_id: str) -> list[str]:
        return queue_scopes(self.state_root, workspace_id)

    def snapshot(self, workspace_id: str, agent_name: str,
                 instance_key: str) -> InstanceSnapshot | None:
        return read_snapshot(self.state_root, workspace_id, agent_name, instance_key)

    def version(self, workspace_id: str, agent_name: str, instance_key: str) -> str | None:
        return read_version(self.state_root, workspace_id, agent_name, instance_key)

    def restore(self, workspace_id: str, snapshot: InstanceSnapshot, *,
                replace: bool = False) -> None:
        restore_snapshot(self.state_root, workspace_id, snapshot, replace=replace)

    def queue(self, workspace_id: str, scope: str,
              accept: Callable[[InboxEntry], bool] | None = None) -> JsonlQueue:
        parts = scope.split("/")
        if not all(_SCOPE_PART.fullmatch(p) and p not in (".", "..") for p in parts):
            raise ValueError(f"queue scope {scope!r}: expected names of [A-Za-z0-9._-] and '/'")
        directory = self.layout.workspace_dir(workspace_id).joinpath(*parts)
        return JsonlQueue(directory, self._marker, accept)

    def close(self) -> None:
        return None
