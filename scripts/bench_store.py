"""Benchmark of the stores (docs/storage.md "Cost"): JSONL state root vs PostgreSQL, side by side.

Everything is measured on both backends in one run, alternating where the two can interleave:

* **raw operations** (median / p95 of ``--ops`` operations, ms): ``append`` — one JSON line with
  one ``O_APPEND`` write (no fsync) / one ``INSERT`` committed with ``synchronous_commit=off``;
  ``append + flush`` — the line and an ``fsync`` / one ``INSERT`` + ``COMMIT`` waiting for the
  WAL flush (PostgreSQL's default); ``fenced append + flush`` — the same, checking a lease's
  fencing token first; ``lease renew`` — ``renew_lease`` (JSONL: the lease file replaced
  atomically with fsync).
* **turn overhead** (``Runtime(storage=…)``, the instant model of scripts/bench_turn.py: the real
  OpenAI adapter over a transport that answers at once): the K=0 turn and the 20-step turn
  (19 ``calc__echo`` tool steps + an answer) at 100 stored messages, one runtime per backend in
  the same event loop, turns alternating between them; medians over ``--turns`` turns.
* **ingress events/s**: a connector's ``ctx.emit`` burst (``--keys`` keys × 2 events) through
  the Connection's durable inbox (a JSONL file / a store queue) into new instances, via the
  orchestrator with agent processes on that store (``goondan run --store``'s wiring), from the
  Connection's start to the last turn (scripts/bench_engines.py ``measure_ingress``).
* **conversations × 2 events**: ``--conversations`` new instanceKeys × 2 requests, all at once,
  through the orchestrator, ``policy.isolation: pooled`` (``--pool-hosts`` host processes;
  1,000 agent processes do not fit this machine): events/s, and on PostgreSQL the peak of
  server connections. A host's open instances share its lock session and its pool (1 + ≤ 4
  connections a host, whatever its instances), so the row runs at the server's default
  ``max_connections`` (100, printed); a store error an agent start hit is printed.

Durability: the JSONL state root and PostgreSQL's data directory are both on the disk of the
system temp directory (its filesystem type is printed; not tmpfs), and the throwaway cluster runs
with **fsync on** and ``synchronous_commit`` on (printed from the server). ``--postgres URL``
(or ``GOONDAN_STORE=postgresql://…``) measures that server instead. Without the server binaries
or psycopg the PostgreSQL column says why and the script still succeeds (``make bench``).

Run: ``.venv/bin/python scripts/bench_store.py [--quick] [--postgres URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # bench_turn, bench_engines

from goondan.storage.leases import JsonlLeases  # noqa: E402
from goondan.storage.url import mask_url, parse_store  # noqa: E402

LEASE = "bench/orchestrator"
ROWS = ("raw", "turns", "ingress", "conversations")
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
        yield cluster.url("bench"), "throwaway cluster on 127.0.0.1"
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


# -- what the server and the disk are ------------------------------------------------------------
def server_settings(url: str) -> dict[str, str]:
    """fsync, synchronous_commit, max_connections and the version of the server at ``url``."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in ("server_version", "fsync", "synchronous_commit", "max_connections")}


def filesystem(path: str) -> str:
    """The type of the filesystem holding ``path`` (``/proc/mounts``, longest mount point)."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError), open("/proc/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1]
            if os.path.realpath(path).startswith(point) and len(point) > len(best):
                best, kind = point, fields[2]
    return kind


def open_store(url: str | None) -> Any:
    """The storage backend of ``url`` (None: the JSONL state root, the Runtime's default)."""
    if url is None:
        return None
    from goondan.storage.postgres.backend import PostgresBackend

    return PostgresBackend.open(url)


# -- turn overhead -------------------------------------------------------------------------------
async def turn_overheads(tmp: Path, urls: dict[str, str | None], turns: int
                         ) -> dict[str, dict[str, float]]:
    """Median wall ms of the K=0 and of the 20-step turn (at 100 stored messages) per backend;
    one Runtime per backend, their turns alternating (order flipped every round)."""
    from bench_turn import SMALL, _tool, bundle, history, instant_openai

    from goondan.runtime import Runtime

    samples: dict[str, dict[str, list[float]]] = {name: {"K=0": [], "K=20": []} for name in urls}
    async with contextlib.AsyncExitStack() as stack:
        runs: dict[str, tuple[Any, Any, Any]] = {}
        for name, url in urls.items():
            storage = open_store(url)
            if storage is not None:
                stack.callback(storage.close)  # after the runtime (LIFO)
            root = tmp / f"turns-{name}"
            root.mkdir()
            model, transport = instant_openai()
            rt = await stack.enter_async_context(Runtime.from_bundle(
                bundle(root), state_root=root, models={"plain": model}, storage=storage))
            k0 = await rt.instance("plain", "bench-k0")
            k20 = await rt.instance("plain", "bench-k20")
            for instance in (k0, k20):
                await instance.apply_message_events(history(SMALL))
            runs[name] = (transport, k0, k20)

        async def turn(name: str, kind: str, record: bool) -> None:
            transport, k0, k20 = runs[name]
            steps = 1 if kind == "K=0" else 20
            transport.plan = [_tool(s) for s in range(steps - 1)]
            started = time.perf_counter()
            result = await (k0 if kind == "K=0" else k20).run("hi", stream=False)
            if record:
                samples[name][kind].append((time.perf_counter() - started) * 1000)
            assert result.text == "ok", result

        names = list(urls)
        for index in range(turns + 3):  # 3 warm-up rounds
            for name in names if index % 2 == 0 else names[::-1]:
                await turn(name, "K=0", index >= 3)
                if index % 4 == 0 or index < 3:  # fewer 20-step turns: each is 20 commits
                    await turn(name, "K=20", index >= 3)
        figures = {name: {kind: statistics.median(values) for kind, values in kinds.items()}
                   for name, kinds in samples.items()}
        for name, url in urls.items():  # write transactions (commits) of one turn of each kind
            if url is not None:
                for kind in ("K=0", "K=20"):
                    before = await asyncio.to_thread(_xact_id, url)
                    await turn(name, kind, False)
                    after = await asyncio.to_thread(_xact_id, url)
                    figures[name][f"{kind} commits"] = after - before - 1
    return figures


def _xact_id(url: str) -> int:
    """A new transaction id: the difference of two is the write transactions in between + 1."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    return int(row[0]) if row else 0


# -- swarm level: ingress and conversations, through the orchestrator ----------------------------
def _pooled(root: Path, state_root: Path, tmp: Path, url: str | None, hosts: int | None) -> Any:
    from goondan.swarm.pool import PooledSpawner

    return PooledSpawner(root, state_root=state_root, swarm="default", log_dir=tmp / "logs",
                         hosts=hosts, store_url=url)


async def ingress_events_per_s(tmp: Path, name: str, url: str | None, keys: int,
                               hosts: int | None, timeout_s: float = 300) -> float:
    """Events/s of a connector's ``ctx.emit`` burst (``keys`` keys × 2 events) through the
    Connection's durable inbox (JSONL file / store queue) into new pooled instances; 0 when
    they were not all answered within ``timeout_s``."""
    from bench_engines import ingress_bundle

    from goondan.config import load_bundle
    from goondan.swarm.connections import ConnectionRuntime
    from goondan.swarm.orchestrator import Orchestrator

    root = ingress_bundle(tmp / f"burst-{name}", keys)
    state_root = tmp / f"burst-{name}-state"
    bundle = load_bundle(root, state_root=state_root)
    swarm = bundle.swarm_spec(None)
    storage = open_store(url)
    spawner = _pooled(root, state_root, tmp, url, hosts)
    try:
        orch = Orchestrator(spawner, swarm_name=swarm.name, entry_agent=swarm.entry_agent,
                            agents=swarm.agents, project_root=bundle.root, reconcile_interval_s=0,
                            grace_period_ms=10_000, ready_timeout_s=900)
        connections = ConnectionRuntime(bundle, swarm, orch, spawner, state_root=state_root,
                                        storage=storage)
        async with orch:
            start = time.perf_counter()
            await connections.start()
            try:
                await orch.wait_until(
                    lambda: sum(r.processed for r in orch.records.values()) >= 2 * keys,
                    timeout=timeout_s)
            except TimeoutError:  # reported as 0 events/s: the burst did not get through
                return 0.0
            elapsed = time.perf_counter() - start
            await connections.stop()
    finally:
        await spawner.aclose()
        if storage is not None:
            storage.close()
    return 2 * keys / elapsed


class ConnectionWatch:
    """Counts the server's client connections (pg_stat_activity) every 0.25 s on one connection
    opened before the load starts (a new one may be refused once the server is full): the peak,
    and the count of the last poll (``sample``: a poll made now)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
        self.peak = 0
        self.stop = asyncio.Event()

    def count(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM pg_stat_activity"
                                " WHERE backend_type = 'client backend'").fetchone()
        return int(row[0]) - 1 if row else 0  # not this one

    async def sample(self) -> int:
        current = await asyncio.to_thread(self.count)
        self.peak = max(self.peak, current)
        return current

    async def run(self) -> None:
        try:
            while not self.stop.is_set():
                await self.sample()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), 0.25)
        finally:
            self.conn.close()


async def conversations(tmp: Path, name: str, url: str | None, count: int, hosts: int | None,
                        timeout_s: float) -> dict[str, Any]:
    """``count`` new instanceKeys × 2 requests at once through the orchestrator (pooled): events/s,
    answered and failed requests, live instances, the peak of server connections (PostgreSQL)
    and the first store error an agent logged."""
    from bench_engines import ingress_bundle

    from goondan.swarm.orchestrator import Orchestrator

    root = ingress_bundle(tmp / f"conv-{name}", 1)  # its worker agent; no connector started
    state_root = tmp / f"conv-{name}-state"
    logs = tmp / "logs"
    spawner = _pooled(root, state_root, tmp, url, hosts)
    watch = await asyncio.to_thread(ConnectionWatch, url) if url else None
    watcher = asyncio.ensure_future(watch.run()) if watch is not None else None
    try:
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=root, reconcile_interval_s=0,
                            grace_period_ms=10_000, ready_timeout_s=900)
        async with orch:
            await orch.request("worker", "warm up", instance_key="warm", timeout_ms=120_000)
            start = time.perf_counter()
            results = await asyncio.gather(*(
                orch.request("worker", f"event {e}", instance_key=f"k{k}",
                             timeout_ms=int(timeout_s * 1000))
                for k in range(count) for e in (1, 2)), return_exceptions=True)
            elapsed = time.perf_counter() - start
            live = sum(1 for r in orch.records.values() if r.alive)
            held = await watch.sample() if watch is not None else 0
    finally:
        if watch is not None and watcher is not None:
            watch.stop.set()
            await watcher
        await spawner.aclose()
    outcomes = [_failure(result) for result in results]
    failed = [error for error in outcomes if error]
    opened = sum(1 for k in range(count) if not (outcomes[2 * k] and outcomes[2 * k + 1]))
    return {"eventsPerS": (len(results) - len(failed)) / elapsed, "seconds": elapsed,
            "answered": len(results) - len(failed), "failed": len(failed), "live": live,
            "opened": opened + 1,  # conversations answered at least once, and the warm-up
            "failures": dict(collections.Counter(e.split(":", 1)[0] for e in failed)),
            "peakConnections": watch.peak if watch else 0, "heldAtEnd": held,
            "firstFailure": failed[0] if failed else "", **_store_errors(logs)}


def _failure(result: Any) -> str:
    """``""`` for an answer, else ``"CODE: message"`` (an error answer counts as a failure)."""
    from goondan.runtime.agents import response_text

    try:
        if isinstance(result, BaseException):
            raise result
        response_text(result)
    except Exception as exc:
        return f"{getattr(exc, 'code', type(exc).__name__)}: {mask_url(str(exc))}"
    return ""


def _store_errors(logs: Path) -> dict[str, Any]:
    """How many agent starts the agents' logs say failed on the store, and the first message."""
    first, count = "", 0
    for path in sorted(logs.glob("*")) if logs.is_dir() else []:
        with contextlib.suppress(OSError):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if "failed to start" in line and "E_STORE" in line:
                    count += 1
                    if not first:
                        message = json.loads(line).get("message", line) if line[:1] == "{" else line
                        first = mask_url(str(message))
    return {"storeError": first, "failedStarts": count}


# -- report --------------------------------------------------------------------------------------
def _cell(timing: Timing | None) -> str:
    return "—" if timing is None else f"{timing[0]:7.3f} / {timing[1]:7.3f}"


def _ratio(pg: float | None, jsonl: float | None) -> str:
    return f"{pg / jsonl:6.2f}" if pg and jsonl else "     —"


def ingress_rows(tmp: Path, urls: dict[str, str | None], args: argparse.Namespace) -> None:
    """Ingress events/s per backend (backends in turn, their order flipped every round)."""
    ingress: dict[str, list[float]] = {name: [] for name in urls}
    for round_ in range(args.rounds):
        for name in list(urls) if round_ % 2 == 0 else list(urls)[::-1]:
            ingress[name].append(asyncio.run(ingress_events_per_s(
                tmp / f"r{round_}", name, urls[name], args.keys, args.pool_hosts)))
    hosts = args.pool_hosts or "one per CPU"
    print(f"ingress: connector burst of {args.keys} keys x 2 events into new instances "
          f"(pooled, {hosts} hosts), events/s, median of {args.rounds} rounds")
    medians = {name: statistics.median(values) for name, values in ingress.items()}
    print("  " + "  ".join(f"{name}: {value:7.1f}" for name, value in medians.items())
          + (f"  ratio postgres/jsonl {_ratio(medians.get('postgres'), medians['jsonl'])}"
             if "postgres" in medians else ""))


def conversation_rows(tmp: Path, urls: dict[str, str | None], args: argparse.Namespace) -> None:
    """``args.conversations`` new conversations x 2 events per backend."""
    hosts = args.pool_hosts or "one per CPU"
    print(f"conversations: {args.conversations} new instanceKeys x 2 requests at once "
          f"(pooled, {hosts} hosts; request timeout {args.request_timeout:.0f} s)")
    logging.getLogger("goondan").setLevel(logging.CRITICAL)  # crash loops: counted, not logged
    for name, url in urls.items():
        row = asyncio.run(conversations(tmp / f"c-{name}", name, url, args.conversations,
                                        args.pool_hosts, args.request_timeout))
        line = (f"  {name}: {row['eventsPerS']:7.1f} answered events/s, {row['answered']} "
                f"answered / {row['failed']} failed {row['failures'] or ''} in "
                f"{row['seconds']:.1f} s, "
                f"{row['live']} live instances")
        if url:
            line += (f", peak {row['peakConnections']} server connections, "
                     f"{row['heldAtEnd']} held at the end; {row['failedStarts']} agent starts "
                     "failed on the store")
        print(line)
        for key in ("firstFailure", "storeError"):
            if row[key]:
                print(f"    {key}: {row[key][:300]}")
        if url and row["failedStarts"]:
            print(f"    {row['opened']} conversations opened (answered at least once), "
                  f"{row['heldAtEnd']} server connections held at the end")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a short run (small counts)")
    parser.add_argument("--ops", type=int, default=None, help="raw operations [300; quick 60]")
    parser.add_argument("--turns", type=int, default=None, help="K=0 turns [200; quick 20]")
    parser.add_argument("--keys", type=int, default=None, help="ingress keys [40; quick 20]")
    parser.add_argument("--rounds", type=int, default=None, help="ingress rounds [3; quick 1]")
    parser.add_argument("--conversations", type=int, default=None,
                        help="new conversations x 2 events [1000; quick 50]")
    parser.add_argument("--pool-hosts", type=int, default=None,
                        help="host processes [one per CPU]")
    parser.add_argument("--request-timeout", type=float, default=180.0,
                        help="seconds a conversation's request may take before it counts failed")
    parser.add_argument("--only", action="append", choices=ROWS,
                        help="measure only these rows (repeatable) [all]")
    parser.add_argument("--postgres", help="postgresql:// URL to measure (default: throwaway)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.only = set(args.only or ROWS)
    args.ops = args.ops or (60 if quick else 300)
    args.turns = args.turns or (20 if quick else 200)
    args.keys = args.keys or (20 if quick else 40)
    args.rounds = args.rounds or (1 if quick else 3)
    args.conversations = args.conversations or (50 if quick else 1000)
    given = args.postgres
    if given is None and parse_store(None).kind == "postgres":
        given = parse_store(None).url
    tmp = Path(tempfile.mkdtemp(prefix="goondan-bench-store-"))
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
          f"({os.cpu_count()} CPUs)")
    print(f"JSONL state root: {tmp} ({filesystem(str(tmp))}; fsync on commits as always)")
    try:
        jsonl = bench_jsonl(tmp, args.ops) if "raw" in args.only else {}
        pg: dict[str, Timing] = {}
        measured = False
        try:
            with postgres_url(given) as (url, where):
                settings = server_settings(url)
                print(f"PostgreSQL {settings['server_version']}: {where}; fsync="
                      f"{settings['fsync']}, synchronous_commit={settings['synchronous_commit']}, "
                      f"max_connections={settings['max_connections']}")
                pg = bench_postgres(url, args.ops) if "raw" in args.only else {}
                measured = True
                run_rows(tmp, {"jsonl": None, "postgres": url}, args, jsonl, pg)
        except (ImportError, RuntimeError, OSError) as exc:
            print(f"PostgreSQL not measured: {mask_url(str(exc)).splitlines()[0]}")
        except Exception as exc:  # a GoondanError (E_STORE_UNAVAILABLE …): report, do not crash
            print(f"PostgreSQL not measured: {mask_url(getattr(exc, 'message', str(exc)))}")
        if not measured:
            run_rows(tmp, {"jsonl": None}, args, jsonl, {})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


def report_raw(jsonl: dict[str, Timing], pg: dict[str, Timing], ops: int) -> None:
    print(f"raw operations, ms (median / p95), {ops} ops each")
    print(f"  {'operation':<24} {'JSONL':>19} {'PostgreSQL':>19}  ratio")
    for row in ("append", "append + flush", "fenced append + flush", "lease renew"):
        ratio = _ratio(pg[row][0], jsonl[row][0]) if row in pg else "     —"
        print(f"  {row:<24} {_cell(jsonl.get(row)):>19} {_cell(pg.get(row)):>19}  {ratio}")


def run_rows(tmp: Path, urls: dict[str, str | None], args: argparse.Namespace,
             jsonl: dict[str, Timing], pg: dict[str, Timing]) -> None:
    """Every row of ``args.only``, on the backends of ``urls``."""
    if "raw" in args.only:
        report_raw(jsonl, pg, args.ops)
    if "turns" in args.only:
        turn_rows(tmp, urls, args)
    if "ingress" in args.only:
        ingress_rows(tmp, urls, args)
    if "conversations" in args.only:
        conversation_rows(tmp, urls, args)


def turn_rows(tmp: Path, urls: dict[str, str | None], args: argparse.Namespace) -> None:
    figures = asyncio.run(turn_overheads(tmp, urls, args.turns))
    print(f"turn overhead, instant model, 100 stored messages, median wall ms "
          f"({args.turns} K=0 turns, {len(range(0, args.turns + 3, 4))} 20-step turns each)")
    for kind in ("K=0", "K=20"):
        cells = "  ".join(f"{name}: {figures[name][kind]:8.3f}" for name in urls)
        ratio = ""
        if "postgres" in figures:
            pair = figures["postgres"][kind], figures["jsonl"][kind]
            ratio = f"  ratio postgres/jsonl {_ratio(*pair)}"
        commits = figures.get("postgres", {}).get(f"{kind} commits")
        extra = f"  ({commits:.0f} PostgreSQL write transactions a turn)" if commits else ""
        print(f"  {kind:<5} {cells}{ratio}{extra}")


if __name__ == "__main__":
    raise SystemExit(main())
