"""What only the PostgreSQL leases have to get right (goondan/storage/postgres/leases.py): a
write in flight is ordered before a takeover, and a leader stopped inside a write transaction
(SIGSTOP past its TTL, then SIGCONT) writes nothing after the takeover."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.storage.leases import StaleLeaseError
from goondan.storage.postgres.db import Database
from goondan.storage.postgres.leases import PostgresLeases, fenced

NAME = "orchestrator/ws/swarm"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(postgres_url: str) -> Iterator[Database]:
    with Database.open(postgres_url, max_size=6) as database:
        database.run(lambda c: c.execute("CREATE TABLE writes (id serial, value text)"))
        yield database


def _written(db: Database) -> list[str]:
    return [r[0] for r in db.run(lambda c: c.execute("SELECT value FROM writes ORDER BY id"))]


def test_fenced_outside_a_transaction_is_a_programming_error(db: Database) -> None:
    with db.connection() as conn, pytest.raises(RuntimeError, match="inside"):
        fenced(conn, NAME, 1)


def test_a_takeover_waits_for_the_write_in_flight_which_lands_first(db: Database) -> None:
    leases = PostgresLeases(db)
    old = leases.acquire_lease(NAME, "a", 0.3)
    assert old is not None
    inside, finish = threading.Event(), threading.Event()

    def slow_write(conn: Any) -> None:
        fenced(conn, NAME, old)
        conn.execute("INSERT INTO writes (value) VALUES ('old leader')")
        inside.set()
        assert finish.wait(10)

    writer = threading.Thread(target=db.run, args=(slow_write,))
    writer.start()
    assert inside.wait(10)
    deadline = time.monotonic() + 10  # the lease expires while the write is still open
    while leases.lease(NAME).held and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.02)
    assert leases.acquire_lease(NAME, "b", 30) is None  # the row is held by the write
    finish.set()
    writer.join(10)
    new = leases.acquire_lease(NAME, "b", 30)
    assert new is not None and new > old
    with pytest.raises(StaleLeaseError):
        db.run(lambda conn: fenced(conn, NAME, old))
    assert _written(db) == ["old leader"]


STOPPED_LEADER = """
import sys
from goondan.errors import GoondanError
from goondan.storage.postgres.db import Database
from goondan.storage.postgres.leases import PostgresLeases, fenced

db = Database.open(sys.argv[1], idle_in_transaction_timeout=0.5)
token = PostgresLeases(db).acquire_lease("{name}", "old", 1.0)

def write(conn):
    fenced(conn, "{name}", token)
    conn.execute("INSERT INTO writes (value) VALUES ('in flight when stopped')")
    print("inside", token, flush=True)
    sys.stdin.readline()  # SIGSTOP arrives here; SIGCONT and a line let it commit

for attempt in ("commit", "next write"):
    try:
        db.run(write)
        print(attempt, "ok", flush=True)
    except GoondanError as exc:
        print(attempt, exc.code, flush=True)
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_a_leader_stopped_inside_a_write_past_its_ttl_writes_nothing_after_takeover(
    db: Database, postgres_url: str
) -> None:
    leases = PostgresLeases(db)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPED_LEADER.replace("{name}", NAME), postgres_url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    try:
        assert child.stdin is not None and child.stdout is not None
        line = child.stdout.readline().split()
        assert line[:1] == ["inside"], line
        old = int(line[1])
        os.kill(child.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        new = None
        while new is None and time.monotonic() - stopped_at < 20:
            new = leases.acquire_lease(NAME, "standby", 30)
        took = time.monotonic() - stopped_at
        assert new is not None and new > old  # the stopped session's row lock was freed
        assert took < 10.0  # TTL 1 s + idle-in-transaction 0.5 s + the acquire's wait (~2.5 s)
        db.run(lambda c: (fenced(c, NAME, new), c.execute(
            "INSERT INTO writes (value) VALUES ('new leader')")))
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("\n")
        child.stdin.flush()
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait(10)
    # The stopped transaction lost its session: its commit fails (outcome unknown to it, but
    # not applied); its next write is refused by the fence.
    assert out.split("\n")[:2] == ["commit E_STORE_UNAVAILABLE", "next write E_STORE_LEASE_LOST"]
    assert _written(db) == ["new leader"]
