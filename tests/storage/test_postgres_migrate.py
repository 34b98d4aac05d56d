"""Versioned migrations of the PostgreSQL store (goondan/storage/postgres/migrate.py) against a
real server."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from goondan.errors import WorkspaceError
from goondan.storage.postgres.migrate import applied_versions, check, known_migrations, migrate


def _connect(url: str) -> Any:
    return psycopg.connect(url, autocommit=True)


def test_the_shipped_migrations_are_numbered_from_0001_without_gaps() -> None:
    versions = [m.version for m in known_migrations()]
    assert versions == list(range(1, len(versions) + 1))
    assert known_migrations()[0].name == "leases"


def test_a_new_database_is_migrated_once_and_a_second_start_applies_nothing(
    postgres_url: str,
) -> None:
    everything = [m.version for m in known_migrations()]
    with _connect(postgres_url) as conn:
        assert check(conn) == everything
        assert migrate(conn) == everything
        assert migrate(conn) == []
        assert check(conn) == []
        assert applied_versions(conn) == everything
        tables = {
            r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        }
        assert {"goondan_schema_migrations", "goondan_meta", "goondan_leases"} <= tables
        store_id = conn.execute("SELECT value FROM goondan_meta WHERE key = 'storeId'")
        assert len(store_id.fetchone()[0]) == 36


def test_two_processes_starting_together_do_not_race(postgres_url: str) -> None:
    """Several connections migrate the same new database at once: the advisory lock makes them
    take turns; exactly one applies each version, none fails."""
    results: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def start() -> None:
        try:
            with _connect(postgres_url) as conn:
                barrier.wait(10)
                results.append(migrate(conn))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    everything = [m.version for m in known_migrations()]
    assert sorted(results, key=len) == [[], [], [], everything]


def test_a_database_migrated_by_newer_code_is_refused_and_left_alone(postgres_url: str) -> None:
    with _connect(postgres_url) as conn:
        migrate(conn)
        newest = known_migrations()[-1].version
        conn.execute(
            "INSERT INTO goondan_schema_migrations (version, name) VALUES (%s, 'future')",
            (newest + 1,),
        )
        for attempt in (check, migrate):
            with pytest.raises(WorkspaceError) as caught:
                attempt(conn, where="postgresql://u:***@h/db")
            assert caught.value.code == "E_STORE_SCHEMA_NEWER"
            assert f"{newest + 1:04d}" in caught.value.message
        assert applied_versions(conn)[-1] == newest + 1


def test_a_failing_migration_leaves_the_database_as_it_was(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from goondan.storage.postgres import migrate as module

    shipped = known_migrations()
    broken = module.Migration(shipped[-1].version + 1, "broken", "SELECT * FROM no_such_table")
    monkeypatch.setattr(module, "known_migrations", lambda: [*shipped, broken])
    with _connect(postgres_url) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            module.migrate(conn)
        assert applied_versions(conn) == []
        assert conn.execute("SELECT to_regclass('goondan_leases')").fetchone() == (None,)
