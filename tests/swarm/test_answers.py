"""Issue 29: a request's answer leaves an agent process by one path (``AgentWorker._answer``),
the same for a Turn that finished, failed or was cancelled."""

from __future__ import annotations

import argparse
from pathlib import Path

from goondan.swarm.agent_process import AgentWorker, build_agent_instance
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner
from tests.support.aio import run_bounded as run
from tests.support.ipc_agents import in_process_worker

DELEGATION = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def test_finished_and_failed_turns_answer_the_same_way() -> None:
    async def main() -> None:
        orch = Orchestrator(
            InProcessSpawner(in_process_worker(["a"])),
            swarm_name="t",
            entry_agent="a",
            agents=["a"],
            reconcile_interval_s=0,
        )
        async with orch:
            ok = await orch.request("a", "echo:hello", timeout_ms=30_000)
            failed = await orch.request("a", "fail:", timeout_ms=30_000)
        assert ok.input == "hello" and ok.metadata["finishReason"] == "text_response"
        assert failed.input is None and failed.metadata["finishReason"] == "error"
        assert failed.metadata["error"]["code"] == "E_AGENT_TURN_FAILED"
        for answer in (ok, failed):
            assert answer.type == "agent.response" and answer.reply_target == "orchestrator"

    run(main)


def test_the_instance_of_an_agent_process_has_no_second_way_to_answer(state_root: Path) -> None:
    async def main() -> None:
        from goondan.ipc.channel import InProcessTransport

        parent, child = InProcessTransport.pair()
        worker = AgentWorker(child, agent_name="worker", instance_key="k")
        args = argparse.Namespace(
            bundle_dir=str(DELEGATION),
            agent_name="worker",
            instance_key="k",
            state_root=str(state_root),
            swarm=None,
            workdir=None,
            max_depth=None,
        )
        instance = await build_agent_instance(args, worker)
        try:
            assert getattr(instance, "on_outgoing", "missing") is None
        finally:
            await instance.close()
            await parent.aclose()

    run(main)
