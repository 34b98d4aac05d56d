"""The PostgreSQL store's schema: versioned migrations, applied automatically at start.

Migrations are the files ``migrations/NNNN_what.sql`` of this package (``NNNN`` the version).
:func:`migrate` applies the pending ones in version order, **all in one transaction**, under a
transaction-scoped advisory lock: two processes starting together against a new database take
turns — the second finds everything applied and does nothing — and a migration that fails
leaves the database as it was. Each applied version is a row of ``goondan_schema_migrations``.

A database migrated by a newer goondan (a version this code does not know) is refused with
``E_STORE_SCHEMA_NEWER``: old code must not write a schema it does not understand. A released
migration is never edited; a change is the next number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from goondan.errors import WorkspaceError

__all__ = [
    "MIGRATION_LOCK",
    "SCHEMA_NEWER",
    "Migration",
    "applied_versions",
    "check",
    "known_migrations",
    "migrate",
]

SCHEMA_NEWER = "E_STORE_SCHEMA_NEWER"
# pg_advisory_xact_lock key of the migration run: b"goondan\0" as a big-endian bigint.
MIGRATION_LOCK = 7453298428242652672
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS goondan_schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def known_migrations() -> list[Migration]:
    """The migrations shipped with this code, in version order (one per version)."""
    found: dict[int, Migration] = {}
    folder = resources.files(__package__ or "goondan.storage.postgres") / "migrations"
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match is None:
            continue
        version = int(match.group(1))
        if version in found:  # a packaging mistake, caught by the tests
            raise RuntimeError(f"two migrations numbered {version:04d}")
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def applied_versions(conn: Any) -> list[int]:
    """The versions recorded in the database (empty for a database never migrated)."""
    row = conn.execute("SELECT to_regclass('goondan_schema_migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return []
    rows = conn.execute("SELECT version FROM goondan_schema_migrations ORDER BY version")
    return [int(r[0]) for r in rows.fetchall()]


def _too_new(applied: list[int], known: list[Migration], where: str) -> WorkspaceError:
    newest = known[-1].version if known else 0
    return WorkspaceError(
        f"the store's schema is at version {max(applied):04d}, newer than this goondan knows "
        f"({newest:04d}): a newer goondan migrated it",
        code=SCHEMA_NEWER, location=where,
        suggestion="upgrade goondan on this machine to the version the other machines run",
    )


def migrate(conn: Any, *, where: str = "the PostgreSQL store") -> list[int]:
    """Apply the pending migrations on ``conn`` (an autocommit connection); the versions applied.

    ``where`` names the store in errors (a masked URL). Raises ``E_STORE_SCHEMA_NEWER`` when the
    database has a version this code does not know; nothing is changed then.
    """
    known = known_migrations()
    applied_now: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(_CREATE_TABLE)
        applied = applied_versions(conn)
        if applied and max(applied) > (known[-1].version if known else 0):
            raise _too_new(applied, known, where)
        done = set(applied)
        for migration in known:
            if migration.version in done:
                continue
            conn.execute(migration.sql)
            conn.execute(
                "INSERT INTO goondan_schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied_now.append(migration.version)
    return applied_now


def check(conn: Any, *, where: str = "the PostgreSQL store") -> list[int]:
    """The versions still to apply (read only), or ``E_STORE_SCHEMA_NEWER``."""
    known = known_migrations()
    applied = applied_versions(conn)
    if applied and max(applied) > (known[-1].version if known else 0):
        raise _too_new(applied, known, where)
    return [m.version for m in known if m.version not in set(applied)]
