"""The instance locks of one process on the PostgreSQL store: one session holds them all.

An open instance is locked by a session advisory lock, ``pg_try_advisory_lock(LOCK_CLASS,
lock_key(id))``, as the JSONL store locks a file with ``flock``: a second opener gets
``E_INSTANCE_LOCKED``, and a process that dies (its sessions end) releases every lock it held.
Every instance a :class:`~goondan.storage.postgres.db.Database` opens is locked in the SAME
session, its :class:`LockSession`: one dedicated connection, opened with the first instance and
closed with the Database, named like the pool's connections (``application_name``, so a
failover's ``goondan:lease:<token>`` names it too). The instances' reads and writes run on the
Database's pool; so a process holds **1 lock session + a pool of ≤ 4 connections**, whatever the
number of instances it has open.

Advisory locks are re-entrant within a session; the JSONL store's ``flock`` is not, even inside
one process. So the lock session also keeps the set of instance ids it holds and refuses a second
open of one of them (``E_INSTANCE_LOCKED``) without asking the server.

**A lost session.** When the lock session ends — the server restarted, the session was
terminated (a failover's take-over terminates a stale leader's lock session:
:func:`goondan.swarm.leadership.take_over_instance`), the network dropped it — this process no
longer owns any of the instances it locked, and another may open them. Each instance remembers
the session (:attr:`LockSession.generation`) that locked it; :meth:`LockSession.alive` says
whether that session is still this process's — from what is already known (free: every write
asks), or by asking the server (one ``SELECT 1``: the writes that wait for their WAL flush — a
commit, a status, an extension's state — ask). An instance whose session was lost writes
nothing more: ``E_INSTANCE_LOCK_LOST`` (:func:`lock_lost`); it must be reopened. The next
instance opened gets a new lock session.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from goondan.errors import WorkspaceError

__all__ = ["LOCK_CLASS", "LOCK_LOST", "LockSession", "lock_key", "lock_lost"]

# The first key of the two-key advisory locks that hold instances (the second: the row id).
LOCK_CLASS = 0x6764  # "gd"
LOCK_LOST = "E_INSTANCE_LOCK_LOST"
Connection = psycopg.Connection[Any]


def lock_key(instance_id: int) -> int:
    """The instance's row id as the int4 second key of its advisory lock."""
    return (instance_id % 0xFFFFFFFF) - 0x80000000


def lock_lost(name: str, location: str) -> WorkspaceError:
    """``E_INSTANCE_LOCK_LOST`` for instance ``name`` (``agent:key``)."""
    return WorkspaceError(
        f"instance {name} is no longer locked by this process: the database session that held "
        "its lock ended (the server restarted, or the session was terminated — a failover "
        "takes a stale leader's instances that way); nothing was written",
        code=LOCK_LOST, location=location,
        suggestion="reopen the instance (another process may hold it now)",
    )


class LockSession:
    """The one session holding this process's instance locks (see the module docstring).

    ``connect`` opens a new connection (``E_STORE_UNAVAILABLE`` when it cannot). Thread-safe:
    the instances of a pooled host open and close from several threads."""

    def __init__(self, connect: Callable[[], Connection]) -> None:
        self._connect = connect
        self._mutex = threading.Lock()
        self._conn: Connection | None = None
        self._held: set[int] = set()
        self.generation = 0  # which session: a new one after each loss

    def __repr__(self) -> str:
        return f"<LockSession held={len(self._held)} generation={self.generation}>"

    @property
    def pid(self) -> int | None:
        """The server process of the current session (None while none is open)."""
        conn = self._conn
        return None if conn is None or conn.closed else int(conn.info.backend_pid)

    def acquire(self, instance_id: int) -> int | None:
        """Lock the instance: the generation of the session that holds it now, or None when it
        is held already — by this process or by another."""
        with self._mutex:
            for attempt in (1, 2):
                if self._conn is None:
                    self._conn = self._connect()
                if instance_id in self._held:
                    return None
                conn = self._conn
                try:
                    row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)",
                                       (LOCK_CLASS, lock_key(instance_id))).fetchone()
                except psycopg.Error:
                    if attempt == 2 or not (conn.broken or conn.closed):
                        raise
                    self._lose()  # ended (a restart …): its locks went with it; a new session
                    continue
                if not row or not row[0]:
                    return None
                self._held.add(instance_id)
                return self.generation
        raise AssertionError("unreachable")

    def holds(self, instance_id: int) -> bool:
        """Whether this process has the instance open (as far as it knows)."""
        with self._mutex:
            return instance_id in self._held

    def alive(self, generation: int, *, probe: bool) -> bool:
        """Whether session ``generation`` still holds this process's locks; ``probe``: ask the
        server (one round trip), else only what is known already (free)."""
        with self._mutex:
            conn = self._conn
            if generation != self.generation or conn is None:
                return False
            if probe:
                try:
                    conn.execute("SELECT 1")
                except psycopg.Error:  # the session ended: every lock it held is gone
                    self._lose()
                    return False
            return True

    def release(self, instance_id: int, generation: int) -> None:
        """Unlock the instance (nothing to do when its session was lost)."""
        with self._mutex:
            conn = self._conn
            if generation != self.generation or conn is None:
                return
            self._held.discard(instance_id)
            try:
                conn.execute("SELECT pg_advisory_unlock(%s, %s)",
                             (LOCK_CLASS, lock_key(instance_id)))
            except psycopg.Error:
                if conn.broken or conn.closed:
                    self._lose()

    def _lose(self) -> None:
        conn, self._conn = self._conn, None
        self._held.clear()
        self.generation += 1
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """End the session and so every lock it holds (the Database closes)."""
        with self._mutex:
            conn = self._conn
            if conn is not None and self._held and not (conn.broken or conn.closed):
                # Unlocked before the connection closes: the server ends a closed session a
                # moment later, and the next opener must not find the locks still held.
                with contextlib.suppress(psycopg.Error):  # the session is going anyway
                    conn.execute("SELECT pg_advisory_unlock_all()")
            self._lose()
