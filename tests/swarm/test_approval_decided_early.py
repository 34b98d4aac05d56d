"""A decision that reaches an agent process while the Turn asking for it is still in its step
(a connector that answers on ``approval.requested``, docs/serving.md "Approvals"): the Turn
parks first, and the resumed Turn's answer still reaches a caller waiting for the final
answer (``send --wait``, the ``a2a`` connector)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from goondan.conversation.messages import Message
from goondan.ipc.channel import Transport
from goondan.pipeline.context import TurnResult
from goondan.runtime.approvals import APPROVAL_DECIDED_EVENT
from goondan.swarm.agent_process import AgentWorker
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner, SpawnRequest
from goondan.types import AgentEvent
from tests.support.aio import run_bounded


class ParkingHandler:
    """A Turn that asks for approval and parks once ``release`` is set; a decision resumes it
    (after the running Turn, as AgentInstance's lock orders it)."""

    def __init__(self) -> None:
        self.parked: Any = None
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.lock = asyncio.Lock()

    async def run(self, event: AgentEvent, stream: bool = False) -> TurnResult:
        async with self.lock:
            if event.type == APPROVAL_DECIDED_EVENT:
                if self.parked is None:
                    return TurnResult("t0", "text_response")  # nothing parked: nothing to do
                self.parked = None
                return TurnResult("t1", "text_response",
                                  response_message=Message.assistant("resumed answer"))
            self.started.set()
            await self.release.wait()  # the rest of the step
            self.parked = SimpleNamespace(input=event.to_dict())
            return TurnResult("t1", "approval_pending", metadata={"approvals": [{"id": "apr_1"}]})

    async def close(self) -> None:
        return None


class Watched:
    """The worker's transport, noting when the worker received the decision."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.decided = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)

    async def recv(self) -> Any:
        message = await self.transport.recv()
        if message is not None and message.type == "event" \
                and message.agent_event().type == APPROVAL_DECIDED_EVENT:
            self.decided.set()
        return message


def test_a_decision_during_the_asking_step_resumes_the_parked_turn_for_its_waiting_caller(
) -> None:
    handler = ParkingHandler()
    watched: list[Watched] = []

    async def worker(request: SpawnRequest, transport: Transport) -> int:
        watched.append(Watched(transport))
        return await AgentWorker(watched[-1], agent_name=request.agent_name,  # type: ignore[arg-type]
                                 instance_key=request.instance_key).serve(handler)

    async def main() -> AgentEvent:
        orch = Orchestrator(InProcessSpawner(worker), swarm_name="t", entry_agent="a",
                            agents=["a"], reconcile_interval_s=0)
        async with orch:
            event = AgentEvent(type="message", input="delete it", instance_key="k",
                               wait_for_final=True)
            answer = asyncio.ensure_future(orch.request("a", event, instance_key="k"))
            await handler.started.wait()
            decided = AgentEvent(type=APPROVAL_DECIDED_EVENT, instance_key="k",
                                 metadata={"approvalId": "apr_1"})
            assert await orch.deliver_now("a", decided)
            # the worker has the decision while the step still runs; then the step ends
            await watched[0].decided.wait()
            handler.release.set()
            return await asyncio.wait_for(answer, 20)

    reply = run_bounded(main, 40)
    assert reply.input == "resumed answer"
    assert reply.metadata["finishReason"] == "text_response"
