"""IPC benchmarks: agent-to-agent round trip, spawn-to-ready, RSS (targets from issue 7).

* round trip agent → orchestrator → agent → back for a no-op request, measured inside agent
  process A with ``ctx.agents.request`` to agent B (B answers at once): target < 2 ms median;
* spawn to ready of an agent process (minimal child, and a real AgentInstance of
  examples/delegation): target < 250 ms;
* RSS of the orchestrator and of each agent process.

Run: ``.venv/bin/python scripts/bench_ipc.py`` (prints one line per figure).
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
from multiprocessing.connection import Connection
from pathlib import Path

from goondan.conversation.messages import Message
from goondan.pipeline.context import TurnResult
from goondan.runtime.agents import AgentsFactory, SwarmCatalog, response_text
from goondan.swarm.agent_process import AgentWorker, run_child
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner
from goondan.types import AgentEvent, new_id

REPO = Path(__file__).resolve().parents[1]
CATALOG = SwarmCatalog("bench", "a", ("a", "b"))


class BenchHandler:
    """``rt:<n>``: time n no-op requests to agent b; anything else: answer at once."""

    def __init__(self, factory: AgentsFactory) -> None:
        self.factory = factory

    async def run(self, event: AgentEvent) -> TurnResult:
        text = event.input or ""
        answer = "ok"
        if text.startswith("rt:"):
            api = self.factory(event, turn_id="t", trace_id="0" * 32, span_id="1" * 16)
            samples = []
            for _ in range(int(text[3:])):
                start = time.perf_counter()
                await api.request("b", "noop")
                samples.append((time.perf_counter() - start) * 1000)
            answer = json.dumps(samples)
        return TurnResult(
            new_id("turn"), "text_response", response_message=Message.assistant(answer)
        )

    async def close(self) -> None:
        pass


async def _build(args: argparse.Namespace, worker: AgentWorker) -> BenchHandler:
    return BenchHandler(AgentsFactory(worker.router, CATALOG, agent_name=args.agent_name,
                                      instance_key=args.instance_key))


def bench_child(conn: Connection, argv: list[str]) -> None:
    run_child(conn, argv, _build)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def spawn_to_ready(orch: Orchestrator, agent: str, key: str) -> float:
    start = time.perf_counter()
    await orch.spawn_instance(agent, key)
    rec = orch.records[(agent, key)]
    await orch.wait_until(lambda: rec.ready, timeout=30, poll_s=0.001)
    return (time.perf_counter() - start) * 1000


async def main() -> None:
    state = Path(tempfile.mkdtemp(prefix="goondan-bench-"))
    spawner = ProcessSpawner(state, state_root=state, target=bench_child)
    orch = Orchestrator(
        spawner, swarm_name="bench", entry_agent="a", agents=["a", "b"], reconcile_interval_s=0
    )
    async with orch:
        samples = [await spawn_to_ready(orch, "b", f"s{i}") for i in range(5)]
        print(f"spawn-to-ready (minimal agent process): median {statistics.median(samples):.1f} ms "
              f"(min {min(samples):.1f}, max {max(samples):.1f}; target < 250 ms) "
              f"ratio {statistics.median(samples) / 250:.2f}")
        await orch.request("b", "warm", timeout_ms=30_000)
        answer = await orch.request("a", "rt:2000", timeout_ms=120_000)
        rtt = json.loads(response_text(answer))[200:]  # skip warm-up
        med = statistics.median(rtt)
        p95 = sorted(rtt)[int(len(rtt) * 0.95)]
        print(f"round trip agent→orchestrator→agent→back (no-op request): median {med:.3f} ms, "
              f"p95 {p95:.3f} ms over {len(rtt)} (target < 2 ms) ratio {med / 2:.2f}")
        child = orch.records[("a", "default")].handle
        print(f"RSS orchestrator: {rss_kb(os.getpid()) / 1024:.1f} MiB; minimal agent process: "
              f"{rss_kb(child.pid) / 1024 if child and child.pid else 0:.1f} MiB")

    real = ProcessSpawner(
        REPO / "examples" / "delegation", state_root=state, log_dir=state / "logs"
    )
    orch = Orchestrator(real, swarm_name="default", entry_agent="coordinator",
                        agents=["coordinator", "worker"], reconcile_interval_s=0)
    async with orch:
        samples = [await spawn_to_ready(orch, "worker", f"w{i}") for i in range(3)]
        print(
            f"spawn-to-ready (AgentInstance, examples/delegation worker): median "
            f"{statistics.median(samples):.1f} ms (target < 250 "
            f"ms) ratio {statistics.median(samples) / 250:.2f}"
        )
        start = time.perf_counter()
        text = response_text(
            await orch.request("coordinator", "What is 17 * 23?", timeout_ms=30_000)
        )
        assert "391" in text, text
        print(f"delegation turn (coordinator → worker, scripted models, both spawned): "
              f"{(time.perf_counter() - start) * 1000:.1f} ms")
        rss = [rss_kb(r.handle.pid) for r in orch.records.values() if r.handle and r.handle.pid]
        print(
            "RSS per AgentInstance process: median "
            f"{statistics.median(rss) / 1024:.1f} MiB over {len(rss)}; "
            f"orchestrator {rss_kb(os.getpid()) / 1024:.1f} MiB"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    asyncio.run(main())
