"""Leases with fencing on PostgreSQL (:mod:`goondan.storage.leases` states the contract).

One row per lease in ``goondan_leases`` (migration 0001); tokens come from the sequence
``goondan_lease_tokens``, so they grow across every lease and are never reused. Time is the
server's ``clock_timestamp()``: the clocks of the machines that compete for a lease do not
matter.

* :meth:`PostgresLeases.acquire_lease` is one ``INSERT … ON CONFLICT DO UPDATE … WHERE`` the
  lease is free, expired or already the caller's: two owners racing for it are serialised by
  the row, exactly one wins. It waits at most :data:`ACQUIRE_WAIT` for writes in flight under
  the old token (they hold the row shared) and answers ``None`` (try again) after that.
* :func:`fenced` is what every write transaction made on behalf of a lease calls first: it
  reads the lease row ``FOR SHARE`` and raises :class:`~goondan.storage.leases.StaleLeaseError`
  unless the token is the row's and the lease has not expired. The shared row lock lasts until
  the transaction ends, so a takeover (an ``UPDATE`` of the row) waits for the write to commit:
  the write is ordered before the new owner's, never after. A process stopped in the middle of
  such a transaction loses it after ``idle_in_transaction_session_timeout``
  (:mod:`goondan.storage.postgres.db`), which frees the row for the takeover.
"""

from __future__ import annotations

from typing import Any

import psycopg

from goondan.storage.leases import Lease, StaleLeaseError, check_ttl
from goondan.storage.postgres.db import Connection, Database

__all__ = ["ACQUIRE_WAIT", "PostgresLeases", "fenced"]

ACQUIRE_WAIT = 1.0  # seconds

_ACQUIRE = """
INSERT INTO goondan_leases AS l (name, owner, token, acquired_at, renewed_at, expires_at)
VALUES (%(name)s, %(owner)s, nextval('goondan_lease_tokens'), clock_timestamp(),
        clock_timestamp(), clock_timestamp() + %(ttl)s * interval '1 second')
ON CONFLICT (name) DO UPDATE SET
    token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()
                 THEN l.token ELSE EXCLUDED.token END,
    acquired_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()
                       THEN l.acquired_at ELSE EXCLUDED.acquired_at END,
    owner = EXCLUDED.owner,
    renewed_at = EXCLUDED.renewed_at,
    expires_at = EXCLUDED.expires_at
WHERE l.expires_at <= clock_timestamp() OR l.owner = EXCLUDED.owner
RETURNING token
"""

_RENEW = """
UPDATE goondan_leases
SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + %s * interval '1 second'
WHERE name = %s AND token = %s AND expires_at > clock_timestamp()
RETURNING token
"""

_RELEASE = """
UPDATE goondan_leases SET expires_at = clock_timestamp()
WHERE name = %s AND token = %s AND expires_at > clock_timestamp()
RETURNING token
"""

_LEASE = """
SELECT owner, token, extract(epoch FROM expires_at - clock_timestamp())::float8
FROM goondan_leases WHERE name = %s
"""


def fenced(conn: Connection, name: str, token: int) -> None:
    """Refuse the current transaction's writes unless ``token`` holds lease ``name`` now.

    Call it first in every write transaction made on behalf of a lease (inside
    ``conn.transaction()`` / :meth:`Database.run`); raises ``StaleLeaseError``.
    """
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("fenced() must run inside the write's transaction")
    row = conn.execute(
        "SELECT token, expires_at > clock_timestamp() FROM goondan_leases "
        "WHERE name = %s FOR SHARE",
        (name,),
    ).fetchone()
    if row is None or int(row[0]) != token or not row[1]:
        raise StaleLeaseError(name, token, current=int(row[0]) if row else None)


class PostgresLeases:
    """:class:`~goondan.storage.leases.LeaseStore` on a :class:`Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        params = {"name": name, "owner": owner, "ttl": check_ttl(ttl)}

        def acquire(conn: Connection) -> int | None:
            conn.execute(f"SET LOCAL lock_timeout = '{round(ACQUIRE_WAIT * 1000)}ms'")
            row = conn.execute(_ACQUIRE, params).fetchone()
            return int(row[0]) if row else None

        try:
            return self.db.run(acquire)
        except psycopg.errors.LockNotAvailable:
            return None  # a write under the current token is in flight: ask again later

    def renew_lease(self, name: str, token: int, ttl: float) -> bool:
        return self._one(_RENEW, (check_ttl(ttl), name, token))

    def release_lease(self, name: str, token: int) -> bool:
        return self._one(_RELEASE, (name, token))

    def lease(self, name: str) -> Lease | None:
        row = self.db.run(lambda conn: conn.execute(_LEASE, (name,)).fetchone())
        if row is None:
            return None
        return Lease(name, str(row[0]), int(row[1]), float(row[2]))

    def fenced(self, conn: Connection, name: str, token: int) -> None:
        """:func:`fenced` (also reachable from the store object)."""
        fenced(conn, name, token)

    def _one(self, sql: str, params: tuple[Any, ...]) -> bool:
        row = self.db.run(lambda conn: conn.execute(sql, params).fetchone())
        return row is not None
