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
    _clip,
    _compact,
    _diag_line,
    echo,
    echo_json,
    format_event,
    format_message,
    short_time,
)
from goondan.commands.store_read import decoded, find_stored, iter_stored, snapshot_of
from goondan.storage.contract import InstanceSnapshot, StorageBackend

__all__ = ["print_instance", "print_workspaces"]

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


def _extensions(snap: InstanceSnapshot) -> dict[str, Any]:
    states: dict[str, Any] = {}
    for name, text in snap.extensions.items():
        stem = name[:-len(".json")] if name.endswith(".json") else name
        try:
            states[stem] = json.loads(text) if text else None
        except ValueError:
            states[stem] = {"error": f"invalid JSON in extension state {name}"}
    return states


def print_instance(backend: StorageBackend, where: str, key: str, *, agent: str | None,
                   workspace_id: str | None, sections: dict[str, bool], as_json: bool,
                   raw: bool, limit: int, follow: bool, color: bool) -> None:
    """``inspect instance KEY``: transcript, pending events and extension states."""
    [found] = find_stored(backend, where, key, agent=agent, workspace_id=workspace_id,
                          allow_many=False)
    snap = snapshot_of(backend, found)
    messages, events, diagnostics = decoded(snap, where)
    total = len(messages)
    first = 1 if limit == 0 else max(1, total - limit + 1)
    shown = list(enumerate(messages, start=1))[first - 1:]
    if as_json:
        out: dict[str, Any] = {"instance": {**found.row(), "store": where, "messages": total,
                                            "pendingEvents": len(events)}}
        if sections["messages"]:
            out["messages"] = [m.to_dict() for _, m in shown]
        if sections["events"]:
            out["pendingEvents"] = [e.to_dict() for e in events]
            out["diagnostics"] = [d.to_dict() for d in diagnostics]
        if sections["state"]:
            out["extensions"] = _extensions(snap)
        echo_json(out)
    elif raw:
        if sections["messages"]:
            for line in snap.messages[first - 1:]:
                echo(line)
        if sections["events"]:
            for line in snap.events:
                echo(line)
        if sections["state"]:
            for name, value in _extensions(snap).items():
                echo(json.dumps({"extension": name, "state": value}, ensure_ascii=False))
    else:
        echo(style(f"instance {found.label}", color, bold=True)
             + f"  (workspace {found.workspace_id}, status {found.status}, {total} messages, "
             f"updated {short_time(found.metadata.get('updatedAt'))})")
        if sections["messages"]:
            count = len(shown)
            echo(f"-- messages (last {count} of {total}) --" if count < total else
                 "-- messages --")
            for number, message in shown:
                for line in format_message(number, message, color=color):
                    echo(line)
        if sections["events"]:
            echo(f"-- pending events: {len(events)} --")
            for event in events:
                echo("  " + format_event(event))
            for diagnostic in diagnostics:
                echo("  " + _diag_line(diagnostic))
        if sections["state"]:
            states = _extensions(snap)
            echo(f"-- extension states: {len(states)} --")
            for name, value in states.items():
                echo(f"  {name}: {_clip(_compact(value))}")
    if follow:
        _follow(backend, found.workspace_id, found.agent_name, key, len(snap.events),
                as_json=as_json, raw=raw)


def _follow(backend: StorageBackend, workspace_id: str, agent: str, key: str, seen: int, *,
            as_json: bool, raw: bool) -> None:
    """Poll the instance's pending events; note when a commit folds them."""
    from goondan.conversation.messages import MessageEvent

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
