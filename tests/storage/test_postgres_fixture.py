"""The test suite's own PostgreSQL (tests/support/postgres.py): real, isolated per test, and
never left running when the test process dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.postgres import PostgresCluster, remove_stale_directories

ROOT = Path(__file__).resolve().parents[2]


def test_each_test_gets_a_fresh_database_on_loopback(
    postgres_url: str, postgres_cluster: PostgresCluster
) -> None:
    import psycopg

    assert postgres_url.startswith("postgresql://postgres:")
    assert "@127.0.0.1:" in postgres_url
    with psycopg.connect(postgres_url) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE scratch (x int)")
        server = conn.execute("SELECT inet_server_addr()::text, current_setting('fsync')")
        assert server.fetchone() == ("127.0.0.1/32", "off")


def test_a_second_test_does_not_see_the_first_ones_tables(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT to_regclass('public.scratch') IS NULL").fetchone()
        assert row == (True,)


def test_a_wrong_password_is_refused(postgres_cluster: PostgresCluster) -> None:
    import psycopg

    url = postgres_cluster.url().replace(postgres_cluster.password, "wrong")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(url, connect_timeout=5)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


CHILD = """
import sys, time
from tests.support.postgres import start_cluster
cluster = start_cluster()
print(cluster.process.pid, cluster.directory, flush=True)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_the_server_dies_with_the_test_process_that_started_it() -> None:
    """SIGKILL of the test process leaves no postmaster behind (parent-death signal)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    line = child.stdout.readline().split()
    assert line, "the child did not start a cluster"
    server_pid = int(line[0])
    assert _alive(server_pid)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    deadline = time.monotonic() + 10
    while _alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server_pid)
    # Its directory stays behind (nobody ran the cleanup); the next cluster start removes it.
    leftover = Path(line[1])
    assert leftover.is_dir()
    remove_stale_directories()
    assert not leftover.exists()
