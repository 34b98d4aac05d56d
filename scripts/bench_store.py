"""Benchmark of the stores (docs/storage.md): JSONL state root vs PostgreSQL, side by side.

This is the skeleton of issue 36's benchmark: the raw cost of one durable append + commit on
each backend, and of a lease renewal, measured the same way in one run. What a turn pays on
each backend (K=0 and K=20 turn overhead, ingress events/s, 1,000 conversations × 2 events)
is added when the PostgreSQL conversation store is in place; the rows below are its floor.

Rows (median and p95 of ``--ops`` operations after warm-up, wall time per operation):

* ``append``: one JSON line written with one ``O_APPEND`` write (the JSONL events.jsonl default,
  no fsync) / one ``INSERT`` committed with ``synchronous_commit=off`` (PostgreSQL's nearest
  equivalent: reaches the server's memory, flushed within ~0.2 s);
* ``append + flush``: the line and an ``fsync`` (what connector inboxes and a fold-commit pay) /
  one ``INSERT`` + ``COMMIT`` waiting for the WAL flush (PostgreSQL's default);
* ``fenced append + flush``: the same, checking a lease's fencing token first
  (``JsonlLeases.fenced`` / ``postgres.leases.fenced``);
* ``lease renew``: ``renew_lease`` (JSONL: the lease file replaced atomically with fsync).

PostgreSQL: ``--postgres URL`` (or ``GOONDAN_STORE=postgresql://…``) measures that server, over
its network; without one, a throwaway cluster on 127.0.0.1 is started from Debian's server
binaries (as the tests do, tests/support/postgres.py) **with fsync on**, on the disk of the
system temp directory — where the JSONL files go too. Without a server or psycopg the
PostgreSQL column says why and the script still succeeds (``make bench`` runs every bench).

Run: ``.venv/bin/python scripts/bench_store.py [--ops 300] [--postgres URL]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from goondan.storage.leases import JsonlLeases  # noqa: E402
from goondan.storage.url import mask_url, parse_store  # noqa: E402

LEASE = "bench/orchestrator"
LINE = json.dumps(
    {"type": "message.append", "message": {"role": "user", "content": "x" * 200}}
).encode() + b"\n"
Timing = tuple[float, float]  # median, p95 in ms


def measure(op: Callable[[int], None], ops: int, warmup: int = 20) -> Timing:
    for i in range(warmup):
        op(i)
    samples = []
    for i in range(ops):
        start = time.perf_counter()
        op(warmup + i)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(len(samples) * 0.95))]


def bench_jsonl(directory: Path, ops: int) -> dict[str, Timing]:
    results: dict[str, Timing] = {}
    fd = os.open(directory / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        results["append"] = measure(lambda _i: os.write(fd, LINE) and None, ops)

        def flushed(_i: int) -> None:
            os.write(fd, LINE)
            os.fsync(fd)

        results["append + flush"] = measure(flushed, ops)
        leases = JsonlLeases(directory)
        token = leases.acquire_lease(LEASE, "bench", 60)
        assert token is not None

        def fenced(_i: int) -> None:
            with leases.fenced(LEASE, token):
                flushed(_i)

        results["fenced append + flush"] = measure(fenced, ops)
        results["lease renew"] = measure(lambda _i: leases.renew_lease(LEASE, token, 60) and None,
                                         ops)
    finally:
        os.close(fd)
    return results


@contextlib.contextmanager
def postgres_url(given: str | None) -> Iterator[tuple[str, str]]:
    """(url, description) of the server to measure; a throwaway one when none is given."""
    if given:
        yield given, mask_url(given)
        return
    from tests.support.postgres import start_cluster

    cluster = start_cluster(fsync=True)
    try:
        with cluster.connect() as conn:
            conn.execute("CREATE DATABASE bench")
        yield cluster.url("bench"), "throwaway cluster on 127.0.0.1, fsync on"
    finally:
        cluster.stop()


def bench_postgres(url: str, ops: int) -> dict[str, Timing]:
    from goondan.storage.postgres.db import Connection, Database
    from goondan.storage.postgres.leases import PostgresLeases, fenced

    results: dict[str, Timing] = {}
    text = LINE.decode().strip()
    with Database.open(url) as db:
        db.run(lambda c: c.execute(
            "CREATE TABLE IF NOT EXISTS goondan_bench_events (id bigserial, event text)"
        ))

        def insert(conn: Connection) -> None:
            conn.execute("INSERT INTO goondan_bench_events (event) VALUES (%s)", (text,))

        def unflushed(_i: int) -> None:
            def work(conn: Connection) -> None:
                conn.execute("SET LOCAL synchronous_commit = off")
                insert(conn)

            db.run(work)

        results["append"] = measure(unflushed, ops)
        results["append + flush"] = measure(lambda _i: db.run(insert), ops)
        leases = PostgresLeases(db)
        token = leases.acquire_lease(LEASE, "bench", 60)
        assert token is not None

        def fenced_insert(conn: Connection) -> None:
            fenced(conn, LEASE, token)
            insert(conn)

        results["fenced append + flush"] = measure(lambda _i: db.run(fenced_insert), ops)
        results["lease renew"] = measure(
            lambda _i: leases.renew_lease(LEASE, token, 60) and None, ops
        )
        leases.release_lease(LEASE, token)
        db.run(lambda c: c.execute("DROP TABLE goondan_bench_events"))
    return results


def _cell(timing: Timing | None) -> str:
    return "—" if timing is None else f"{timing[0]:7.3f} / {timing[1]:7.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--postgres", help="postgresql:// URL to measure (default: throwaway)")
    args = parser.parse_args(argv)
    given = args.postgres
    if given is None and parse_store(None).kind == "postgres":
        given = parse_store(None).url
    directory = Path(tempfile.mkdtemp(prefix="goondan-bench-store-"))
    try:
        jsonl = bench_jsonl(directory, args.ops)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    pg: dict[str, Timing] = {}
    where = ""
    try:
        with postgres_url(given) as (url, where):
            pg = bench_postgres(url, args.ops)
    except (ImportError, RuntimeError, OSError) as exc:
        where = f"not measured: {mask_url(str(exc)).splitlines()[0]}"
    except Exception as exc:  # a GoondanError (E_STORE_UNAVAILABLE …): report, do not crash
        where = f"not measured: {mask_url(getattr(exc, 'message', str(exc)))}"
    print(f"stores, ms per operation (median / p95), {args.ops} ops each")
    print(f"JSONL: {tempfile.gettempdir()} · PostgreSQL: {where}")
    print(f"{'operation':<24} {'JSONL':>19} {'PostgreSQL':>19}")
    for row in ("append", "append + flush", "fenced append + flush", "lease renew"):
        print(f"{row:<24} {_cell(jsonl.get(row)):>19} {_cell(pg.get(row)):>19}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
