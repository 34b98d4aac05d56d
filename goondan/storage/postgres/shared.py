"""Approvals and durable input queues in PostgreSQL (``goondan_approvals``, ``goondan_inbox``).

Both behave as their JSONL references (:class:`~goondan.workspace.approvals.ApprovalStore`,
:class:`~goondan.workspace.inbox.DurableInbox` + :mod:`goondan.workspace.claims`), with the
database deciding races instead of ``link``/``flock``:

* an approval request is ``INSERT ... ON CONFLICT DO NOTHING`` (the same id changes nothing);
  a decision is ``UPDATE ... WHERE decision IS NULL``: among any number of deciders exactly one
  updates the row, every other gets the first decision back;
* an input is one row per (scope, id), in acceptance order (``seq``); its start is claimed
  under ``SELECT ... FOR UPDATE`` (a reservation for a live owner, then final), and
  :meth:`PostgresQueue.take` hands the oldest free input of an instance to one of any number
  of concurrent takers with ``FOR UPDATE SKIP LOCKED``. A started input keeps its id (a
  repeated id stays refused) and drops its event (the conversation now holds the input).

Owner liveness is judged as in the JSONL claims (pid + start time on this machine), which is
right while one orchestrator host owns the queue; across hosts the lease decides (issue 36).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from goondan.errors import WorkspaceError
from goondan.storage.contract import QueueRecord
from goondan.storage.postgres.db import Connection, Database
from goondan.storage.postgres.store import Fence
from goondan.types import JsonObject, now_iso
from goondan.workspace.approvals import (
    STATUSES,
    Approval,
    approval_id,
    decision_document,
    format_time,
    parse_time,
)
from goondan.workspace.claims import owner_alive
from goondan.workspace.inbox import InboxEntry

__all__ = ["PostgresApprovals", "PostgresQueue", "SharedConnection"]

_STARTED, _RESERVED, _PENDING = "started", "reserved", "pending"
T = TypeVar("T")


class Rows:
    """What a statement returned (fetched before its connection went back to the pool)."""

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class SharedConnection:
    """The backend's pooled connections (:class:`~goondan.storage.postgres.db.Database`) as
    used by approvals, queues and listings: one statement, or one function, per transaction."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def execute(self, query: str, params: tuple[Any, ...]) -> Rows:
        """Run one statement in its own transaction."""
        def work(conn: Connection) -> Rows:
            cur = conn.execute(query, params)
            return Rows(cur.fetchall() if cur.description is not None else [], cur.rowcount)

        return self.db.run(work)

    def run(self, work: Callable[[Connection], T], fence: Fence | None = None) -> T:
        """``work(conn)`` in one transaction (run once more if the connection broke before
        the commit: ``work`` must only touch the database), after ``fence(conn)``."""
        if fence is None:
            return self.db.run(work)

        def fenced(conn: Connection) -> T:
            fence(conn)
            return work(conn)

        return self.db.run(fenced)

    def close(self) -> None:
        self.db.close()


def _dumps(document: JsonObject) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def _check_id(approval: str) -> None:
    if not approval.startswith("apr_") or not approval[4:].isalnum():
        raise WorkspaceError(f"{approval!r} is not an approval id", code="E_APPROVAL_NOT_FOUND",
                             suggestion="'goondan approvals list' shows the ids (apr_...)")


def _approval(request: JsonObject, decision: JsonObject | None, now: datetime | None) -> Approval:
    if decision is not None and decision.get("status") in STATUSES:
        return Approval(request, decision, decision["status"])
    expires = request.get("expiresAt")
    when = now or datetime.now(UTC)
    expired = isinstance(expires, str) and parse_time(expires) <= when
    return Approval(request, None, "expired" if expired else "pending")


class PostgresApprovals:
    """The approvals of one workspace (the contract's ``ApprovalIndex``)."""

    def __init__(self, shared: SharedConnection, workspace_id: str,
                 fence: Fence | None = None) -> None:
        self._shared = shared
        self.workspace_id = workspace_id
        self._fence = fence  # requests are written for a turn: fenced like its instance

    def __repr__(self) -> str:
        return f"<PostgresApprovals {self.workspace_id}>"

    def request(self, *, agent: str, instance_key: str, turn_id: str, tool_call_id: str, tool: str,
                args: JsonObject, reason: str | None = None, timeout_ms: int | None = None,
                requested_at: str | None = None) -> Approval:
        ident = approval_id(agent, instance_key, turn_id, tool_call_id)
        at = requested_at or now_iso()
        expires = (format_time(parse_time(at) + timedelta(milliseconds=timeout_ms))
                   if timeout_ms else None)
        document: JsonObject = {
            "id": ident, "tool": tool, "args": args, "agent": agent, "instanceKey": instance_key,
            "turnId": turn_id, "toolCallId": tool_call_id, "reason": reason, "requestedAt": at,
            "approvalTimeoutMs": timeout_ms, "expiresAt": expires,
        }
        self._shared.run(lambda conn: conn.execute(
            "INSERT INTO goondan_approvals (workspace_id, id, agent_name, instance_key, "
            "requested_at, request) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (self.workspace_id, ident, agent, instance_key, at, _dumps(document))), self._fence)
        found = self.get(ident)
        assert found is not None
        return found

    def get(self, approval: str, *, now: datetime | None = None) -> Approval | None:
        _check_id(approval)
        row = self._shared.execute(
            "SELECT request, decision FROM goondan_approvals WHERE workspace_id = %s AND id = %s",
            (self.workspace_id, approval)).fetchone()
        if row is None:
            return None
        return _approval(json.loads(row[0]), json.loads(row[1]) if row[1] else None, now)

    def list(self, *, status: str | None = None, agent: str | None = None,
             instance_key: str | None = None, now: datetime | None = None) -> list[Approval]:
        rows = self._shared.execute(
            "SELECT request, decision FROM goondan_approvals WHERE workspace_id = %s "
            "AND (%s::text IS NULL OR agent_name = %s) AND (%s::text IS NULL OR instance_key = %s)"
            " ORDER BY requested_at, id",
            (self.workspace_id, agent, agent, instance_key, instance_key)).fetchall()
        found = [_approval(json.loads(r[0]), json.loads(r[1]) if r[1] else None, now)
                 for r in rows]
        return [a for a in found if status is None or a.status == status]

    def decide(self, approval: str, *, approve: bool, by: str, via: str,
               args: JsonObject | None = None, note: str | None = None, reason: str | None = None,
               now: datetime | None = None) -> tuple[Approval, bool]:
        current = self.get(approval, now=now)
        if current is None:
            raise WorkspaceError(
                f"no approval {approval!r} in this workspace", code="E_APPROVAL_NOT_FOUND",
                suggestion="'goondan approvals list' shows the ids; check --bundle and --store",
            )
        if current.decision is not None:
            return current, False
        document, mine = decision_document(current, approve=approve, by=by, via=via, args=args,
                                           note=note, reason=reason, now=now)
        cur = self._shared.execute(
            "UPDATE goondan_approvals SET decision = %s WHERE workspace_id = %s AND id = %s "
            "AND decision IS NULL", (_dumps(document), self.workspace_id, approval))
        won = cur.rowcount == 1
        found = self.get(approval, now=now)
        assert found is not None
        return found, won and mine

    def restore(self, request: JsonObject, decision: JsonObject | None) -> bool:
        """Store an approval as given (``goondan store copy``); False when its id exists."""
        from goondan.storage.postgres.snapshot import restore_approval

        _check_id(str(request.get("id")))
        return restore_approval(self._shared, self.workspace_id, request, decision)

    def remove_instance(self, agent: str, instance_key: str) -> int:
        cur = self._shared.execute(
            "DELETE FROM goondan_approvals WHERE workspace_id = %s AND agent_name = %s "
            "AND instance_key = %s", (self.workspace_id, agent, instance_key))
        return max(cur.rowcount, 0)


class PostgresQueue:
    """One durable input queue (the contract's ``InputQueue``); ``accept`` may refuse an
    entry read back, as the JSONL inbox's does."""

    def __init__(self, shared: SharedConnection, workspace_id: str, scope: str,
                 accept: Callable[[InboxEntry], bool] | None = None,
                 fence: Fence | None = None) -> None:
        self._shared = shared
        self.workspace_id = workspace_id
        self.scope = scope
        self._accept = accept
        self._fence = fence  # every write: enqueue, claim, confirm, take

    def __repr__(self) -> str:
        return f"<PostgresQueue {self.workspace_id}/{self.scope}>"

    def _entry(self, row: tuple[Any, ...]) -> InboxEntry | None:
        ident, event, agent, key, accepted = row[:5]
        if event is None:
            return None
        entry = InboxEntry(str(ident), json.loads(event), str(agent), str(key), str(accepted))
        return entry if self._accept is None or self._accept(entry) else None

    def open_entries(self) -> list[InboxEntry]:
        rows = self._shared.execute(
            "SELECT id, event, agent_name, instance_key, accepted_at, state, owner "
            "FROM goondan_inbox WHERE workspace_id = %s AND scope = %s AND state <> %s "
            "ORDER BY seq", (self.workspace_id, self.scope, _STARTED)).fetchall()
        pending: list[InboxEntry] = []
        for row in rows:
            state, owner = row[5], row[6]
            if state == _RESERVED and owner and owner_alive(str(owner)):
                continue  # a process runs it now
            entry = self._entry(row)
            if entry is not None:
                pending.append(entry)
        return pending

    def seen(self, input_id: str) -> bool:
        row = self._shared.execute(
            "SELECT 1 FROM goondan_inbox WHERE workspace_id = %s AND scope = %s AND id = %s",
            (self.workspace_id, self.scope, input_id)).fetchone()
        return row is not None

    def append_entry(self, event: JsonObject, agent: str, instance_key: str) -> InboxEntry:
        """Insert the input (one committed row) before it is acknowledged; an id already
        accepted is left as it is."""
        entry = InboxEntry(str(event["id"]), event, agent, instance_key, now_iso())
        self._shared.run(lambda conn: conn.execute(
            "INSERT INTO goondan_inbox (workspace_id, scope, id, agent_name, instance_key, "
            "accepted_at, event) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (self.workspace_id, self.scope, entry.id, agent, instance_key, entry.accepted_at,
             _dumps(event))), self._fence)
        return entry

    def claim(self, agent: str, instance_key: str, input_id: str, *, owner: str | None = None,
              written: bool = False) -> bool:
        def work(conn: Connection) -> bool:
            self._ensure_row(conn, agent, instance_key, input_id)
            row = conn.execute(
                "SELECT state, owner FROM goondan_inbox WHERE workspace_id = %s AND scope = %s "
                "AND id = %s FOR UPDATE", (self.workspace_id, self.scope, input_id)).fetchone()
            assert row is not None
            state, holder = row
            if state == _STARTED or (state == _RESERVED and holder and owner_alive(holder)):
                return False
            if state == _RESERVED and written:
                self._set(conn, input_id, None)
                return False
            self._set(conn, input_id, owner)
            return True

        return self._shared.run(work, self._fence)

    def _ensure_row(self, conn: Connection, agent: str, instance_key: str, input_id: str) -> None:
        # A claim may come for an id the queue never held (the JSONL claims are a file of
        # their own): it gets a row without an event.
        conn.execute(
            "INSERT INTO goondan_inbox (workspace_id, scope, id, agent_name, instance_key, "
            "accepted_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (self.workspace_id, self.scope, input_id, agent, instance_key, now_iso()))

    def _set(self, conn: Connection, input_id: str, owner: str | None) -> None:
        if owner is None:  # final: the event is in the conversation now, keep only the id
            conn.execute(
                "UPDATE goondan_inbox SET state = %s, owner = NULL, event = NULL "
                "WHERE workspace_id = %s AND scope = %s AND id = %s",
                (_STARTED, self.workspace_id, self.scope, input_id))
        else:
            conn.execute(
                "UPDATE goondan_inbox SET state = %s, owner = %s "
                "WHERE workspace_id = %s AND scope = %s AND id = %s",
                (_RESERVED, owner, self.workspace_id, self.scope, input_id))

    def confirm(self, agent: str, instance_key: str, input_id: str) -> None:
        def work(conn: Connection) -> None:
            self._ensure_row(conn, agent, instance_key, input_id)
            self._set(conn, input_id, None)

        self._shared.run(work, self._fence)

    def take(self, agent: str, instance_key: str, *, owner: str) -> InboxEntry | None:
        def work(conn: Connection) -> InboxEntry | None:
            rows = conn.execute(
                "SELECT id, event, agent_name, instance_key, accepted_at, state, owner "
                "FROM goondan_inbox WHERE workspace_id = %s AND scope = %s AND agent_name = %s "
                "AND instance_key = %s AND state <> %s ORDER BY seq FOR UPDATE SKIP LOCKED",
                (self.workspace_id, self.scope, agent, instance_key, _STARTED)).fetchall()
            for row in rows:
                if row[5] == _RESERVED and row[6] and owner_alive(str(row[6])):
                    continue
                entry = self._entry(row)
                if entry is None:
                    continue
                self._set(conn, entry.id, owner)
                return entry
            return None

        return self._shared.run(work, self._fence)

    def records(self) -> list[QueueRecord]:
        from goondan.storage.postgres.snapshot import queue_records

        return queue_records(self._shared, self.workspace_id, self.scope)

    def restore(self, record: QueueRecord) -> bool:
        from goondan.storage.postgres.snapshot import restore_queue_record

        return restore_queue_record(self._shared, self.workspace_id, self.scope, record)

    def close(self) -> None:
        return None
