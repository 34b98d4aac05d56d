"""Real agent processes (AgentInstance + scripted models): SIGKILL of a worker mid-turn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from pathlib import Path

import pytest

from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def test_sigkill_worker_mid_turn_keeps_committed_history_and_resumes_the_turn(
    state_root: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle)
    script = bundle / "scripts" / "worker.yaml"
    script.write_text(script.read_text().replace(
        "script:\n", "script:\n  - when: '(?i)slow'\n    text: never\n    delayMs: 600000\n", 1))
    # the slow turn never ends on its own within the test: only the crash ends it, however
    # loaded the machine (a 20 s delay once elapsed before the kill on a loaded machine)
    pids: list[int] = []

    async def main() -> None:
        spawner = ProcessSpawner(bundle, state_root=state_root, log_dir=state_root / "logs")
        orch = Orchestrator(
            spawner,
            swarm_name="default",
            entry_agent="coordinator",
            agents=["coordinator", "worker"],
            project_root=bundle,
            grace_period_ms=5000,
        )
        async with orch:
            first = response_text(
                await orch.request(
                    "coordinator", "What is 17 * 23?", instance_key="cli", timeout_ms=30_000
                )
            )
            # the coordinator used the worker's answer in the same turn
            assert "17 * 23 = 391" in first
            worker = orch.records[("worker", "cli")]
            coordinator_pid = orch.records[("coordinator", "cli")].handle.pid  # type: ignore[union-attr]
            pids.extend([coordinator_pid, worker.handle.pid])  # type: ignore[union-attr, list-item]
            slow = asyncio.ensure_future(orch.request("worker", "slow please", instance_key="cli"))
            # mid-turn: the turn's user message is durably in the worker's events.jsonl
            await orch.wait_until(lambda: worker.status == "processing" and any(
                "slow please" in p.read_text()
                for p in (state_root / "workspaces").glob("*/instances/*/messages/events.jsonl")
            ), timeout=20)
            os.kill(worker.handle.pid, signal.SIGKILL)  # type: ignore[union-attr]
            await orch.wait_until(lambda: worker.ready and worker.spawn_count == 2, timeout=20)
            pids.append(worker.handle.pid)  # type: ignore[union-attr]
            # The respawned worker resumes the interrupted turn (docs/conversations.md
            # "Durability"): its caller still waits for that turn's answer, no E_AGENT_CRASHED.
            await orch.wait_until(lambda: any(
                "turn.resumed" in p.read_text()
                for p in (state_root / "workspaces").glob("*/instances/worker*/turn.jsonl")
            ), timeout=20)
            assert not slow.done()
            slow.cancel()  # the resumed turn waits on its 600 s model reply: cancel it
            with contextlib.suppress(asyncio.CancelledError):
                await slow
            again = response_text(
                await orch.request(
                    "coordinator", "What is 17 * 23?", instance_key="cli", timeout_ms=30_000
                )
            )
            assert "391" in again
            assert orch.records[("coordinator", "cli")].handle.pid == coordinator_pid  # type: ignore[union-attr]

    try:
        asyncio.run(asyncio.wait_for(main(), 90))
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    worker_base = next(
        p
        for p in (state_root / "workspaces").glob("*/instances/*/messages/base.jsonl")
        if "worker" in p.parent.parent.name
    )
    text = worker_base.read_text()
    # the first exchange was committed before the crash and survives; the interrupted turn's
    # user message was recovered from events.jsonl; the later exchange follows
    assert text.count("17 * 23 = 391") == 2
    assert "slow please" in text
    assert text.index("slow please") < text.rindex("17 * 23 = 391")
