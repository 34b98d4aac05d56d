"""Issue 31 item 4, orchestrator side: the per-instance queue hands input to a started Turn of a
steering agent, and gets back what that Turn did not take (or, after a crash, all of it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from goondan.ipc.channel import Transport
from goondan.runtime.agents import AgentsFactory
from goondan.storage.jsonl import JsonlQueue, marker_name
from goondan.swarm.agent_process import AgentWorker
from goondan.swarm.durable_inputs import SwarmInbox
from goondan.swarm.instance_queue import InstanceQueue
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner, SpawnRequest
from goondan.types import AgentEvent
from tests.support.ipc_agents import ScriptHandler, catalog_of, in_process_worker


def _status(orch: Orchestrator) -> str | None:
    rec = orch.records.get(("a", "k"))
    return rec.status if rec is not None else None


def _event(text: str) -> AgentEvent:
    return AgentEvent(type="message", input=text, instance_key="k")


def test_a_started_turn_of_a_steering_agent_takes_the_waiting_input_at_once() -> None:
    steering = [False]
    queue = InstanceQueue(steer=lambda: steering[0])
    first, second, third = _event("1"), _event("2"), _event("3")
    queue.push(first)
    assert queue.take_next() is first
    queue.push(second)
    assert queue.take_next() is None  # not started yet
    assert queue.current is not None
    queue.current.started = True
    assert queue.take_next() is None  # started, but the agent queues (inputPolicy: queue)
    steering[0] = True
    assert queue.take_next() is second and second.steer_into == first.id
    queue.push(third)
    assert queue.take_next() is third and len(queue) == 3
    queue.finish(taken=[second.id])  # the Turn took "2"; "3" reached it too late
    assert list(queue.waiting) == [third] and third.steer_into is None
    assert not third.was_steered


def test_after_a_crash_every_steered_input_goes_back_behind_the_interrupted_one() -> None:
    queue = InstanceQueue(steer=lambda: True)
    first, second = _event("1"), _event("2")
    queue.push(first)
    queue.take_next()
    assert queue.current is not None
    queue.current.started = True
    queue.push(second)
    assert queue.take_next() is second
    queue.finish()  # the process died
    assert list(queue.waiting) == [second] and second.was_steered is True


def test_input_a_worker_cannot_steer_runs_as_its_own_turn_exactly_once(tmp_path: Path) -> None:
    """The scripted agents have no ``steer``: the steered input comes back and runs next."""
    record: list[str] = []
    gate = tmp_path / "gate"

    async def main() -> None:
        orch = Orchestrator(InProcessSpawner(in_process_worker(["a"], record)), swarm_name="s",
                            entry_agent="a", agents=["a"], reconcile_interval_s=0)
        orch.steering = {"a"}
        async with orch:
            first = asyncio.ensure_future(orch.request("a", f"block:{gate}:one", instance_key="k"))
            await orch.wait_until(lambda: Path(f"{gate}.started").exists(), 30, poll_s=0.01)
            await orch.wait_until(lambda: _status(orch) == "processing", 30)
            second = asyncio.ensure_future(orch.request("a", "echo:two", instance_key="k"))
            await orch.wait_until(lambda: len(orch.records[("a", "k")].inbox.waiting) == 0, 30)
            gate.touch()
            answers = await asyncio.wait_for(asyncio.gather(first, second), 30)
            assert [a.input for a in answers] == ["one", "two"]

    asyncio.run(main())
    assert record == [f"a@k block:{gate}:one", "a@k echo:two"]


class _SteeringScript(ScriptHandler):
    """A scripted agent that takes steered input into its running (blocked) turn."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.running = False
        self.steered: list[str] = []

    def can_steer(self) -> bool:
        return self.running

    def steer(self, event: AgentEvent) -> bool:
        self.steered.append(event.input or "")
        return True

    async def run(self, event: AgentEvent) -> Any:
        self.running = True
        try:
            return await super().run(event)
        finally:
            self.running = False


def test_a_steered_request_whose_turn_was_interrupted_is_answered_not_left_waiting(
    tmp_path: Path,
) -> None:
    """The process dies during a Turn that took a steered request: both callers are answered
    ``E_AGENT_CRASHED`` (the steered input goes back to the queue; its claim says it joined)."""
    record: list[str] = []
    gate = tmp_path / "gate"
    handlers: list[_SteeringScript] = []

    async def worker(request: SpawnRequest, transport: Transport) -> int:
        w = AgentWorker(transport, agent_name=request.agent_name, instance_key=request.instance_key)
        factory = AgentsFactory(w.router, catalog_of(["a"]), agent_name=request.agent_name,
                                instance_key=request.instance_key)
        handlers.append(_SteeringScript(request.agent_name, request.instance_key, factory, record))
        return await w.serve(handlers[-1])

    async def main() -> None:
        inbox = SwarmInbox(JsonlQueue(tmp_path / "inputs", marker_name), "inputs/s")
        orch = Orchestrator(InProcessSpawner(worker), swarm_name="s", entry_agent="a", agents=["a"],
                            reconcile_interval_s=0)
        orch.steering = {"a"}
        async with orch:
            await inbox.open(orch)
            orch.store_input = inbox.record
            first = asyncio.ensure_future(orch.request("a", f"block:{gate}:one", instance_key="k"))
            await orch.wait_until(lambda: _status(orch) == "processing", 30)
            second = asyncio.ensure_future(orch.request("a", "echo:two", instance_key="k"))
            await orch.wait_until(lambda: bool(handlers and handlers[0].steered), 30, poll_s=0.01)
            handle = orch.records[("a", "k")].handle
            assert handle is not None
            handle.kill()
            answers = await asyncio.wait_for(asyncio.gather(first, second), 30)
            codes = [a.metadata.get("error", {}).get("code") for a in answers]
            assert codes == ["E_AGENT_CRASHED", "E_AGENT_CRASHED"]
        inbox.close()

    asyncio.run(main())
    assert handlers[0].steered == ["echo:two"]
    assert record == [f"a@k block:{gate}:one"]  # "two" joined the interrupted turn: not run again
