"""What the state commands (``inspect``, ``fold``, ``instance``, ``approvals``) read from a
PostgreSQL store given with ``--store`` (docs/storage.md, docs/cli.md).

Everything goes through the storage contract (:class:`~goondan.storage.contract.StorageBackend`):
``workspaces()``, ``instances(ws)``, ``snapshot(...)`` (read without the instance's lock, so
inspecting a running instance is safe), ``open_instance`` (``fold``), ``delete_instance``,
``approvals(ws)``. A JSONL store (a path, or nothing) never comes here: the commands keep their
state-root code, byte for byte.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from goondan.conversation.codec import decode_events, decode_messages
from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import Diagnostic, WorkspaceError
from goondan.storage.contract import InstanceSnapshot, StorageBackend
from goondan.storage.url import StoreLocation, parse_store
from goondan.workspace.catalog import refuse_ambiguous

__all__ = [
    "StoredInstance",
    "decoded",
    "find_stored",
    "iter_stored",
    "opened_store",
    "postgres_location",
]


def postgres_location(store: str | None) -> StoreLocation | None:
    """The parsed ``--store`` / ``GOONDAN_STORE`` when it is a PostgreSQL URL; None for a
    JSONL store (``E_STORE_URL`` when it is neither)."""
    location = parse_store(store)
    return location if location.kind == "postgres" else None


def jsonl_root(store: str | None, state_root: str | None) -> str | None:
    """The state root to use for a JSONL store: ``--store PATH`` wins over ``--state-root``."""
    location = parse_store(store)
    if location.kind == "jsonl" and location.path is not None:
        return str(location.path)
    return state_root


@contextlib.contextmanager
def opened_store(location: StoreLocation) -> Iterator[StorageBackend]:
    """The backend at ``location`` (connected, schema migrated), closed after the block."""
    from goondan.storage.backends import open_backend

    backend = open_backend(location)
    try:
        yield backend
    finally:
        backend.close()


@dataclass
class StoredInstance:
    """One instance of a store, as listed (its metadata row)."""

    workspace_id: str
    agent_name: str
    instance_key: str
    metadata: dict[str, Any]

    @property
    def label(self) -> str:
        return f"{self.agent_name}:{self.instance_key}"

    @property
    def status(self) -> str:
        return str(self.metadata.get("status", "unknown"))

    def row(self) -> dict[str, Any]:
        """The camelCase row of ``instance list --json`` / ``inspect workspace --json``."""
        return {"workspaceId": self.workspace_id, "instanceKey": self.instance_key,
                "agentName": self.agent_name, "status": self.status,
                "createdAt": self.metadata.get("createdAt"),
                "updatedAt": self.metadata.get("updatedAt")}


def iter_stored(backend: StorageBackend, *, workspace_id: str | None = None,
                agent: str | None = None) -> Iterator[StoredInstance]:
    """Every instance of the store (by workspace, agent, key)."""
    for workspace in backend.workspaces():
        if workspace_id is not None and workspace != workspace_id:
            continue
        for meta in backend.instances(workspace):
            if agent is not None and meta.get("agentName") != agent:
                continue
            yield StoredInstance(workspace, str(meta.get("agentName")),
                                 str(meta.get("instanceKey")), dict(meta))


def find_stored(backend: StorageBackend, where: str, key: str, *, agent: str | None = None,
                workspace_id: str | None = None, allow_many: bool = True,
                missing_ok: bool = False) -> list[StoredInstance]:
    """The instances with key ``key``; ``E_WORKSPACE_INSTANCE_NOT_FOUND`` /
    ``_AMBIGUOUS`` as for a state root."""
    found = [i for i in iter_stored(backend, workspace_id=workspace_id, agent=agent)
             if i.instance_key == key]
    if not found and not missing_ok:
        scope = f" of agent {agent!r}" if agent else ""
        raise WorkspaceError(
            f"no instance {key!r}{scope} in {where}", code="E_WORKSPACE_INSTANCE_NOT_FOUND",
            suggestion="goondan instance list --store ... lists every instance (check --store)",
        )
    refuse_ambiguous(found, key, allow_many=allow_many)
    return found


def snapshot_of(backend: StorageBackend, found: StoredInstance) -> InstanceSnapshot:
    snap = backend.snapshot(found.workspace_id, found.agent_name, found.instance_key)
    if snap is None:  # deleted since it was listed
        raise WorkspaceError(f"instance {found.label} no longer exists",
                             code="E_WORKSPACE_INSTANCE_NOT_FOUND",
                             suggestion="goondan instance list --store ... lists the instances")
    return snap


def _data(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def decoded(snap: InstanceSnapshot, where: str) -> tuple[list[Message], list[MessageEvent],
                                                          list[Diagnostic]]:
    """The committed messages, the pending events and what was wrong reading them."""
    label = f"{where} {snap.agent_name}:{snap.instance_key}"
    messages = decode_messages(_data(snap.messages), file=f"{label}/messages")
    events = decode_events(_data(snap.events), file=f"{label}/events")
    return messages.records, events.records, [*messages.diagnostics, *events.diagnostics]
