"""Connections to the PostgreSQL store: one URL, a small pool, one transaction per unit of work.

:meth:`Database.open` connects once (a clear ``E_STORE_UNAVAILABLE`` when it cannot: refused,
wrong password, unknown database …), applies the pending migrations
(:mod:`goondan.storage.postgres.migrate`) and then keeps a small pool (1–4 connections by
default; a goondan process runs few transactions at a time).

:meth:`Database.run` runs a function in one transaction. When the connection turns out to be
broken (the server restarted, a proxy dropped an idle connection, a backend was terminated)
**before** the commit was sent, the pool's idle connections are checked and the whole function
runs once more on a fresh connection — the transaction had not committed, so nothing is done
twice. A connection lost *during* the commit is not retried: whether it committed is unknown,
and the caller hears ``E_STORE_UNAVAILABLE`` saying so (writes carry an expected position or a
fencing token, so re-doing one after reopening is refused rather than applied twice).

:meth:`Database.read` runs a read the same way but without a transaction (each statement on its
own), retried once on a broken connection whatever happened (a read changes nothing).

Besides the pool, a Database that opens instances has ONE more session, :attr:`Database.locks`
(:class:`~goondan.storage.postgres.locks.LockSession`): it holds the advisory locks of all the
instances this Database has open, whose reads and writes run on the pool. A process therefore
uses 1 lock session + a pool of ≤ 4 connections, whatever the number of its open instances.

Sessions have ``idle_in_transaction_session_timeout`` (5 s by default): a process stopped in the
middle of a transaction (SIGSTOP, a partition) loses it, and with it the row locks that would
otherwise keep a standby from taking its lease over. They also have server-side TCP keepalives
(``_KEEPALIVES``), so the session of a client machine that vanished ends in seconds.

Every message names the store by its masked URL (:func:`goondan.storage.url.mask_url`) and has
the password removed from the driver's text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from goondan.errors import WorkspaceError
from goondan.storage.postgres.locks import LockSession
from goondan.storage.postgres.migrate import migrate
from goondan.storage.url import mask_url, redact

__all__ = ["STORE_UNAVAILABLE", "Connection", "Database"]

STORE_UNAVAILABLE = "E_STORE_UNAVAILABLE"
T = TypeVar("T")
# The server probes an idle client after 10 s, every 2 s, 3 times: a client machine that vanished
# without closing its connections (a lost Ray node) loses its sessions — and the instance locks
# they hold — in ~16 s instead of the kernel's default two hours. Before the URL's own options,
# which win.
_KEEPALIVES = "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3"
Connection = psycopg.Connection[Any]


class Database:
    """A pool of autocommit connections to one PostgreSQL store (use :meth:`open`)."""

    def __init__(
        self,
        url: str,
        *,
        max_size: int = 4,
        connect_timeout: float = 10.0,
        idle_in_transaction_timeout: float = 5.0,
    ) -> None:
        self._url = url
        self.where = mask_url(url)
        self.connect_timeout = connect_timeout
        try:
            given = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise self.unavailable(exc) from None
        # The URL's own ``options`` (a search_path …) are kept; ours are added after them.
        idle_ms = max(1, round(idle_in_transaction_timeout * 1000))
        ours = f"-c idle_in_transaction_session_timeout={idle_ms}"
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": given.get("connect_timeout") or max(1, round(connect_timeout)),
            "application_name": given.get("application_name") or "goondan",
            "options": f"{_KEEPALIVES} {given.get('options') or ''} {ours}",
        }
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            url, kwargs=self._kwargs, min_size=1, max_size=max_size, open=False,
            timeout=connect_timeout, name="goondan",
        )
        self.locks = LockSession(self.new_connection)  # opened with the first instance

    @classmethod
    def open(cls, url: str, *, apply_migrations: bool = True, **options: Any) -> Database:
        """Connect, migrate the schema (unless told not to) and open the pool."""
        db = cls(url, **options)
        with db.connect() as conn:
            if apply_migrations:
                try:
                    migrate(conn, where=db.where)
                except psycopg.Error as exc:  # no right to create tables, a lost connection …
                    raise db.unavailable(exc, action="migrate the schema of") from None
        db._pool.open(wait=False)
        return db

    def unavailable(
        self, exc: BaseException, *, during_commit: bool = False, action: str = "use"
    ) -> WorkspaceError:
        """``E_STORE_UNAVAILABLE`` for ``exc``, the password removed from its text."""
        detail = redact(str(exc).strip() or type(exc).__name__, self._url)
        if during_commit:
            message = (
                f"the connection to {self.where} was lost while committing; the transaction "
                f"may or may not have been applied: {detail}"
            )
        else:
            message = f"cannot {action} the PostgreSQL store {self.where}: {detail}"
        return WorkspaceError(
            message, code=STORE_UNAVAILABLE, location=self.where,
            suggestion="check that the server is running and reachable, and the URL's user, "
            "password and database (--store / GOONDAN_STORE)",
        )

    def new_connection(self) -> Connection:
        """A new connection of its own (not from the pool), named as the pool's; the caller
        closes it."""
        try:
            return psycopg.connect(self._url, **self._kwargs)
        except psycopg.Error as exc:
            raise self.unavailable(exc) from None

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A new connection of its own (not from the pool), closed after the block."""
        conn = self.new_connection()
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection (autocommit) for the block."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self.unavailable(exc) from None

    def run(self, work: Callable[[Connection], T]) -> T:
        """``work(conn)`` in one transaction, committed when it returns; see the module doc."""
        for attempt in (1, 2):
            used: Connection | None = None
            committing = False
            try:
                with self.connection() as conn:
                    used = conn
                    with conn.transaction():
                        result = work(conn)
                        committing = True
                    return result
            except psycopg.Error as exc:  # the session's end may come as any class (25P03 …)
                if used is None or not (used.broken or used.closed):
                    raise  # a statement's own failure (lock timeout …): the caller's to handle
                if attempt == 1 and not committing:
                    self._pool.check()  # drop the other idle connections the outage broke
                    continue
                raise self.unavailable(exc, during_commit=committing) from None
        raise AssertionError("unreachable")

    def read(self, work: Callable[[Connection], T]) -> T:
        """``work(conn)`` without a transaction (autocommit: it must only read), run once more
        on a fresh connection when the first one turns out to be broken."""
        for attempt in (1, 2):
            used: Connection | None = None
            try:
                with self.connection() as conn:
                    used = conn
                    return work(conn)
            except psycopg.Error as exc:
                if used is None or not (used.broken or used.closed):
                    raise
                if attempt == 1:
                    self._pool.check()
                    continue
                raise self.unavailable(exc) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.locks.close()
        self._pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Database({self.where!r})"
