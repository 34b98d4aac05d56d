"""The studio over a PostgreSQL store (``goondan studio --store postgresql://…``).

The same JSON documents as :mod:`goondan.studio.data`, read through the storage contract as
``inspect --store`` reads them (:mod:`goondan.commands.store_read`): ``workspaces()``,
``instances(ws)``, ``snapshot(...)`` (no lock), ``approvals(ws)``; decisions go through
:func:`~goondan.commands.approvals.decide_approval` with the backend, which tells the
orchestrators running from the local state root, as ``approvals approve --store`` does.
Traces are read from the store's span table (``goondan_spans``, as ``inspect trace --store``
reads them). What stays local: running swarms (``runtime/``) and workspace records.

A conversation is followed by polling the store's :meth:`version` of the instance (one query)
every :data:`POLL_S`; only when it changed is the instance's snapshot read and compared with
what was sent. The conversation's cursor is ``pg:<committed count>:<crc of their ids>:<events
count>:<crc of the first event>``: read in the same transaction as the messages it describes.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.state import fold
from goondan.errors import GoondanError
from goondan.storage.contract import InstanceSnapshot, StorageBackend
from goondan.studio import data
from goondan.studio.data import ApiError, event_doc, masked, masked_doc, message_doc
from goondan.types import JsonObject

__all__ = ["POLL_S", "StoreFollower", "approval_list", "conversation", "decide", "overview",
           "trace_doc", "trace_list"]

POLL_S = 0.5


def _instance_doc(workspace_id: str, meta: dict[str, Any], count: int | None) -> JsonObject:
    from urllib.parse import quote

    agent, key = str(meta.get("agentName")), str(meta.get("instanceKey"))
    href = "/conversations/" + "/".join(quote(p, safe="") for p in (workspace_id, agent, key))
    return {"workspaceId": workspace_id, "agent": agent, "instanceKey": key,
            "status": str(meta.get("status", "unknown")), "messageCount": count,
            "updatedAt": meta.get("updatedAt"), "href": href}


def overview(root: Path, backend: StorageBackend, store: str) -> JsonObject:
    """``GET /api/overview``: the local running swarms and the store's workspaces (an
    instance's ``messageCount`` is null: counting would read every conversation)."""
    bundles = data.bundle_dirs(root)
    workspaces = [{"workspaceId": ws, "bundleDir": bundles.get(ws),
                   "instances": [_instance_doc(ws, meta, None) for meta in backend.instances(ws)]}
                  for ws in backend.workspaces()]
    return masked_doc({"stateRoot": str(root), "store": store,
                       "swarms": data.swarms(root, bundles), "workspaces": workspaces})


def _snapshot(backend: StorageBackend, workspace_id: str, agent: str,
              key: str) -> InstanceSnapshot:
    snap = backend.snapshot(workspace_id, agent, key)
    if snap is None:
        raise ApiError(404, "E_STUDIO_NOT_FOUND",
                       f"no instance {agent}:{key} in workspace {workspace_id}")
    return snap


def _decode(snap: InstanceSnapshot) -> tuple[list[Message], list[MessageEvent]]:
    from goondan.commands.store_read import decoded

    messages, events, _ = decoded(snap, "the store")  # as inspect --store reads them
    return messages, events


def _crc(parts: list[str]) -> int:
    return zlib.crc32("\n".join(parts).encode())


def _cursor(messages: list[Message], snap: InstanceSnapshot) -> str:
    first = snap.events[:1]
    return f"pg:{len(messages)}:{_crc([m.id for m in messages])}:{len(snap.events)}:{_crc(first)}"


def conversation(backend: StorageBackend, workspace_id: str, agent: str, key: str, *,
                 q: str | None = None, offset: int = 0, limit: int | None = None) -> JsonObject:
    """``GET /api/conversations/...``: as :func:`goondan.studio.data.conversation`."""
    snap = _snapshot(backend, workspace_id, agent, key)
    try:
        base, events = _decode(snap)
    except GoondanError as err:
        raise ApiError(422, err.code, err.message) from None
    if events:
        pending = {e.message.id for e in events if e.message is not None}
        folded, _ = fold(base, events)
        docs = [message_doc(m, pending=m.id in pending) for m in folded]
    else:
        docs = [message_doc(m, pending=False) for m in base]
    if q:
        docs = [d for d in docs if data.matches(d, q.lower())]
    page = docs[offset:] if limit is None else docs[offset:offset + limit]
    return masked_doc({"instance": _instance_doc(workspace_id, snap.metadata, len(base)),
                       "total": len(docs), "offset": offset, "messages": page,
                       "cursor": _cursor(base, snap)})


def _parse_cursor(text: str) -> tuple[int, int, int, int]:
    parts = text.split(":")
    if len(parts) != 5 or parts[0] != "pg":
        raise ValueError(f"not a cursor: {text!r}")
    numbers = [int(p) for p in parts[1:]]
    if min(numbers) < 0:
        raise ValueError(f"not a cursor: {text!r}")
    return numbers[0], numbers[1], numbers[2], numbers[3]


Event = tuple[str, JsonObject]


class StoreFollower:
    """The stream events of one instance of the store since ``cursor`` (``ValueError`` if
    malformed), else since it was created; 404 when there is no such instance."""

    def __init__(self, backend: StorageBackend, workspace_id: str, agent: str, key: str,
                 cursor: str | None = None) -> None:
        self.backend, self.where = backend, (workspace_id, agent, key)
        self.version: str | None = None  # None: read the snapshot at the first poll
        if cursor:
            self.count, self.ids_crc, self.events, self.first_crc = _parse_cursor(cursor)
            self.status = str(_snapshot(backend, *self.where).metadata.get("status", ""))
            return
        self.version = backend.version(*self.where)
        snap = _snapshot(backend, *self.where)
        base, _ = _decode(snap)
        self.count, self.ids_crc = len(base), _crc([m.id for m in base])
        self.events, self.first_crc = len(snap.events), _crc(snap.events[:1])
        self.status = str(snap.metadata.get("status", ""))

    def __repr__(self) -> str:
        return f"<StoreFollower {':'.join(self.where)}>"

    def poll(self) -> list[Event]:
        """The events since the last poll; an empty list when nothing changed or the store
        cannot be read now (the next poll tries again)."""
        try:
            version = self.backend.version(*self.where)
            if version is None or version == self.version:
                return []
            snap = self.backend.snapshot(*self.where)
            if snap is None:
                return []
            base, events = _decode(snap)
        except GoondanError:
            return []
        self.version = version
        out: list[Event] = []
        ids = [m.id for m in base]
        if len(ids) < self.count or _crc(ids[:self.count]) != self.ids_crc:
            out.append(("reset", {}))  # rewritten (compaction): the page fetches it again
        else:
            out.extend(("message", masked(message_doc(m, pending=False)))
                       for m in base[self.count:])
        self.count, self.ids_crc = len(ids), _crc(ids)
        # A commit deletes the turn's events (their messages came above); the next turn's
        # start again from the first: a different first event, or fewer than were seen.
        first = _crc(snap.events[:1])
        start = self.events if first == self.first_crc and len(events) >= self.events else 0
        for event in events[start:]:
            found = event_doc(event)
            if found is not None:
                out.append(found)
        self.events, self.first_crc = len(events), first
        status = str(snap.metadata.get("status", self.status))
        if status != self.status:
            self.status = status
            out.append(("status", {"status": status}))
        return out


# -- traces -----------------------------------------------------------------------------------

def trace_list(root: Path, backend: StorageBackend, limit: int) -> JsonObject:
    """``GET /api/traces``: the ``limit`` most recent traces of the store's span table."""
    from goondan.commands.trace import span_table
    from goondan.runtime.traces import SpanRecord

    table = span_table(backend)
    spans = [SpanRecord.from_dict(doc, start)
             for doc, start in table.of_traces(table.recent_traces(limit))]
    return data.trace_list(root, limit=limit, spans=spans)


def trace_doc(root: Path, backend: StorageBackend, trace_id: str) -> JsonObject:
    """``GET /api/traces/<id>``: one trace of the store's span table (a unique prefix)."""
    from goondan.commands.trace import span_table, stored_spans

    return data.trace_doc(root, trace_id, spans=stored_spans(span_table(backend), trace_id))


# -- approvals --------------------------------------------------------------------------------

def approval_list(root: Path, backend: StorageBackend, *, status: str | None = None
                  ) -> JsonObject:
    """``GET /api/approvals``: every approval of the store (``status`` filters)."""
    names = data.swarm_names(root)
    rows = [data.approval_doc(a, ws, names.get(ws))
            for ws in backend.workspaces() for a in backend.approvals(ws).list(status=status)]
    return masked_doc({"approvals": rows})


def decide(root: Path, backend: StorageBackend, approval_id: str, *, approve: bool,
           reason: str | None) -> JsonObject:
    """``POST /api/approvals/<id>``: decided in the store; the orchestrators running from the
    local state root are told over their control sockets (``approvals approve --store``)."""
    return data.decide(root, approval_id, approve=approve, reason=reason, backend=backend)
