"""The PostgreSQL store's connections (goondan/storage/postgres/db.py) against a real server:
a clear error when the store cannot be used, one retry on a broken connection, none when the
commit itself was cut off."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from goondan.errors import WorkspaceError
from goondan.storage.postgres.db import Database
from goondan.storage.postgres.migrate import applied_versions, known_migrations
from tests.support.postgres import PostgresCluster


@pytest.fixture
def db(postgres_url: str) -> Iterator[Database]:
    with Database.open(postgres_url) as database:
        database.run(lambda conn: conn.execute("CREATE TABLE items (n int PRIMARY KEY)"))
        yield database


def _terminate_goondan_backends(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'goondan'"
        ).fetchall()
    return len(rows)


def _count(db: Database) -> int:
    row = db.run(lambda conn: conn.execute("SELECT count(*) FROM items").fetchone())
    assert row is not None
    return int(row[0])


def test_open_migrates_a_new_database(postgres_url: str) -> None:
    with Database.open(postgres_url) as db:
        versions = db.run(applied_versions)
    assert versions == [m.version for m in known_migrations()]


def test_a_transaction_whose_connection_broke_before_commit_runs_once_more(
    db: Database,
) -> None:
    """The session ends in the middle of the work (as when the server restarts): the work runs
    again, whole, on a fresh connection, and its write is stored once."""
    calls: list[int] = []

    def insert(conn: Any) -> None:
        calls.append(1)
        conn.execute("INSERT INTO items VALUES (1)")
        if len(calls) == 1:
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    db.run(insert)
    assert len(calls) == 2
    assert _count(db) == 1


def test_a_connection_that_keeps_breaking_is_e_store_unavailable_after_one_retry(
    db: Database,
) -> None:
    calls: list[int] = []

    def doomed(conn: Any) -> None:
        calls.append(1)
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with pytest.raises(WorkspaceError) as caught:
        db.run(doomed)
    assert caught.value.code == "E_STORE_UNAVAILABLE"
    assert "while committing" not in caught.value.message
    assert len(calls) == 2


def test_pooled_connections_killed_while_idle_are_replaced(
    db: Database, postgres_url: str
) -> None:
    assert _count(db) == 0  # the pool holds a live connection now
    assert _terminate_goondan_backends(postgres_url) >= 1
    db.run(lambda conn: conn.execute("INSERT INTO items VALUES (1)"))
    assert _count(db) == 1


def test_a_read_whose_connection_broke_runs_once_more(db: Database) -> None:
    calls: list[int] = []

    def read(conn: Any) -> int:
        calls.append(1)
        if len(calls) == 1:  # the session ends under the first attempt
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        row = conn.execute("SELECT count(*) FROM items").fetchone()
        return int(row[0])

    assert db.read(read) == 0
    assert len(calls) == 2


def test_a_connection_lost_during_the_commit_is_not_retried(db: Database) -> None:
    """A deferred trigger ends the session at COMMIT: whether it committed is unknown to the
    client, so run() must not do the work again and must say so."""
    db.run(lambda conn: conn.execute(
        """
        CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON items
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION die();
        """
    ))
    calls: list[int] = []

    def insert(conn: Any) -> None:
        calls.append(1)
        conn.execute("INSERT INTO items VALUES (7)")

    with pytest.raises(WorkspaceError) as caught:
        db.run(insert)
    assert caught.value.code == "E_STORE_UNAVAILABLE"
    assert "while committing" in caught.value.message
    assert "may or may not" in caught.value.message
    assert calls == [1]


def test_a_statement_error_is_the_callers_and_is_not_retried(db: Database) -> None:
    db.run(lambda conn: conn.execute("INSERT INTO items VALUES (1)"))
    calls: list[int] = []

    def duplicate(conn: Any) -> None:
        calls.append(1)
        conn.execute("INSERT INTO items VALUES (2)")
        conn.execute("INSERT INTO items VALUES (1)")

    with pytest.raises(psycopg.errors.UniqueViolation):
        db.run(duplicate)
    assert calls == [1]
    assert _count(db) == 1  # the whole transaction rolled back


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_is_e_store_unavailable_without_the_password() -> None:
    url = f"postgresql://goondan:hunter2-secret@127.0.0.1:{_closed_port()}/x"
    with pytest.raises(WorkspaceError) as caught:
        Database.open(url, connect_timeout=2)
    error = caught.value
    assert error.code == "E_STORE_UNAVAILABLE"
    assert "postgresql://goondan:***@127.0.0.1" in error.message
    assert "hunter2-secret" not in str(error.to_dict())


def test_a_wrong_password_is_e_store_unavailable_and_masked(
    postgres_cluster: PostgresCluster,
) -> None:
    url = postgres_cluster.url().replace(postgres_cluster.password, "hunter2-secret")
    with pytest.raises(WorkspaceError) as caught:
        Database.open(url)
    assert caught.value.code == "E_STORE_UNAVAILABLE"
    assert "password authentication failed" in caught.value.message
    assert "hunter2-secret" not in str(caught.value.to_dict())


def test_the_urls_own_options_are_kept_beside_the_stores_session_settings(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA tenant_a")
    url = f"{postgres_url}?options=-c%20search_path%3Dtenant_a&application_name=mine"
    with Database.open(url) as db:
        settings = db.run(lambda c: c.execute(
            "SELECT current_setting('search_path'), "
            "current_setting('idle_in_transaction_session_timeout'), "
            "current_setting('application_name'), "
            "to_regclass('tenant_a.goondan_leases') IS NOT NULL, "
            "to_regclass('public.goondan_leases') IS NULL"
        ).fetchone())
    assert settings == ("tenant_a", "5s", "mine", True, True)


def test_a_user_who_may_not_create_the_tables_gets_e_store_unavailable_saying_so(
    postgres_url: str, postgres_cluster: PostgresCluster
) -> None:
    """PostgreSQL 15 no longer lets every user create tables in ``public``: the first start
    with a user that does not own the database cannot migrate."""
    role = f"limited_{postgres_url.rsplit('/', 1)[1]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'limited-pw'")
    try:
        url = f"postgresql://{role}:limited-pw@127.0.0.1:{postgres_cluster.port}/" + (
            postgres_url.rsplit("/", 1)[1]
        )
        with pytest.raises(WorkspaceError) as caught:
            Database.open(url)
        error = caught.value
        assert error.code == "E_STORE_UNAVAILABLE"
        assert "cannot migrate the schema of" in error.message
        assert "permission denied" in error.message
        assert "limited-pw" not in str(error.to_dict())
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")


def _keepalives(conn: Any) -> tuple[str, ...]:
    row = conn.execute(
        "SELECT current_setting('tcp_keepalives_idle'), "
        "current_setting('tcp_keepalives_interval'), "
        "current_setting('tcp_keepalives_count')").fetchone()
    return tuple(str(v) for v in row)


def test_the_server_probes_a_silent_client_within_seconds(postgres_url: str) -> None:
    """An instance's lock is its session: the server must notice a client machine that vanished
    without closing its connections (a lost Ray node) in seconds, not after the kernel's two
    hours — on the pooled connections and on an instance's own (``connect``); a URL's own
    keepalive options win."""
    with Database.open(postgres_url) as db:
        assert db.run(_keepalives) == ("10", "2", "3")
        with db.connect() as conn:
            assert _keepalives(conn) == ("10", "2", "3")
    url = f"{postgres_url}?options=-c%20tcp_keepalives_idle%3D30"
    with Database.open(url) as db:
        assert db.run(_keepalives) == ("30", "2", "3")
