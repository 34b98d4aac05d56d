"""``goondan status --store STORE`` (docs/cli.md, docs/storage.md): a state-root path or a
PostgreSQL URL, from the option or ``GOONDAN_STORE``; a URL's password never printed."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from goondan.storage.postgres.db import Database
from goondan.storage.postgres.leases import PostgresLeases
from goondan.storage.postgres.migrate import known_migrations
from tests.support.cli_main import run
from tests.support.postgres import password_of


def test_a_path_as_the_store_is_the_state_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "elsewhere"
    code, out, _ = run(capsys, "status", "--all", "--store", str(other), "--json")
    assert code == 0 and json.loads(out) == {"swarms": []}
    code, out, _ = run(capsys, "status", "--all", "--store", str(other))
    assert code == 0 and f"No swarm is running under {other}." in out


def test_a_postgresql_store_is_described_with_its_url_masked(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    password = password_of(postgres_url)
    code, out, err = run(capsys, "status", "--all", "--store", postgres_url, "--json")
    assert code == 0, err
    store = json.loads(out)["store"]
    everything = [m.version for m in known_migrations()]
    assert store["kind"] == "postgres"
    assert store["url"] == postgres_url.replace(password, "***")
    assert (store["schemaVersion"], store["pendingMigrations"]) == (0, everything)
    assert store["leases"] == []
    assert password not in out + err

    with Database.open(postgres_url) as db:
        token = PostgresLeases(db).acquire_lease("swarm/ws/main", "host-a:4242", 30)
    code, out, err = run(capsys, "status", "--all", "--store", postgres_url, "--json")
    store = json.loads(out)["store"]
    assert (store["schemaVersion"], store["pendingMigrations"]) == (everything[-1], [])
    assert len(store["storeId"]) == 36
    [lease] = store["leases"]
    assert (lease["name"], lease["owner"], lease["token"], lease["held"]) == (
        "swarm/ws/main", "host-a:4242", token, True,
    )
    code, out, err = run(capsys, "status", "--all", "--store", postgres_url)
    assert code == 0
    assert f"store: {store['url']} (PostgreSQL, schema {everything[-1]:04d})" in out
    assert "lease swarm/ws/main: host-a:4242 (token" in out
    assert password not in out + err


def test_goondan_store_is_used_without_the_option(
    postgres_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOONDAN_STORE", postgres_url)
    code, out, _ = run(capsys, "status", "--all", "--json")
    assert code == 0 and json.loads(out)["store"]["kind"] == "postgres"


def test_a_bad_store_url_is_e_store_url_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "status", "--store", "mysql://u:Sup3rSecret@h/db")
    assert code == 3
    assert "[E_STORE_URL]" in err and "Sup3rSecret" not in out + err


def test_an_unreachable_store_is_e_store_unavailable_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql://u:Sup3rSecret@127.0.0.1:{port}/db?connect_timeout=2"
    code, out, err = run(capsys, "status", "--all", "--json", "--store", url)
    assert code == 3
    assert "E_STORE_UNAVAILABLE" in err and "Sup3rSecret" not in out + err


def test_a_store_migrated_by_a_newer_goondan_is_e_store_schema_newer(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with Database.open(postgres_url) as db:
        db.run(lambda c: c.execute(
            "INSERT INTO goondan_schema_migrations (version, name) VALUES (9999, 'future')"
        ))
    code, _, err = run(capsys, "status", "--all", "--store", postgres_url)
    assert code == 3 and "[E_STORE_SCHEMA_NEWER]" in err


def test_a_user_who_may_not_read_the_store_gets_e_store_unavailable(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import psycopg

    Database.open(postgres_url).close()  # migrated by the owner
    database = postgres_url.rsplit("/", 1)[1]
    role = f"reader_{database}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'reader-pw'")
    try:
        host = postgres_url.split("@", 1)[1].rsplit("/", 1)[0]
        code, out, err = run(capsys, "status", "--all", "--store",
                             f"postgresql://{role}:reader-pw@{host}/{database}")
        assert code == 3
        assert "[E_STORE_UNAVAILABLE]" in err and "cannot read" in err
        assert "permission denied" in err and "reader-pw" not in out + err
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {role}")
