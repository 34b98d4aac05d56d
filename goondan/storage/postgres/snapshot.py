"""Instance snapshots of the PostgreSQL store (:class:`~goondan.storage.contract.InstanceSnapshot`):
read in one transaction without the instance's lock, written whole in one transaction
(``goondan inspect --store``, ``goondan store copy``; docs/storage.md "Moving state").

Rows hold the same JSON text as the JSONL files' lines, so a snapshot read here equals the one
read from a state root holding the same instance.
"""

from __future__ import annotations

import json
from typing import Any

from goondan.errors import InstanceLockedError
from goondan.storage.contract import InstanceSnapshot, QueueRecord, instance_exists
from goondan.storage.postgres.db import Connection
from goondan.storage.postgres.shared import SharedConnection
from goondan.storage.postgres.store import LOCK_CLASS, lock_key

__all__ = ["queue_records", "queue_scopes", "read_snapshot", "read_version", "restore_approval",
           "restore_queue_record", "restore_snapshot", "workspace_ids"]


def workspace_ids(shared: SharedConnection) -> list[str]:
    rows = shared.execute(
        "SELECT workspace_id FROM goondan_instances UNION "
        "SELECT workspace_id FROM goondan_approvals UNION "
        "SELECT workspace_id FROM goondan_inbox ORDER BY 1", ()).fetchall()
    return [str(row[0]) for row in rows]


def _texts(conn: Connection, query: str, instance_id: int) -> list[str]:
    return [str(row[0]) for row in conn.execute(query, (instance_id,)).fetchall()]


def read_snapshot(shared: SharedConnection, workspace_id: str, agent: str,
                  key: str) -> InstanceSnapshot | None:
    def work(conn: Connection) -> InstanceSnapshot | None:
        row = conn.execute(
            "SELECT id, metadata FROM goondan_instances WHERE workspace_id = %s "
            "AND agent_name = %s AND instance_key = %s", (workspace_id, agent, key)).fetchone()
        if row is None:
            return None
        ident = int(row[0])
        meta = json.loads(row[1])
        extensions = {str(name): str(value) for name, value in conn.execute(
            "SELECT name, value FROM goondan_extension_state WHERE instance_id = %s "
            "ORDER BY name", (ident,)).fetchall()}
        return InstanceSnapshot(
            agent_name=agent, instance_key=key,
            metadata=meta if isinstance(meta, dict) else {},
            messages=_texts(conn, "SELECT message FROM goondan_messages WHERE instance_id = %s "
                            "ORDER BY position", ident),
            events=_texts(conn, "SELECT event FROM goondan_events WHERE instance_id = %s "
                          "ORDER BY seq", ident),
            journal=_texts(conn, "SELECT record FROM goondan_turn_records WHERE instance_id = "
                           "%s ORDER BY seq", ident),
            extensions=extensions,
        )

    return shared.run(work)


def read_version(shared: SharedConnection, workspace_id: str, agent: str,
                 key: str) -> str | None:
    """One statement: the committed position, the running turn's events (count and last
    seq) and a checksum of the metadata (None when the instance is missing)."""
    row = shared.execute(
        "SELECT i.message_count, md5(i.metadata), count(e.seq), coalesce(max(e.seq), -1) "
        "FROM goondan_instances i LEFT JOIN goondan_events e ON e.instance_id = i.id "
        "WHERE i.workspace_id = %s AND i.agent_name = %s AND i.instance_key = %s "
        "GROUP BY i.id", (workspace_id, agent, key)).fetchone()
    return None if row is None else ":".join(str(part) for part in row)


def restore_snapshot(shared: SharedConnection, workspace_id: str, snapshot: InstanceSnapshot, *,
                     replace: bool = False) -> None:
    agent, key = snapshot.agent_name, snapshot.instance_key

    def work(conn: Connection) -> None:
        row = conn.execute(
            "SELECT id FROM goondan_instances WHERE workspace_id = %s AND agent_name = %s "
            "AND instance_key = %s FOR UPDATE", (workspace_id, agent, key)).fetchone()
        if row is not None:
            if not replace:
                raise instance_exists(workspace_id, agent, key, shared.db.where)
            got = conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)",
                               (LOCK_CLASS, lock_key(int(row[0])))).fetchone()
            if not got or not got[0]:
                here = shared.db.locks.holds(int(row[0]))
                raise InstanceLockedError(
                    f"instance {agent}:{key} is open in "
                    + ("this process" if here else "another process"),
                    suggestion="stop that process first",
                )
            conn.execute("DELETE FROM goondan_instances WHERE id = %s", (row[0],))
        meta = json.dumps(snapshot.metadata, ensure_ascii=False, indent=2) + "\n"
        inserted = conn.execute(
            "INSERT INTO goondan_instances (workspace_id, agent_name, instance_key, metadata, "
            "message_count) VALUES (%s, %s, %s, %s, %s) RETURNING id",
            (workspace_id, agent, key, meta, len(snapshot.messages))).fetchone()
        assert inserted is not None
        ident = int(inserted[0])
        rows: list[tuple[str, list[tuple[Any, ...]]]] = [
            ("INSERT INTO goondan_messages (instance_id, position, message) VALUES (%s, %s, %s)",
             [(ident, i, text) for i, text in enumerate(snapshot.messages)]),
            ("INSERT INTO goondan_events (instance_id, seq, event) VALUES (%s, %s, %s)",
             [(ident, i, text) for i, text in enumerate(snapshot.events)]),
            ("INSERT INTO goondan_turn_records (instance_id, seq, record) VALUES (%s, %s, %s)",
             [(ident, i, text) for i, text in enumerate(snapshot.journal)]),
            ("INSERT INTO goondan_extension_state (instance_id, name, value) "
             "VALUES (%s, %s, %s)",
             [(ident, name, text) for name, text in snapshot.extensions.items()]),
        ]
        with conn.cursor() as cur:
            for query, params in rows:
                if params:
                    cur.executemany(query, params)

    shared.run(work)


def restore_approval(shared: SharedConnection, workspace_id: str, request: dict[str, Any],
                     decision: dict[str, Any] | None) -> bool:
    def dumps(document: dict[str, Any]) -> str:
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"))

    cur = shared.execute(
        "INSERT INTO goondan_approvals (workspace_id, id, agent_name, instance_key, "
        "requested_at, request, decision) VALUES (%s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT DO NOTHING",
        (workspace_id, str(request["id"]), str(request.get("agent")),
         str(request.get("instanceKey")), str(request.get("requestedAt")), dumps(request),
         None if decision is None else dumps(decision)))
    return cur.rowcount == 1


def queue_scopes(shared: SharedConnection, workspace_id: str) -> list[str]:
    rows = shared.execute("SELECT DISTINCT scope FROM goondan_inbox WHERE workspace_id = %s "
                          "ORDER BY scope", (workspace_id,)).fetchall()
    return [str(row[0]) for row in rows]


def queue_records(shared: SharedConnection, workspace_id: str, scope: str) -> list[QueueRecord]:
    rows = shared.execute(
        "SELECT id, agent_name, instance_key, accepted_at, event, state FROM goondan_inbox "
        "WHERE workspace_id = %s AND scope = %s ORDER BY seq", (workspace_id, scope)).fetchall()
    return [QueueRecord(str(ident), True) if state == "started" else QueueRecord(
        str(ident), False, str(agent), str(key), str(accepted),
        json.loads(event) if event is not None else None)
        for ident, agent, key, accepted, event, state in rows]


def restore_queue_record(shared: SharedConnection, workspace_id: str, scope: str,
                         record: QueueRecord) -> bool:
    event = None if record.started or record.event is None else json.dumps(
        record.event, ensure_ascii=False, separators=(",", ":"))
    cur = shared.execute(
        "INSERT INTO goondan_inbox (workspace_id, scope, id, agent_name, instance_key, "
        "accepted_at, event, state) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT DO NOTHING",
        (workspace_id, scope, record.id, record.agent, record.instance_key, record.accepted_at,
         event, "started" if record.started else "pending"))
    return cur.rowcount == 1
