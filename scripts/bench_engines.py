"""Local engine vs Ray engine on the same workload (docs/scaling.md, "Measured figures").

Runs the delegation example's scripted ``worker`` agent (no network) on both engines:

* agent-request round trip: a request to an already running instance (median);
* instance cold start: a new instanceKey → its first answer (median);
* events/s: ``--instances`` new keys × 2 events each, all at once;
* memory: PSS per idle instance (local: one agent process — a forked one shares the template's
  pages; Ray: host PSS growth / instances);
* ingress events/s: the same burst through a connector's ``ctx.emit`` (inbox, routing,
  instances), from the start of the Connection (its connector process, or Ray's connector host)
  to the last turn.

``pooled`` is the local engine with ``policy.isolation: pooled`` (``--pool-hosts`` host
processes, default one per CPU): the same figures, plus ``--live`` conversations kept open at
once (default 1,000) with the hosts' total RSS and PSS per live instance.

Ray runs as a local two-node cluster (``ray.cluster_utils.Cluster``) on 127.0.0.1. Usage::

    python scripts/bench_engines.py [--instances 200] [--rounds 30] [--skip-local] [--skip-ray]
        [--skip-pooled] [--pool-hosts N] [--live N]

The local engine runs twice: with the fork server (column ``local``, agent processes forked from
a pre-imported template) and without it (``local-spawn``, ``GOONDAN_FORK_SERVER=0``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from goondan.config import load_bundle  # noqa: E402
from goondan.swarm.connections import ConnectionRuntime  # noqa: E402
from goondan.swarm.orchestrator import Orchestrator  # noqa: E402
from goondan.swarm.spawner import ProcessSpawner, Spawner  # noqa: E402

# A connector that emits 2 events for each of KEYS keys (every first event before any second).
BURST = """\
import asyncio


async def run(ctx):
    keys = int(ctx.config["KEYS"])
    for n in (1, 2):
        await asyncio.gather(*(ctx.emit({
            "id": f"k{k}-e{n}", "name": "burst", "instanceKey": f"k{k}",
            "message": {"type": "text", "text": f"event {n} for key k{k}"},
        }) for k in range(keys)))
"""
INGRESS_BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: ok}
spec: {provider: scripted, model: ok, options: {loop: true, script: [{text: ok}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec: {modelConfig: {modelRef: Model/ok}, prompts: {systemPrompt: Answer ok.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/worker, agents: [{ref: Agent/worker}]}
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: burst}
spec: {entry: ./burst.py, events: [{name: burst}]}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: burst-in}
spec:
  connectorRef: Connector/burst
  config: {KEYS: {value: "KEYS"}}
  ingress: {rules: [{route: {}}]}
"""


def ingress_bundle(root: Path, instances: int) -> Path:
    """A bundle whose one Connection emits ``instances`` keys x 2 events."""
    root.mkdir(parents=True)
    (root / "goondan.yaml").write_text(INGRESS_BUNDLE.replace('"KEYS"', f'"{instances}"'))
    (root / "burst.py").write_text(BURST)
    return root


async def measure_ingress(spawner: Spawner, root: Path, state_root: Path, instances: int) -> float:
    """Events/s of the burst connector's events, from the Connection's start to the last turn."""
    bundle = load_bundle(root, state_root=state_root)
    swarm = bundle.swarm_spec(None)
    orch = Orchestrator(
        spawner,
        swarm_name=swarm.name,
        entry_agent=swarm.entry_agent,
        agents=swarm.agents,
        project_root=bundle.root,
        reconcile_interval_s=0,
        grace_period_ms=10_000,
        ready_timeout_s=900,
    )
    connections = ConnectionRuntime(bundle, swarm, orch, spawner, state_root=state_root)
    async with orch:
        start = time.perf_counter()
        await connections.start()
        await orch.wait_until(
            lambda: sum(r.processed for r in orch.records.values()) >= 2 * instances, timeout=1800
        )
        elapsed = time.perf_counter() - start
        await connections.stop()
    return 2 * instances / elapsed


def pss_kib(pid: int) -> int:
    """Proportional set size of ``pid`` in KiB (Linux ``smaps_rollup``)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def measure(
    spawner: Spawner, bundle: Path, instances: int, rounds: int, pids: Any
) -> dict[str, float]:
    # A long ready timeout: 100 interpreters starting at once on a loaded 2-core machine take
    # more than the default minute, and a crash loop would measure the timeout, not the engine.
    orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker", agents=["worker"],
                        project_root=bundle, reconcile_interval_s=0, grace_period_ms=10_000,
                        ready_timeout_s=900)
    out: dict[str, float] = {}
    async with orch:
        await orch.request("worker", "warm up", instance_key="warm", timeout_ms=120_000)
        trips = []
        for _ in range(rounds):
            start = time.perf_counter()
            await orch.request(
                "worker", "What is 17 * 23?", instance_key="warm", timeout_ms=120_000
            )
            trips.append(time.perf_counter() - start)
        out["roundTripMs"] = statistics.median(trips) * 1000
        colds = []
        for n in range(min(rounds, 10)):
            start = time.perf_counter()
            await orch.request("worker", "hello", instance_key=f"cold{n}", timeout_ms=120_000)
            colds.append(time.perf_counter() - start)
        out["coldStartMs"] = statistics.median(colds) * 1000
        before = await pids(orch)
        start = time.perf_counter()
        await asyncio.gather(
            *(
                orch.request("worker", f"event {e}", instance_key=f"k{k}", timeout_ms=600_000)
                for k in range(instances)
                for e in (1, 2)
            )
        )
        out["eventsPerS"] = 2 * instances / (time.perf_counter() - start)
        after = await pids(orch)
        out["pssPerIdleInstanceKiB"] = max(0.0, (after - before) / instances)
    return out


async def local_pss(orch: Orchestrator) -> int:
    return sum(
        pss_kib(r.handle.pid)
        for r in orch.records.values()
        if r.handle is not None and r.handle.pid
    )


def host_rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def measure_pooled(bundle: Path, burst: Path, tmp: Path, args: Any) -> dict[str, float]:
    """The local engine's figures with pooled isolation, and ``args.live`` live instances."""
    from goondan.swarm.pool import PooledSpawner

    spawner = PooledSpawner(bundle, state_root=tmp / "pooled", log_dir=tmp / "logs",
                            hosts=args.pool_hosts)

    def host_pids() -> list[int]:
        return [int(h["pid"]) for h in spawner.hosts_status() if h["pid"]]

    async def pooled_pss(orch: Orchestrator) -> int:
        return sum(pss_kib(pid) for pid in host_pids())

    try:
        figures = await measure(spawner, bundle, args.instances, args.rounds, pooled_pss)
        if args.live > 0:  # --live 0: the burst figures only
            figures.update(await measure_live(spawner, bundle, args.live, host_pids))
    finally:
        await spawner.aclose()
    ingress = PooledSpawner(burst, state_root=tmp / "pooled-burst", swarm="default",
                            log_dir=tmp / "logs", hosts=args.pool_hosts)
    try:
        figures["ingressEventsPerS"] = await measure_ingress(
            ingress, burst, tmp / "pooled-burst", args.instances)
    finally:
        await ingress.aclose()
    return figures


async def measure_live(spawner: Spawner, bundle: Path, live: int, host_pids: Any
                       ) -> dict[str, float]:
    """Open ``live`` conversations (one request each, 100 at a time) and keep them all live:
    the hosts' total RSS and PSS per live instance then."""
    orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker", agents=["worker"],
                        project_root=bundle, reconcile_interval_s=0, grace_period_ms=30_000)
    async with orch:
        await orch.request("worker", "warm up", instance_key="live-warm", timeout_ms=120_000)
        base = sum(pss_kib(pid) for pid in host_pids())
        start = time.perf_counter()
        for first in range(0, live, 100):
            await asyncio.gather(*(
                orch.request("worker", "hello", instance_key=f"live{k}", timeout_ms=600_000)
                for k in range(first, min(live, first + 100))))
        elapsed = time.perf_counter() - start
        alive = sum(1 for r in orch.records.values() if r.alive)
        rss = sum(host_rss_kib(pid) for pid in host_pids())
        pss = sum(pss_kib(pid) for pid in host_pids())
    return {"liveInstances": float(alive), "liveOpenPerS": live / elapsed,
            "liveHostsRssMiB": rss / 1024, "livePssPerInstanceKiB": (pss - base) / live}


def local_figures(tmp: Path, name: str, bundle: Path, burst: Path, args: Any,
                  fork_server: bool) -> dict[str, float]:
    """The local engine's figures, agent processes forked by the fork server or spawned."""
    spawner = ProcessSpawner(bundle, state_root=tmp / name, log_dir=tmp / "logs",
                             fork_server=fork_server)
    figures = asyncio.run(measure(spawner, bundle, args.instances, args.rounds, local_pss))
    ingress = ProcessSpawner(burst, state_root=tmp / f"{name}-burst", swarm="default",
                             log_dir=tmp / "logs", fork_server=fork_server)
    figures["ingressEventsPerS"] = asyncio.run(
        measure_ingress(ingress, burst, tmp / f"{name}-burst", args.instances))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-pooled", action="store_true")
    parser.add_argument("--pool-hosts", type=int, default=None,
                        help="host processes of the pooled rows [default: one per CPU]")
    parser.add_argument("--live", type=int, default=1000,
                        help="live conversations of the pooled rows")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gb", dir="/tmp"))
    bundle = tmp / "delegation"
    shutil.copytree(REPO / "examples" / "delegation", bundle)
    burst = ingress_bundle(tmp / "burst", args.instances)
    results: dict[str, dict[str, float]] = {}
    try:
        if not args.skip_local:
            # process mode with the fork server (the default on Linux), then without it
            for name, fork_server in (("local", True), ("local-spawn", False)):
                results[name] = local_figures(tmp, name, bundle, burst, args, fork_server)
        if not args.skip_pooled:
            results["pooled"] = asyncio.run(measure_pooled(bundle, burst, tmp, args))
        if args.skip_ray:
            ray = None
        else:
            try:
                import ray
                from ray.cluster_utils import Cluster
            except ImportError:
                print("ray not installed (pip install 'pygoondan[ray]'): Ray figures skipped")
                ray = None
        if ray is not None:
            # Loopback only, as tests/engines/conftest.py does it (see the notes there).
            os.environ.update(
                RAY_TMPDIR=str(tmp), RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0"
            )
            from ray._private import ray_constants

            ray_constants.ENABLE_RAY_CLUSTER = False
            node = {
                "num_cpus": 1,
                "object_store_memory": 100 * 1024 * 1024,
                "include_dashboard": False,
                "node_ip_address": "127.0.0.1",
            }
            cluster = Cluster(initialize_head=True, head_node_args=node)
            cluster.add_node(**node)
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, namespace="goondan", log_to_driver=False)
            from goondan.engines.ray.spawner import RaySpawner

            async def on_ray() -> dict[str, float]:
                spawner = RaySpawner(bundle, state_root=tmp / "ray", hosts=2)

                async def host_pss(orch: Orchestrator) -> int:
                    return sum(pss_kib(h["pid"]) for h in await spawner.host_info())

                try:
                    figures = await measure(spawner, bundle, args.instances, args.rounds, host_pss)
                finally:
                    await spawner.aclose()
                ingress = RaySpawner(burst, state_root=tmp / "ray-burst", swarm="default", hosts=2)
                try:
                    figures["ingressEventsPerS"] = await measure_ingress(
                        ingress, burst, tmp / "ray-burst", args.instances
                    )
                finally:
                    await ingress.aclose()
                return figures

            try:
                results["ray"] = asyncio.run(on_ray())
            finally:
                ray.shutdown()
                cluster.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    keys = [
        "roundTripMs",
        "coldStartMs",
        "eventsPerS",
        "pssPerIdleInstanceKiB",
        "ingressEventsPerS",
    ]
    ratio = "ray" in results and "local" in results
    print(
        f"{'figure':<24}"
        + "".join(f"{name:>12}" for name in results)
        + ("     ray/local" if ratio else "")
    )
    for key in keys:
        row = f"{key:<24}" + "".join(f"{results[name][key]:>12.1f}" for name in results)
        if ratio and results["local"][key]:
            row += f"{results['ray'][key] / results['local'][key]:>14.2f}"
        print(row)
    if "liveInstances" in results.get("pooled", {}):  # the pooled rows' live conversations
        live = results["pooled"]
        print(f"pooled: {live['liveInstances']:.0f} live instances, hosts' RSS "
              f"{live['liveHostsRssMiB']:.1f} MiB, PSS per live instance "
              f"{live['livePssPerInstanceKiB']:.1f} KiB, opened at {live['liveOpenPerS']:.1f}/s")
    print("(local: process mode with the fork server; local-spawn: without it; "
          "pooled: policy.isolation pooled)")
    print(f"({args.instances} instances x 2 events; round trip and cold start: medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
