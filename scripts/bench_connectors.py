"""Benchmarks of the connector ingress path (docs/connectors.md). Prints figures and ratios.

    python scripts/bench_connectors.py [--quick]

Everything is real: a ``SwarmService`` (what ``goondan run`` runs) with its orchestrator in
this process, one connector process running a bench connector, one agent process whose Model
talks OpenAI to the fake provider HTTP server (``tests/support/fake_provider.py``) on loopback.

* **emit → durable append**: ``await ctx.emit(event)`` measured inside the connector: IPC to
  the orchestrator, dedupe, routing, the inbox append, the answer. p50 and p99 of back-to-back
  emits (the agent works through their Turns meanwhile, as under load); compared with the
  3 ms p50 the webhook connector's whole request may take.
* **ingress → first model request** of the routed Turn with a warm agent (its process already
  running): ``time.monotonic()`` just before ``emit`` in the connector vs the fake provider's
  arrival time of that Turn's request (CLOCK_MONOTONIC is system-wide). Target p50 < 15 ms.
* **webhook** (:func:`bench_webhook`): a Connection of the built-in ``webhook`` connector; signed
  POST → durable append → 200 measured by the client (target p50 < 3 ms, zero errors). The
  clients run in their own process (threads here would share the orchestrator's GIL), after
  the Turns of the figures above are done, in two phases:

  - *ingress only*: the orchestrator holds the routed events back instead of queueing their
    Turns (they stay pending in the inbox), so only request → append → 200 competes for the
    CPU;
  - *with Turns*: every accepted event also runs a Turn of the scripted ``sink`` agent, in one
    conversation, while the requests go on.

  Each phase: sequential requests on new connections, then 50 concurrent clients for 10 s (2 s
  with ``--quick``) on new connections (one per request, like most webhook senders) and on
  keep-alive connections, and — when Debian's ``wrk`` is installed (a C load generator, so the
  client's own CPU is small) — ``wrk -c 50``. With 50 clients each waiting for its answer,
  p50 ≈ 50 / throughput (Little's law): the concurrent p50 measures how many requests per
  second the path sustains on this machine, so the CPU each process spent per request is
  printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from goondan.config import load_bundle  # noqa: E402
from goondan.swarm.service import SwarmService  # noqa: E402
from tests.support.fake_provider import FakeProvider  # noqa: E402

EMIT_TARGET_MS = 3.0
WEBHOOK_TARGET_MS = 3.0
INGRESS_TARGET_MS = 15.0
KEY_ENV = "GOONDAN_BENCH_PROVIDER_KEY"

CONNECTOR = '''
import asyncio, json, time
from goondan.connectors import ConnectorEvent

async def run(ctx):
    n_emit, n_turn = int(ctx.config["N_EMIT"]), int(ctx.config["N_TURN"])
    gap = int(ctx.config["GAP_MS"]) / 1000
    await ctx.emit(ConnectorEvent.text("bench", "warm-up", instance_key="bench"))
    await asyncio.sleep(float(ctx.config["WARM_S"]))
    starts = []
    for i in range(n_turn):  # one Turn at a time: the agent is warm and idle
        starts.append(time.monotonic())
        await ctx.emit(ConnectorEvent.text("bench", f"turn {i}", instance_key="bench"))
        await asyncio.sleep(gap)
    emits = []
    for i in range(n_emit):  # back to back: only the accept path is timed
        t = time.perf_counter()
        await ctx.emit(ConnectorEvent.text("bench", f"emit {i}", instance_key="burst"))
        emits.append((time.perf_counter() - t) * 1000)
    with open(ctx.config["OUT"], "w") as f:
        json.dump({"starts": starts, "emitMs": emits}, f)
'''

BUNDLE = """
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: bench-connectors}}
spec:
  version: "0.1.0"
  dependencies: [{{name: "@goondan/base", version: "0.1.0"}}]
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: fake}}
spec:
  provider: openai
  model: gpt-bench
  endpoint: {endpoint}
  apiKey: {{valueFrom: {{env: {key_env}}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: assistant}}
spec:
  modelConfig: {{modelRef: Model/fake}}
  prompts: {{systemPrompt: Answer briefly.}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: offline}}
spec: {{provider: scripted, model: offline, options: {{loop: true, script: ["ok"]}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: sink}}
spec:
  modelConfig: {{modelRef: Model/offline}}
  prompts: {{systemPrompt: Answer briefly.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/assistant
  agents: [{{ref: Agent/assistant}}, {{ref: Agent/sink}}]
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {{name: bench}}
spec:
  entry: ./bench_connector.py
  events: [{{name: bench}}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: hook}}
spec:
  connectorRef: {{kind: Connector, name: webhook, package: "@goondan/base"}}
  config:
    PORT: {{value: "0"}}
  secrets:
    SIGNING_SECRET: {{value: "{secret}"}}
  ingress:
    rules:  # a scripted model: the fake provider's threads stay out of the orchestrator's way
      - route: {{agentRef: Agent/sink}}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: bench}}
spec:
  connectorRef: Connector/bench
  config:
    N_EMIT: {{value: "{n_emit}"}}
    N_TURN: {{value: "{n_turn}"}}
    GAP_MS: {{value: "{gap_ms}"}}
    WARM_S: {{value: "{warm_s}"}}
    OUT: {{value: "{out}"}}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _signed(secret: str, body: bytes) -> dict[str, str]:
    import hashlib
    import hmac

    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json", "X-Signature-256": signature}


def _connect(url: str) -> Any:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)


def _post(url: str, secret: str, body: bytes, conn: Any = None) -> int:
    """One signed POST: on ``conn`` (keep-alive) or on a new loopback connection; the status."""
    from urllib.parse import urlsplit

    own = conn is None
    conn = conn or _connect(url)
    try:
        conn.request("POST", urlsplit(url).path or "/", body=body, headers=_signed(secret, body))
        response = conn.getresponse()
        response.read()
        return int(response.status)
    finally:
        if own:
            conn.close()


def _summary(values: list[float], errors: int, **extra: Any) -> dict[str, Any]:
    return {"n": len(values), "p50": statistics.median(values) if values else 0.0,
            "p99": percentile(values, 0.99) if values else 0.0, "errors": errors, **extra}


def bench_webhook(url: str, secret: str, *, sequential: int, clients: int, seconds: float,
                  keep_alive: bool = False) -> dict[str, Any]:
    """The webhook connector: signed request → durable append → 200, measured by the client.
    ``sequential`` requests one after another (new connections), then ``clients`` threads for
    ``seconds`` (``keep_alive``: each thread reuses one connection)."""
    import threading

    def body(i: int) -> bytes:
        return json.dumps({"text": f"hook {i}", "instanceKey": "hooks"}).encode()

    seq: list[float] = []
    errors = 0
    for i in range(sequential):
        t = time.perf_counter()
        errors += _post(url, secret, body(i)) != 200
        seq.append((time.perf_counter() - t) * 1000)
    lock = threading.Lock()
    conc: list[float] = []
    conc_errors = [0]
    started = time.monotonic()
    stop_at = started + seconds
    cpu = time.process_time()

    def client(n: int) -> None:
        i = 0
        conn = _connect(url) if keep_alive else None
        while time.monotonic() < stop_at:
            t = time.perf_counter()
            try:
                ok = _post(url, secret, body(n * 1_000_000 + i), conn) == 200
            except OSError:
                ok = False
                if conn is not None:
                    conn.close()
                    conn = _connect(url)
            with lock:
                conc.append((time.perf_counter() - t) * 1000)
                conc_errors[0] += not ok
            i += 1
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    return {
        "sequential": _summary(seq, errors),
        "concurrent": _summary(
            conc,
            conc_errors[0],
            clients=clients,
            seconds=seconds,
            rps=len(conc) / elapsed,
            clientCpuMsPerRequest=(time.process_time() - cpu) * 1000 / max(1, len(conc)),
        ),
    }


WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Signature-256"] = {signature}
"""


def bench_wrk(
    url: str, secret: str, *, clients: int, seconds: float, tmp: Path
) -> dict[str, Any] | None:
    """``wrk -c clients`` keep-alive POSTs of one signed body (no ``id``: each is a new event);
    None when wrk is not installed."""
    import shutil
    import subprocess

    if shutil.which("wrk") is None:
        return None
    body = json.dumps({"text": "hook from wrk", "instanceKey": "hooks"}).encode()
    script = tmp / "post.lua"
    script.write_text(
        WRK_SCRIPT.format(
            body=json.dumps(body.decode()),
            signature=json.dumps(_signed(secret, body)["X-Signature-256"]),
        )
    )
    out = subprocess.run(
        [
            "wrk",
            "-t",
            "2",
            "-c",
            str(clients),
            "-d",
            f"{max(1, round(seconds))}s",
            "--latency",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout

    def ms(token: str) -> float:
        units = {"us": 0.001, "ms": 1.0, "s": 1000.0}
        for unit in ("us", "ms", "s"):
            if token.endswith(unit):
                return float(token[: -len(unit)]) * units[unit]
        return float(token)

    result: dict[str, Any] = {"clients": clients, "seconds": seconds, "errors": 0}
    for line in out.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in ("50%", "99%"):
            result["p" + words[0][:-1]] = ms(words[1])
        elif line.strip().startswith("Requests/sec:"):
            result["rps"] = float(words[-1])
        elif "requests in" in line:
            result["n"] = int(words[0])
        elif "Non-2xx" in line or "Socket errors" in line:
            result["errors"] += sum(int(w.rstrip(",")) for w in words if w.rstrip(",").isdigit())
    return result if "p50" in result else None


SECRET = "bench-signing-secret"


def _cpu_ticks(pid: int) -> int:
    """utime + stime of ``pid`` in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


class _CpuMeter:
    """CPU time per request of the orchestrator (this process), the webhook's connector process
    and the agent processes, over one load phase."""

    def __init__(self, service: SwarmService) -> None:
        self.service = service

    def _pids(self) -> dict[str, list[int]]:
        records = self.service.connections.supervisor.records
        hook = records["hook"].handle
        hook_pid = [hook.pid] if hook is not None and hook.pid else []
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == os.getpid():
                children.append(int(stat.parent.name))
        agents = [p for p in children if p not in hook_pid
                  and all(r.handle is None or r.handle.pid != p for r in records.values())
                  and b"--webhook-client" not in Path(f"/proc/{p}/cmdline").read_bytes()]
        return {"connector": hook_pid, "agents": agents}

    def start(self) -> None:
        self.before = {p: _cpu_ticks(p) for pids in self._pids().values() for p in pids}
        self.own = time.process_time()

    def per_request_ms(self, requests: int) -> dict[str, float]:
        """CPU ms per request since :meth:`start` (a process spawned meanwhile counts from 0)."""
        tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
        out = {
            k: sum(_cpu_ticks(p) - self.before.get(p, 0) for p in pids) * tick_ms / max(1, requests)
            for k, pids in self._pids().items()
        }
        out["orchestrator"] = (time.process_time() - self.own) * 1000 / max(1, requests)
        return out


async def _webhook_phases(
    service: SwarmService, url: str, webhook: dict[str, Any], tmp: Path
) -> dict[str, Any]:
    """The webhook figures: ingress only (Turns held back), then with the sink's Turns."""
    orchestrator = service.orchestrator
    submit = orchestrator.submit
    hold = [True]

    async def held_submit(agent: str, event: Any) -> None:
        if hold[0] and agent == "sink":
            return  # accepted and stored; its Turn is not queued (it stays pending in the inbox)
        await submit(agent, event)

    orchestrator.submit = held_submit  # type: ignore[method-assign]
    meter = _CpuMeter(service)
    phases: dict[str, Any] = {}
    for phase in ("ingress only", "with turns"):
        hold[0] = phase == "ingress only"
        results: dict[str, Any] = {}
        for keep_alive in (False, True):
            options = {"url": url, **webhook, "keep_alive": keep_alive}
            if keep_alive:
                options["sequential"] = 0
            meter.start()
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--webhook-client",
                json.dumps(options),
                stdout=asyncio.subprocess.PIPE,
            )
            stdout, _ = await client.communicate()
            answer = json.loads(stdout)
            n = answer["concurrent"]["n"] + answer["sequential"]["n"]
            answer["concurrent"]["cpuMsPerRequest"] = meter.per_request_ms(n)
            if not keep_alive:
                results["sequential"] = answer["sequential"]
            results["keep-alive" if keep_alive else "new connections"] = answer["concurrent"]
        meter.start()
        wrk = await asyncio.to_thread(bench_wrk, url, SECRET, clients=webhook["clients"],
                                      seconds=webhook["seconds"], tmp=tmp)
        if wrk is not None:
            wrk["cpuMsPerRequest"] = meter.per_request_ms(int(wrk.get("n", 0)))
            results["wrk"] = wrk
        phases[phase] = results
    orchestrator.submit = submit  # type: ignore[method-assign]
    return phases


async def _run(
    root: Path, n_emit: int, n_turn: int, webhook: dict[str, Any]
) -> tuple[dict[str, Any], list[float], Any]:
    out = root / "out.json"
    with FakeProvider() as fake:
        fake.enqueue(*["ok"] * (1 + n_turn + n_emit))
        bundle_dir = root / "bundle"
        bundle_dir.mkdir()
        (bundle_dir / "bench_connector.py").write_text(CONNECTOR)
        (bundle_dir / "goondan.yaml").write_text(BUNDLE.format(
            endpoint=fake.base_url("openai"), key_env=KEY_ENV, n_emit=n_emit, n_turn=n_turn,
            gap_ms=100, warm_s=1.5, out=out, secret=SECRET))
        os.environ[KEY_ENV] = "sk-bench"
        state_root = root / "state"
        service = SwarmService(
            load_bundle(bundle_dir, state_root=state_root), state_root=state_root, log_to_file=False
        )
        async with service:
            deadline = time.monotonic() + 300
            # every Turn of the figures above is done before the webhook's load starts
            while not out.exists() or len(fake.requests) < 1 + n_turn + n_emit:
                if time.monotonic() > deadline:
                    raise SystemExit("bench timed out: is the fake provider reachable?")
                await asyncio.sleep(0.05)
            arrivals = [r.timestamp for r in fake.requests][: 1 + n_turn]
            address = next(
                state_root.glob("workspaces/*/connections/default/hook/state/address.json")
            )
            url = json.loads(address.read_text())["url"]
            hooks = await _webhook_phases(service, url, webhook, root)
    return json.loads(out.read_text()), arrivals, hooks


def _print_webhook(phases: dict[str, Any]) -> None:
    print("webhook: signed POST → durable append → 200, measured by a client process")
    for phase, results in phases.items():
        print(f"  [{phase}]")
        seq = results["sequential"]
        print(
            f"    sequential, new connections ({seq['n']}): p50 "
            f"{seq['p50']:.2f} ms   p99 {seq['p99']:.2f} ms   "
            f"errors {seq['errors']}   (p50 / {WEBHOOK_TARGET_MS:.0f} "
            f"ms = {seq['p50'] / WEBHOOK_TARGET_MS:.2f})"
        )
        for name in ("new connections", "keep-alive", "wrk"):
            conc = results.get(name)
            if conc is None:
                continue
            cpu = "  ".join(f"{k} {v:.3f}" for k, v in conc["cpuMsPerRequest"].items())
            client = (
                f"  client {conc['clientCpuMsPerRequest']:.3f}"
                if "clientCpuMsPerRequest" in conc
                else ""
            )
            label = "wrk (C, keep-alive)" if name == "wrk" else f"python, {name}"
            print(
                f"    {conc['clients']} clients, {label}: "
                f"{conc.get('n', 0)} requests, {conc.get('rps', 0):.0f}/s   "
                f"p50 {conc['p50']:.2f} ms   p99 {conc['p99']:.2f} ms   errors {conc['errors']}"
            )
            print(f"      CPU ms per request: {cpu}{client}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument(
        "--seconds", type=float, default=None, help="length of each concurrent webhook run"
    )
    parser.add_argument("--webhook-client", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.webhook_client:
        options = json.loads(args.webhook_client)
        url = options.pop("url")
        print(json.dumps(bench_webhook(url, SECRET, **options)))
        return
    n_emit, n_turn = (200, 20) if args.quick else (1000, 100)
    load = {"sequential": 100, "clients": 50, "seconds": 2.0} if args.quick else \
        {"sequential": 1000, "clients": 50, "seconds": 10.0}
    if args.seconds:
        load["seconds"] = args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        data, arrivals, webhook = asyncio.run(_run(Path(tmp), n_emit, n_turn, load))
    emits = data["emitMs"]
    ingress = [(arrivals[1 + i] - start) * 1000 for i, start in enumerate(data["starts"])]
    p50, p99 = statistics.median(emits), percentile(emits, 0.99)
    print(
        f"emit → durable append ({len(emits)} back-to-back "
        "emits, connector process → orchestrator → inbox)"
    )
    print(
        f"  p50 {p50:.3f} ms   p99 {p99:.3f} ms   (p50 / "
        f"{EMIT_TARGET_MS:.0f} ms = {p50 / EMIT_TARGET_MS:.2f})"
    )
    i50 = statistics.median(ingress)
    print(f"ingress → first model request, warm agent ({len(ingress)} turns)")
    print(f"  p50 {i50:.2f} ms   p99 {percentile(ingress, 0.99):.2f} ms   "
          f"(p50 / target {INGRESS_TARGET_MS:.0f} ms = {i50 / INGRESS_TARGET_MS:.2f})")
    _print_webhook(webhook)


if __name__ == "__main__":
    main()
