"""What ``goondan status --store postgresql://…`` says about a PostgreSQL store (read only).

It connects once (without the pool), never migrates, and reports the schema version, the
migrations this goondan would still apply, the store's id and every lease's last grant.
"""

from __future__ import annotations

from typing import Any

import psycopg

from goondan.storage.postgres.db import Database
from goondan.storage.postgres.migrate import applied_versions, check

__all__ = ["describe"]

_LEASES = """
SELECT name, owner, token, extract(epoch FROM expires_at - clock_timestamp())::float8
FROM goondan_leases ORDER BY name
"""


def describe(url: str) -> dict[str, Any]:
    """``{kind, url (masked), schemaVersion, pendingMigrations, storeId, leases: [...]}``."""
    db = Database(url, max_size=1)
    try:
        return _describe(db)
    except psycopg.Error as exc:  # a lost connection, no right to read the tables …
        raise db.unavailable(exc, action="read") from None


def _describe(db: Database) -> dict[str, Any]:
    with db.connect() as conn:
        pending = check(conn, where=db.where)  # E_STORE_SCHEMA_NEWER for a newer schema
        applied = applied_versions(conn)
        store_id = None
        leases: list[dict[str, Any]] = []
        if 1 in applied:  # migration 0001 made goondan_meta and goondan_leases
            row = conn.execute("SELECT value FROM goondan_meta WHERE key = 'storeId'").fetchone()
            store_id = row[0] if row else None
            for name, owner, token, left in conn.execute(_LEASES).fetchall():
                leases.append({
                    "name": name, "owner": owner, "token": int(token),
                    "held": left > 0, "expiresInSeconds": round(left, 3),
                })
    return {
        "kind": "postgres",
        "url": db.where,
        "schemaVersion": max(applied, default=0),
        "pendingMigrations": pending,
        "storeId": store_id,
        "leases": leases,
    }
