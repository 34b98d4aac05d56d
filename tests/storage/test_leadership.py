"""The swarm's lease of ``goondan run --store`` (goondan/swarm/leadership.py; docs/orchestrator.md
"Failover") in one process, against the real PostgreSQL: standing by, taking over on release,
the fence of a node that lost the lease, and taking an instance from a stale leader's session.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from goondan.errors import InstanceLockedError
from goondan.storage.leases import StaleLeaseError
from goondan.storage.postgres.backend import PostgresBackend
from goondan.storage.postgres.db import Database
from goondan.storage.postgres.info import describe
from goondan.swarm.leadership import (
    Leadership,
    failover_status,
    lease_application_name,
    take_over_instance,
)
from tests.support.connector_e2e import wait_for


@pytest.fixture
def db(postgres_url: str) -> Iterator[Database]:
    with Database.open(postgres_url) as database:
        database.run(lambda c: c.execute("CREATE TABLE writes (id serial, value text)"))
        yield database


def _write(db: Database, node: Leadership, value: str) -> None:
    def work(conn: object) -> None:
        node.fence(conn)
        conn.execute("INSERT INTO writes (value) VALUES (%s)", (value,))  # type: ignore[attr-defined]

    db.run(work)


def test_a_second_node_stands_by_and_takes_over_when_the_first_releases(
    db: Database, postgres_url: str, tmp_path: Path,
) -> None:
    first = Leadership.open(db, "ws", "default", tmp_path / "a")
    second = Leadership.open(db, "ws", "default", tmp_path / "b")
    said: list[str] = []
    try:
        first.acquire(said.append)
        assert said == []  # it was free: active at once
        _write(db, first, "a1")
        got: list[int] = []
        waiting = threading.Thread(target=lambda: got.append(second.acquire(said.append)))
        waiting.start()
        wait_for(lambda: bool(said), 10, "the standby's announcement")
        assert "Standing by" in said[0] and str(tmp_path / "a") in said[0]
        status = failover_status(describe(postgres_url)["leases"], "default")
        assert status["active"]["stateRoot"] == str(tmp_path / "a")
        assert [s["stateRoot"] for s in status["standbys"]] == [str(tmp_path / "b")]
        with pytest.raises(StaleLeaseError):  # a standby writes nothing
            _write(db, second, "b0")
        first.close()  # released: the standby need not wait for the TTL
        waiting.join(timeout=10)
        assert got and got[0] > (first.granted or 0)
        _write(db, second, "b1")
        with pytest.raises(StaleLeaseError):  # the old token is refused from now on
            _write(db, first, "a2")
        assert failover_status(describe(postgres_url)["leases"])["standbys"] == []
    finally:
        first.close()
        second.close()
    assert [r[0] for r in db.run(lambda c: c.execute("SELECT value FROM writes ORDER BY id"))
            ] == ["a1", "b1"]


def test_a_new_leaders_process_takes_the_instance_from_an_older_tokens_session_only(
    postgres_url: str,
) -> None:
    from tests.support.backends import apply_schema

    apply_schema(postgres_url)
    stale = PostgresBackend.open(lease_application_name(postgres_url, 3))
    other = PostgresBackend.open(postgres_url)  # not under the lease: an admin tool, say
    new = PostgresBackend.open(lease_application_name(postgres_url, 7))
    try:
        held = stale.open_instance("ws", "worker", "k")
        with pytest.raises(InstanceLockedError):
            new.open_instance("ws", "worker", "k")
        assert take_over_instance(new.db, "ws", "worker", "k", 7) == 1
        mine = new.open_instance("ws", "worker", "k")
        mine.close()
        held.close()
        kept = other.open_instance("ws", "worker", "k")
        assert take_over_instance(new.db, "ws", "worker", "k", 7, wait=0.2) == 0
        with pytest.raises(InstanceLockedError):
            new.open_instance("ws", "worker", "k")
        kept.close()
    finally:
        for backend in (stale, other, new):
            backend.close()
