"""The PostgreSQL :class:`~goondan.storage.contract.StorageBackend`.

One object per deployment's database URL (:meth:`PostgresBackend.open` connects and applies
the pending migrations, :mod:`goondan.storage.postgres.migrate`). Opening an instance locks it in
the Database's one lock session (:mod:`goondan.storage.postgres.locks`: the locks of all the
instances this process opened on it, for as long as each is open); the instances' reads and
writes, approvals, queues and listings use the pool of
:class:`~goondan.storage.postgres.db.Database`. So a process holds 1 lock session + a pool of ≤ 4
connections, whatever the number of its open instances. :meth:`PostgresBackend.delete_instance`
(and ``restore(..., replace=True)``) try the instance's lock on a pooled connection — another
session than the lock session — so they refuse an instance open in this process too.

``fence``: called first inside every write transaction of an open instance, of a queue and of
an approval request, with its connection; it raises when this process's lease token is no
longer valid, so a writer that lost its lease writes nothing (a person's decision on an
approval is not written on behalf of a lease and is not fenced). :func:`lease_fence` makes one
from a lease name and token (:func:`goondan.storage.postgres.leases.fenced`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from goondan.errors import InstanceLockedError, WorkspaceCorruptError
from goondan.storage.contract import InstanceSnapshot
from goondan.storage.postgres.db import Connection, Database
from goondan.storage.postgres.leases import fenced
from goondan.storage.postgres.shared import PostgresApprovals, PostgresQueue, SharedConnection
from goondan.storage.postgres.snapshot import (
    queue_scopes,
    read_snapshot,
    read_version,
    restore_snapshot,
    workspace_ids,
)
from goondan.storage.postgres.store import LOCK_CLASS, Fence, PostgresInstanceStore, lock_key
from goondan.workspace.inbox import InboxEntry
from goondan.workspace.journal import OpenTurn, open_turn_of, parse_records

if TYPE_CHECKING:
    from goondan.storage.postgres.spans import PostgresSpans

__all__ = ["PostgresBackend", "lease_fence"]


def lease_fence(name: str, token: int) -> Fence:
    """The fence of writes made on behalf of lease ``name`` held with ``token``."""
    def fence(conn: Connection) -> None:
        fenced(conn, name, token)

    return fence


class PostgresBackend:
    """A PostgreSQL database as goondan's store (see the module docstring)."""

    def __init__(self, db: Database, *, fence: Fence | None = None) -> None:
        self.db = db
        self._fence = fence
        self._shared = SharedConnection(db)

    @classmethod
    def open(cls, url: str, *, fence: Fence | None = None,
             apply_migrations: bool = True) -> PostgresBackend:
        """Connect to ``url`` (``E_STORE_UNAVAILABLE`` when it cannot) and migrate the schema."""
        return cls(Database.open(url, apply_migrations=apply_migrations), fence=fence)

    def with_fence(self, fence: Fence | None) -> PostgresBackend:
        """The same store (same pool) whose instances' writes run ``fence`` first."""
        return PostgresBackend(self.db, fence=fence)

    def __repr__(self) -> str:
        return f"PostgresBackend({self.db.where!r})"  # masked: the URL may carry a password

    def open_instance(self, workspace_id: str, agent_name: str, instance_key: str, *,
                      create: bool = True) -> PostgresInstanceStore:
        return PostgresInstanceStore.open(self.db, workspace_id, agent_name, instance_key,
                                          create=create, fence=self._fence)

    def instances(self, workspace_id: str) -> Iterator[dict[str, Any]]:
        import json

        rows = self._shared.execute(
            "SELECT agent_name, instance_key, metadata FROM goondan_instances "
            "WHERE workspace_id = %s ORDER BY agent_name, instance_key", (workspace_id,))
        for agent, key, text in rows.fetchall():
            try:
                meta = json.loads(text)
            except ValueError:
                meta = {}
            yield {**(meta if isinstance(meta, dict) else {}), "agentName": agent,
                   "instanceKey": key}

    def delete_instance(self, workspace_id: str, agent_name: str, instance_key: str) -> bool:
        def work(conn: Connection) -> bool:
            row = conn.execute(
                "SELECT id FROM goondan_instances WHERE workspace_id = %s AND agent_name = %s "
                "AND instance_key = %s FOR UPDATE",
                (workspace_id, agent_name, instance_key)).fetchone()
            if row is None:
                return False
            got = conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)",
                               (LOCK_CLASS, lock_key(int(row[0])))).fetchone()
            if not got or not got[0]:
                here = self.db.locks.holds(int(row[0]))
                raise InstanceLockedError(
                    f"instance {agent_name}:{instance_key} is in use by "
                    + ("this process" if here else "another process"),
                    suggestion="close it first" if here else "stop that process first",
                )
            conn.execute("DELETE FROM goondan_instances WHERE id = %s", (row[0],))
            return True

        return self._shared.run(work)

    def open_turns(self, workspace_id: str) -> list[tuple[str, str, OpenTurn]]:
        rows = self._shared.execute(
            "SELECT i.agent_name, i.instance_key, r.record FROM goondan_turn_records r "
            "JOIN goondan_instances i ON i.id = r.instance_id WHERE i.workspace_id = %s "
            "ORDER BY i.agent_name, i.instance_key, r.seq", (workspace_id,)).fetchall()
        grouped: dict[tuple[str, str], list[bytes]] = {}
        for agent, key, record in rows:
            grouped.setdefault((str(agent), str(key)), []).append(str(record).encode() + b"\n")
        found: list[tuple[str, str, OpenTurn]] = []
        for (agent, key), lines in grouped.items():
            try:
                turn = open_turn_of(parse_records(b"".join(lines), f"{agent}:{key}/turn"))
            except WorkspaceCorruptError:
                continue  # reported when the instance opens
            if turn is not None:
                found.append((agent, key, turn))
        return found

    def interrupted_instances(self, workspace_id: str) -> list[tuple[str, str]]:
        return [(agent, key) for agent, key, turn in self.open_turns(workspace_id)
                if not turn.parked]

    def approvals(self, workspace_id: str) -> PostgresApprovals:
        return PostgresApprovals(self._shared, workspace_id, self._fence)

    def workspaces(self) -> list[str]:
        return workspace_ids(self._shared)

    def queue_scopes(self, workspace_id: str) -> list[str]:
        return queue_scopes(self._shared, workspace_id)

    def snapshot(self, workspace_id: str, agent_name: str,
                 instance_key: str) -> InstanceSnapshot | None:
        return read_snapshot(self._shared, workspace_id, agent_name, instance_key)

    def version(self, workspace_id: str, agent_name: str, instance_key: str) -> str | None:
        return read_version(self._shared, workspace_id, agent_name, instance_key)

    def restore(self, workspace_id: str, snapshot: InstanceSnapshot, *,
                replace: bool = False) -> None:
        restore_snapshot(self._shared, workspace_id, snapshot, replace=replace)

    def queue(self, workspace_id: str, scope: str,
              accept: Callable[[InboxEntry], bool] | None = None) -> PostgresQueue:
        return PostgresQueue(self._shared, workspace_id, scope, accept, self._fence)

    def close(self) -> None:
        self._shared.close()

    def spans(self) -> PostgresSpans:
        """The span table of ``inspect trace`` (``goondan_spans``), on this backend's pool."""
        from goondan.storage.postgres.spans import PostgresSpans

        return PostgresSpans(self._shared)
