"""``goondan inspect workspace|instance --store postgresql://…``: the views of
:mod:`goondan.commands.inspect` over a PostgreSQL store, read through the storage contract
(:mod:`goondan.commands.store_read`). Read-only: an instance is read from a snapshot without
its lock, so inspecting a running instance is safe. Every line printed is masked.
"""

from __future__ import annotations

import json
import time
from typing import Any

from goondan.commands.common import style
from goondan.commands.inspect import (
    InstanceView,
    echo,
    echo_json,
    format_event,
    print_view,
    short_time,
)
from goondan.commands.store_read import (
    StoredInstance,
    decoded,
    find_stored,
    iter_stored,
    snapshot_of,
)
from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import Diagnostic
from goondan.storage.contract import InstanceSnapshot, StorageBackend

__all__ = ["StoredView", "print_instance", "print_workspaces"]

_POLL_SECONDS = 0.2


def print_workspaces(backend: StorageBackend, where: str, *, as_json: bool,
                     color: bool) -> None:
    """``inspect workspace``: every workspace and instance of the store."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for found in iter_stored(backend):
        snap = backend.snapshot(found.workspace_id, found.agent_name, found.instance_key)
        row = found.row()
        row.update(messages=len(snap.messages) if snap else 0,
                   pendingEvents=len(snap.events) if snap else 0)
        grouped.setdefault(found.workspace_id, []).append(row)
    if as_json:
        echo_json({"store": where, "workspaces": [
            {"workspaceId": ws, "instances": rows} for ws, rows in grouped.items()]})
        return
    echo(f"Store: {where}")
    for ws, rows in grouped.items():
        echo("")
        echo(style(f"workspace {ws}", color, bold=True))
        echo(f"  {'INSTANCE KEY':<32} {'AGENT':<16} {'STATUS':<11} {'MESSAGES':>8} "
             f"{'PENDING':>7}  {'UPDATED':<19}")
        for row in rows:
            echo(f"  {row['instanceKey']:<32} {row['agentName']:<16} {row['status']:<11} "
                 f"{row['messages']:>8} {row['pendingEvents']:>7}  "
                 f"{short_time(row['updatedAt']):<19}")
    if not grouped:
        echo("No workspaces found.")


class StoredView(InstanceView):
    """An instance of a store as ``inspect instance`` shows it, read once from a snapshot."""

    def __init__(self, found: StoredInstance, snap: InstanceSnapshot, where: str) -> None:
        super().__init__(found.label, found.workspace_id, found.status,
                         found.metadata.get("updatedAt"))
        self.found, self.snap, self.where = found, snap, where
        self._messages, self._events, self._diagnostics = decoded(snap, where)

    def total(self) -> int:
        return len(self._messages)

    def row(self) -> dict[str, Any]:
        return {**self.found.row(), "store": self.where, "messages": self.total(),
                "pendingEvents": len(self._events)}

    def _first(self, limit: int) -> int:
        return 1 if limit == 0 else max(1, self.total() - limit + 1)

    def messages(self, limit: int) -> list[tuple[int, Message]]:
        return list(enumerate(self._messages, start=1))[self._first(limit) - 1:]

    def pending(self) -> tuple[list[MessageEvent], list[Diagnostic]]:
        return self._events, self._diagnostics

    def extensions(self) -> dict[str, Any]:
        states: dict[str, Any] = {}
        for name, text in self.snap.extensions.items():
            stem = name[:-len(".json")] if name.endswith(".json") else name
            try:
                states[stem] = json.loads(text) if text else None
            except ValueError:
                states[stem] = {"error": f"invalid JSON in extension state {name}"}
        return states

    def raw_messages(self, limit: int) -> list[str]:
        return self.snap.messages[self._first(limit) - 1:]

    def raw_events(self) -> list[str]:
        return self.snap.events


def print_instance(backend: StorageBackend, where: str, key: str, *, agent: str | None,
                   workspace_id: str | None, sections: dict[str, bool], as_json: bool,
                   raw: bool, limit: int, follow: bool, color: bool) -> None:
    """``inspect instance KEY``: transcript, pending events and extension states."""
    [found] = find_stored(backend, where, key, agent=agent, workspace_id=workspace_id,
                          allow_many=False)
    snap = snapshot_of(backend, found)
    print_view(StoredView(found, snap, where), sections, as_json=as_json, raw=raw, limit=limit,
               color=color)
    if follow:
        _follow(backend, found.workspace_id, found.agent_name, key, len(snap.events),
                as_json=as_json, raw=raw)


def _follow(backend: StorageBackend, workspace_id: str, agent: str, key: str, seen: int, *,
            as_json: bool, raw: bool) -> None:
    """Poll the instance's pending events; note when a commit folds them."""
    if not as_json:
        echo("-- following events (Ctrl-C to stop) --")
    while True:
        snap = backend.snapshot(workspace_id, agent, key)
        lines = snap.events if snap is not None else []
        if len(lines) < seen:
            seen = 0
            if not as_json and not raw:
                echo("-- turn committed (events folded into the conversation) --")
        for line in lines[seen:]:
            if raw or as_json:
                echo(line)
            else:
                echo("  " + format_event(MessageEvent.from_dict(json.loads(line))))
        seen = len(lines)
        time.sleep(_POLL_SECONDS)
