"""One instance in PostgreSQL: the :class:`~goondan.storage.contract.InstanceStorage` of the
PostgreSQL backend (tables of ``migrations/0002_state.sql``).

The same protocol as the JSONL :class:`~goondan.workspace.InstanceStore`, decided by the same
pure planners (``plan_commit``, ``plan_recovery``), over rows instead of files:

* an open instance is locked by a session advisory lock on its row id, held in the ONE lock
  session of its :class:`~goondan.storage.postgres.db.Database` with the locks of all the other
  instances that Database has open (:mod:`goondan.storage.postgres.locks`): a second opener —
  another process, or this one — gets ``E_INSTANCE_LOCKED``, and a process that dies (its
  sessions end) releases them all, like the ``fcntl`` locks of the JSONL store. Its reads and
  writes run on the Database's pool: a process uses 1 lock session + a pool of ≤ 4 connections,
  whatever the number of its open instances;
* each event of the running turn is one row (``goondan_events``), committed before
  :meth:`PostgresInstanceStore.append_event` returns — asynchronously
  (``synchronous_commit = off``), as the turn journal's records: the JSONL store appends both
  without an fsync. A killed goondan process loses none of them; a crash of the server may
  lose the last of them (those after the last synchronous commit: the WAL is flushed in order);
* a commit is ONE transaction: the instance's committed position is moved from the position
  this store loaded (a different one is ``E_STORE_CONFLICT``, nothing is written), the new
  messages are inserted (or, for a rewrite, all of them replace the old rows), and the turn's
  events are deleted — so after a commit each message exists once, in ``goondan_messages``;
  it waits for its WAL flush (as the JSONL fold fsyncs), as do the instance's creation, its
  status and its extensions' state;
* :meth:`~PostgresInstanceStore.load` recovers events left by a process that died mid-turn
  exactly as the JSONL store does (fold, repair tool pairs), in one commit.

Every write transaction first runs the backend's ``fence`` (when one is given): the seam where
the lease's fencing token is checked, so a writer whose lease was taken over writes nothing.

A write is one transaction on a pooled connection (:meth:`Database.run
<goondan.storage.postgres.db.Database.run>`): a connection found broken before the commit was
sent runs the transaction once more on a fresh one (nothing was committed: the same event rows,
the same expected position); one lost while committing is ``E_STORE_UNAVAILABLE`` saying so.
An instance whose lock session was lost (the server restarted, the session was terminated)
writes nothing more: every write checks what is known of it for free, and the writes that wait
for their WAL flush (a commit, a status, an extension's state) first ask the lock session
itself (one ``SELECT 1``) — ``E_INSTANCE_LOCK_LOST``, nothing written. A lost
session is therefore found, at the latest, at the instance's next commit or status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

import psycopg

from goondan.conversation.codec import (
    decode_events,
    decode_messages,
    encode_event,
    encode_json_line,
    encode_message,
)
from goondan.conversation.messages import MessageEvent
from goondan.conversation.state import ConversationState, MessagePrefix
from goondan.errors import Diagnostic, InstanceLockedError, WorkspaceCorruptError, WorkspaceError
from goondan.storage.contract import Status, store_conflict
from goondan.storage.postgres.db import Connection, Database
from goondan.storage.postgres.locks import LOCK_CLASS, lock_key, lock_lost
from goondan.types import JsonObject, JsonValue, now_iso
from goondan.workspace.journal import OpenTurn, open_turn_of, parse_records
from goondan.workspace.paths import extension_file_name
from goondan.workspace.plans import Append, Noop, Rewrite, duplicate_ids, plan_commit, plan_recovery
from goondan.workspace.store import extension_state_bytes

__all__ = ["LOCK_CLASS", "Fence", "PostgresInstanceStore", "PostgresTurnJournal", "lock_key"]

Fence = Callable[[psycopg.Connection[Any]], None]
T = TypeVar("T")
_STATUSES = ("idle", "processing", "waitingForApproval")


def _line(data: bytes) -> str:
    return data.decode("utf-8").rstrip("\n")


def _lines(rows: Iterable[tuple[Any, ...]]) -> bytes:
    return b"".join(str(row[0]).encode("utf-8") + b"\n" for row in rows)


class PostgresTurnJournal:
    """The turn journal of one instance (``goondan_turn_records``); written by its store."""

    def __init__(self, store: PostgresInstanceStore) -> None:
        self._store = store
        self._next = 0

    def append(self, record: JsonObject) -> None:
        """Insert ``record`` at the next position (a taken position: ``E_STORE_CONFLICT``)."""
        text = _line(encode_json_line(record))
        store = self._store
        params = (store.instance_id, self._next, text)
        store.write("append to the turn journal", lambda conn: conn.execute(
            "INSERT INTO goondan_turn_records (instance_id, seq, record) VALUES (%s, %s, %s)",
            params), flush=False)
        self._next += 1

    def records(self) -> list[JsonObject]:
        def work(conn: Connection) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT record FROM goondan_turn_records WHERE instance_id = %s ORDER BY seq",
                (self._store.instance_id,)).fetchall()

        rows = self._store.read("read the turn journal", work)
        return parse_records(_lines(rows), self._store.label("turn"))

    def open_turn(self) -> OpenTurn | None:
        return open_turn_of(self.records())

    def clear(self) -> None:
        store = self._store
        store.write("clear the turn journal", lambda conn: conn.execute(
            "DELETE FROM goondan_turn_records WHERE instance_id = %s", (store.instance_id,)),
            flush=False)
        self._next = 0

    def close(self) -> None:
        return None


class PostgresInstanceStore:
    """One (agent, instanceKey) in PostgreSQL, open and locked (see the module docstring)."""

    def __init__(self, db: Database, instance_id: int, *, agent_name: str, instance_key: str,
                 workspace_id: str, metadata: dict[str, Any], generation: int,
                 fence: Fence | None = None) -> None:
        self.db = db
        self.instance_id = instance_id
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.workspace_id = workspace_id
        self.recovery_diagnostics: list[Diagnostic] = []
        self._metadata = metadata
        self._generation = generation  # the lock session holding this instance's lock
        self._fence = fence
        self._base: MessagePrefix | None = None
        self._next_event = 0
        self._events_dirty = True  # unknown until load() looked
        self._extension_cache: dict[str, bytes] = {}
        self._journal = PostgresTurnJournal(self)
        self._closed = False
        # One transaction of this instance at a time: the runtime writes a turn's events from
        # the event loop while a status write may run in a worker thread.
        self._lock = threading.RLock()

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, db: Database, workspace_id: str, agent_name: str, instance_key: str, *,
             create: bool = True, fence: Fence | None = None) -> PostgresInstanceStore:
        """Find (or create) the instance's row and lock it in the Database's lock session;
        call :meth:`load` next."""
        name = f"{agent_name}:{instance_key}"
        where = f"{db.where} {workspace_id}/{name}"
        try:
            instance_id = db.run(lambda conn: _find_or_create(
                conn, workspace_id, agent_name, instance_key, create))
            if instance_id is None:
                raise _not_found(workspace_id, agent_name, instance_key)
            generation = db.locks.acquire(instance_id)
        except psycopg.Error as exc:
            raise db.unavailable(exc) from None
        if generation is None:
            here = db.locks.holds(instance_id)  # flock refuses a second opener in one process too
            raise InstanceLockedError(
                f"instance {name} is already open in this process" if here
                else f"instance {name} is open in another process", location=where,
                suggestion="close it first" if here
                else "stop that process (or wait for it), then retry",
            )
        try:  # read once locked: what its last holder wrote is all there
            row = db.run(lambda conn: conn.execute(_OPENED, (instance_id,) * 3).fetchone())
            if row is None:  # deleted between the two
                raise _not_found(workspace_id, agent_name, instance_key)
            metadata = _parse_metadata(str(row[0]), workspace_id, agent_name, instance_key)
        except BaseException as exc:
            db.locks.release(instance_id, generation)
            if isinstance(exc, psycopg.Error):
                raise db.unavailable(exc) from None
            raise
        store = cls(db, instance_id, agent_name=agent_name, instance_key=instance_key,
                    workspace_id=workspace_id, metadata=metadata, generation=generation,
                    fence=fence)
        store._journal._next = int(row[1])  # the journal is read (and written) before load()
        store._next_event = int(row[2])
        return store

    def label(self, what: str) -> str:
        """Where a record lives, for diagnostics (``postgres:<ws>/<agent>:<key>/<what>``)."""
        return f"postgres:{self.workspace_id}/{self.agent_name}:{self.instance_key}/{what}"

    # -- properties ------------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self._metadata)

    @property
    def status(self) -> str:
        return str(self._metadata.get("status", "idle"))

    @property
    def journal(self) -> PostgresTurnJournal:
        self._require_open()
        return self._journal

    @property
    def closed(self) -> bool:
        return self._closed

    # -- transactions ----------------------------------------------------------------------------
    def write(self, what: str, work: Callable[[Connection], T], *, flush: bool = True) -> T:
        """``work(conn)`` in one write transaction on a pooled connection, fenced first; a
        unique violation (a position another writer took) is ``E_STORE_CONFLICT``, a lost
        connection ``E_STORE_UNAVAILABLE`` (saying whether it was lost while committing; one
        lost before is retried once, :meth:`Database.run`), a lost lock session
        ``E_INSTANCE_LOCK_LOST``, another database error ``E_WORKSPACE_IO``.

        ``flush=False`` commits with ``synchronous_commit = off``: the commit returns once its
        WAL record is in the server's buffers, without waiting for the WAL flush — what the
        JSONL store does for the same writes (appended, not fsync-ed; see the module doc).
        ``flush=True`` also asks the lock session whether it still holds the instance's lock
        first (module doc)."""
        self._require_open()
        # Before the transaction, not in it: a wait for the lock session (another thread
        # opening an instance) never keeps a pooled connection idle in a transaction.
        if not self.db.locks.alive(self._generation, probe=flush):
            raise self._lock_lost()

        def transaction(conn: Connection) -> T:
            if not flush:
                conn.execute("SET LOCAL synchronous_commit = off")
            if self._fence is not None:
                self._fence(conn)
            return work(conn)

        try:
            with self._lock:
                return self.db.run(transaction)
        except psycopg.errors.UniqueViolation as exc:
            raise store_conflict(what, location=self.label("")) from exc
        except psycopg.Error as exc:
            raise self._database_error(what, exc) from None

    def read(self, what: str, work: Callable[[Connection], T], *,
             transaction: bool = False) -> T:
        """``work(conn)`` on a pooled connection (in one transaction when ``transaction``),
        database errors reported as :meth:`write` reports them."""
        self._require_open()
        try:
            with self._lock:
                return (self.db.run if transaction else self.db.read)(work)
        except psycopg.Error as exc:
            raise self._database_error(what, exc) from None

    def _database_error(self, what: str, exc: psycopg.Error) -> WorkspaceError:
        return WorkspaceError(
            f"cannot {what} for {self.agent_name}:{self.instance_key}: {exc}",
            code="E_WORKSPACE_IO", location=self.label(""),
            suggestion="check that the database is reachable, then reopen the instance",
        )

    def _lock_lost(self) -> WorkspaceError:
        return lock_lost(f"{self.agent_name}:{self.instance_key}", self.label(""))

    # -- loading and recovery --------------------------------------------------------------------
    def load(self, *, keep_open_calls: bool = False) -> ConversationState:
        """The conversation with leftover events folded and tool pairs repaired; no events."""
        if self._base is not None and not self._events_dirty:
            return ConversationState.adopt(self._base.to_list())
        self._require_open()
        first_load = self._base is None
        self.recovery_diagnostics = diagnostics = []

        def work(conn: Connection) -> tuple[Any, list[Any], list[Any]]:
            return (
                conn.execute("SELECT message_count FROM goondan_instances WHERE id = %s",
                             (self.instance_id,)).fetchone(),
                conn.execute("SELECT message FROM goondan_messages WHERE instance_id = %s "
                             "ORDER BY position", (self.instance_id,)).fetchall(),
                conn.execute("SELECT event, seq FROM goondan_events WHERE instance_id = %s "
                             "ORDER BY seq", (self.instance_id,)).fetchall())

        count, base_rows, event_rows = self.read("load the conversation", work, transaction=True)
        base_file = decode_messages(_lines(base_rows), file=self.label("messages"))
        if count is None or int(count[0]) != len(base_file.records):
            raise WorkspaceCorruptError(
                f"{self.label('messages')}: {len(base_file.records)} message rows, the instance "
                f"says {count[0] if count else None}", location=self.label("messages"),
                suggestion="restore the database from a backup",
            )
        events_file = decode_events(_lines(event_rows), file=self.label("events"))
        base, leftovers = base_file.records, events_file.records
        diagnostics.extend(duplicate_ids(base, self.label("messages")))
        self._base = MessagePrefix(base)
        self._next_event = int(event_rows[-1][1]) + 1 if event_rows else 0
        plan = plan_recovery(base, leftovers, events_file=self.label("events"),
                             base_file=self.label("messages"), keep_open_calls=keep_open_calls)
        diagnostics.extend(plan.diagnostics)
        self._events_dirty = bool(leftovers)
        if plan.repairs and all(e.type == "append" for e in plan.repairs):
            turn_id = next((str(e.extra["turnId"]) for e in reversed(leftovers)
                            if e.extra.get("turnId")), "recovery")
            self.append_events(plan.repairs, turn_id)
        state = self.commit(plan.state)
        if first_load and self.status == "processing":
            self.set_status("idle")  # we hold the lock: its last holder died mid-turn
        return state

    # -- writing ---------------------------------------------------------------------------------
    def append_event(self, event: MessageEvent, turn_id: str) -> None:
        """Insert one event row (with ``turnId``), committed when this returns."""
        self.append_events([event], turn_id)

    def append_events(self, events: Iterable[MessageEvent], turn_id: str) -> None:
        """Insert several event rows in one transaction."""
        rows = [(self.instance_id, self._next_event + index, _line(encode_event(e, turn_id)))
                for index, e in enumerate(events)]
        if not rows:
            return

        def work(conn: Connection) -> None:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO goondan_events (instance_id, seq, event) VALUES (%s, %s, %s)",
                    rows)

        self.write("append events", work, flush=False)
        self._next_event += len(rows)
        self._events_dirty = True

    def commit(self, state: ConversationState) -> ConversationState:
        """Fold ``state`` into the committed messages and delete its events: one transaction
        that moves the committed position from the one this store loaded."""
        self._require_open()
        plan = plan_commit(state, self._base)
        expected = len(self._base) if self._base is not None else state.base_length
        if not isinstance(plan, Noop) or self._events_dirty:
            if isinstance(plan, Noop):
                final = expected
            else:
                final = (expected + len(plan.messages) if isinstance(plan, Append)
                         else len(plan.messages))

            def work(conn: Connection) -> None:
                with conn.cursor() as cur:
                    cur.execute(
                        "UPDATE goondan_instances SET message_count = %s "
                        "WHERE id = %s AND message_count = %s",
                        (final, self.instance_id, expected))
                    if cur.rowcount != 1:
                        raise store_conflict(f"commit of {self.agent_name}:{self.instance_key}",
                                             location=self.label("messages"))
                    if isinstance(plan, Rewrite):
                        cur.execute("DELETE FROM goondan_messages WHERE instance_id = %s",
                                    (self.instance_id,))
                    if isinstance(plan, Append | Rewrite):
                        start = expected if isinstance(plan, Append) else 0
                        cur.executemany(
                            "INSERT INTO goondan_messages (instance_id, position, message) "
                            "VALUES (%s, %s, %s)",
                            [(self.instance_id, start + i, _line(encode_message(m)))
                             for i, m in enumerate(plan.messages)])
                    cur.execute("DELETE FROM goondan_events WHERE instance_id = %s",
                                (self.instance_id,))

            self.write("commit the turn", work)
            self._next_event = 0
            self._events_dirty = False
        if self._base is not None and isinstance(plan, Noop):
            return ConversationState.adopt(self._base.to_list())
        committed = state.successor()
        self._base = committed.committed_prefix()
        return committed

    def set_status(self, status: Status) -> None:
        """Record ``status`` and ``updatedAt`` in the instance's metadata."""
        if status not in _STATUSES:
            raise ValueError(
                f"status must be 'idle', 'processing' or 'waitingForApproval', not {status!r}"
            )
        meta = {**self._metadata, "status": status, "updatedAt": now_iso()}
        params = (_json_text(meta), self.instance_id)
        self.write("set the status", lambda conn: conn.execute(
            "UPDATE goondan_instances SET metadata = %s WHERE id = %s", params))
        self._metadata = meta

    # -- extension state -------------------------------------------------------------------------
    def load_extension_state(self, name: str) -> JsonValue | None:
        params = (self.instance_id, extension_file_name(name))
        row = self.read(f"load the state of extension {name!r}", lambda conn: conn.execute(
            "SELECT value FROM goondan_extension_state WHERE instance_id = %s AND name = %s",
            params).fetchone())
        if row is None:
            return None
        data = str(row[0]).encode("utf-8")
        value: JsonValue = json.loads(data)
        self._extension_cache[name] = data
        return value

    def save_extension_state(self, name: str, value: JsonValue) -> bool:
        self._require_open()
        data = extension_state_bytes(name, value)
        if self._extension_cache.get(name) == data:
            return False
        params = (self.instance_id, extension_file_name(name), data.decode("utf-8"))
        self.write(f"save the state of extension {name!r}", lambda conn: conn.execute(
            "INSERT INTO goondan_extension_state (instance_id, name, value) "
            "VALUES (%s, %s, %s) ON CONFLICT (instance_id, name) "
            "DO UPDATE SET value = excluded.value", params))
        self._extension_cache[name] = data
        return True

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the instance's lock (idempotent), once a write in flight has ended."""
        if not self._closed:
            self._closed = True
            with self._lock:
                self.db.locks.release(self.instance_id, self._generation)

    def __enter__(self) -> PostgresInstanceStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _require_open(self) -> None:
        if self._closed:
            raise WorkspaceError(
                f"instance {self.agent_name}:{self.instance_key} is closed",
                code="E_WORKSPACE_CLOSED", suggestion="open the instance again",
            )

    def __repr__(self) -> str:
        return (f"PostgresInstanceStore(agent={self.agent_name!r}, key={self.instance_key!r}, "
                f"id={self.instance_id}, open={not self._closed})")


def _json_text(value: Any) -> str:
    """metadata.json's form."""
    return json.dumps(value, ensure_ascii=False, indent=2) + "\n"


def _find_or_create(conn: Connection, workspace_id: str, agent_name: str, instance_key: str,
                    create: bool) -> int | None:
    """The instance's row id; a new row (status idle) when there is none and ``create``."""
    key = (workspace_id, agent_name, instance_key)
    found = "SELECT id FROM goondan_instances WHERE workspace_id = %s AND agent_name = %s " \
        "AND instance_key = %s"
    row = conn.execute(found, key).fetchone()
    if row is None and create:
        now = now_iso()
        meta = {"status": "idle", "agentName": agent_name, "instanceKey": instance_key,
                "createdAt": now, "updatedAt": now}
        conn.execute(
            "INSERT INTO goondan_instances (workspace_id, agent_name, instance_key, metadata) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", (*key, _json_text(meta)))
        row = conn.execute(found, key).fetchone()
    return int(row[0]) if row else None


# What an instance opened reads once locked: its metadata and the next journal and event seqs.
_OPENED = (
    "SELECT metadata, "
    "(SELECT coalesce(max(seq) + 1, 0) FROM goondan_turn_records WHERE instance_id = %s), "
    "(SELECT coalesce(max(seq) + 1, 0) FROM goondan_events WHERE instance_id = %s) "
    "FROM goondan_instances WHERE id = %s"
)


def _not_found(workspace_id: str, agent_name: str, instance_key: str) -> WorkspaceError:
    return WorkspaceError(
        f"no instance {instance_key!r} of agent {agent_name!r} in workspace {workspace_id}",
        code="E_WORKSPACE_INSTANCE_NOT_FOUND",
        suggestion="goondan instance list shows the existing instances",
    )


def _parse_metadata(text: str, workspace_id: str, agent: str, key: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise WorkspaceCorruptError(
            f"postgres:{workspace_id}/{agent}:{key}: invalid metadata ({exc})",
            suggestion="fix the row of goondan_instances") from exc
    return value if isinstance(value, dict) else {}
