"""Streamed Turns through the orchestrator: ``request(on_event=...)`` and ``runtime.delta``."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from goondan.ipc.channel import Transport
from goondan.swarm.agent_process import AgentWorker, build_agent_instance
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner, SpawnRequest
from goondan.types import AgentEvent

DELEGATION = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def real_agents(state_root: Path) -> InProcessSpawner:
    """The real agent-process code (bundle, AgentInstance, worker loop) without processes."""

    async def worker(request: SpawnRequest, transport: Transport) -> int:
        agent = AgentWorker(
            transport, agent_name=request.agent_name, instance_key=request.instance_key
        )
        args = argparse.Namespace(
            bundle_dir=str(DELEGATION),
            agent_name=request.agent_name,
            instance_key=request.instance_key,
            state_root=str(state_root),
            swarm=None,
            workdir=None,
            max_depth=None,
        )
        return await agent.serve(await build_agent_instance(args, agent))

    return InProcessSpawner(worker)


def test_streamed_request_delivers_the_entry_turns_events_before_the_answer(
    state_root: Path,
) -> None:
    async def main() -> None:
        orch = Orchestrator(
            real_agents(state_root),
            swarm_name="default",
            entry_agent="coordinator",
            agents=["coordinator", "worker"],
            reconcile_interval_s=0,
        )
        seen: list[dict[str, Any]] = []
        async with orch:
            answer_at: list[int] = []

            def on_event(payload: dict[str, Any]) -> None:
                assert not answer_at, "an event arrived after the answer"
                seen.append(payload)

            event = AgentEvent(type="message", input="What is 17 * 23?", instance_key="s",
                               source={"kind": "connector", "name": "cli"})
            answer = await orch.request("coordinator", event, instance_key="s", on_event=on_event)
            answer_at.append(len(seen))
            # a second, unstreamed request: nothing more is reported
            await orch.request("coordinator", "What is 17 * 23?", instance_key="s")
        assert answer.input is not None and "17 * 23 = 391" in answer.input
        assert len(seen) == answer_at[0]
        # the worker's turn is not streamed
        assert {p["agentName"] for p in seen} == {"coordinator"}
        text = "".join(p["text"] for p in seen if p["type"] == "llm.delta" and p["kind"] == "text")
        assert text.startswith("Let me ask the worker.") and text.endswith(answer.input)
        kinds = [p["type"] for p in seen if p["type"] != "llm.delta"]
        assert kinds == ["step.started", "tool.called", "tool.completed", "step.completed",
                         "step.started", "step.completed"]

    async def bounded() -> None:
        async with asyncio.timeout(60):  # an agent that cannot start must fail, not hang
            await main()

    asyncio.run(bounded())


def test_every_turn_s_events_reach_the_orchestrator_s_event_sinks(state_root: Path) -> None:
    from goondan.runtime.events import RuntimeEvent, TurnEnded
    from goondan.runtime.observe import EventSink

    class Recorder(EventSink):
        def __init__(self) -> None:
            self.starts: list[RuntimeEvent] = []
            self.ends: list[RuntimeEvent] = []

        def on_span_start(self, event: RuntimeEvent) -> None:
            self.starts.append(event)

        def on_span_end(self, event: RuntimeEvent) -> None:
            self.ends.append(event)

    async def main() -> Recorder:
        orch = Orchestrator(
            real_agents(state_root),
            swarm_name="default",
            entry_agent="coordinator",
            agents=["coordinator", "worker"],
            reconcile_interval_s=0,
        )
        recorder = Recorder()
        orch.add_event_sink(recorder)
        async with orch:
            await orch.request("coordinator", "What is 17 * 23?", instance_key="s")  # not streamed
        return recorder

    async def bounded() -> Recorder:
        async with asyncio.timeout(60):
            return await main()

    recorder = asyncio.run(bounded())
    turns = [e for e in recorder.ends if isinstance(e, TurnEnded)]
    # the coordinator's turn and the worker's turn it asked for, each with its spans
    assert {(e.agent_name, e.type) for e in turns} == {
        ("coordinator", "turn.completed"), ("worker", "turn.completed")}
    coordinator = next(e for e in turns if e.agent_name == "coordinator")
    worker = next(e for e in turns if e.agent_name == "worker")
    assert worker.trace_id == coordinator.trace_id  # the request kept the caller's trace
    assert {e.type for e in recorder.starts} >= {
        "turn.started", "step.started", "tool.called", "llm.started", "agent.requested"}
