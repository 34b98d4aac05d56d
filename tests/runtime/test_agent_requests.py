"""``agents__request`` timeouts and ``async`` mode (docs/orchestrator.md "agents__request").

In process (embedding Runtime, fake provider over HTTP) so the later turn an async answer
starts can be awaited; the IPC router's ``deliver`` is checked on a loopback transport.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from goondan.llm import create_model
from goondan.llm.base import LanguageModel, ModelSpec
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.swarm.agent_process import IpcAgentRouter
from goondan.types import AgentEvent
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall

pytestmark = pytest.mark.timeout(60)
DELEGATION = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def factory(server: FakeProvider) -> Any:
    def build(spec: ModelSpec) -> LanguageModel:
        return create_model(ModelSpec(provider="openai-compatible", model=f"fake-{spec.name}",
                                      endpoint=server.base_url("openai"), name=spec.name))

    return build


def test_an_async_request_answers_with_a_later_turn(state_root: Path) -> None:
    coordinator, worker = "fake-coordinator-model", "fake-worker-model"
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(
                FakeToolCall(
                    "agents__request",
                    {"target": "worker", "input": "Compute 2 + 2.", "async": True},
                ),
                for_model=coordinator,
            ),
            FakeReply.reply("I asked the worker; the answer will follow.", for_model=coordinator),
            FakeReply.reply("2 + 2 = 4", for_model=worker),
            FakeReply.reply("The worker says 4.", for_model=coordinator),
        )

        async def main() -> tuple[Any, list[Any]]:
            async with Runtime.from_bundle(DELEGATION, state_root=state_root,
                                           model_factory=factory(fake)) as rt:
                first = await rt.run_turn("coordinator", "Go.", instance_key="k")
                await rt.router.drain_tasks()  # the worker's turn, then the answer's turn
                while (await rt.instance("coordinator", "k")).turn_count < 2:
                    await rt.router.drain_tasks()
                    await asyncio.sleep(0.01)
                return first, (await rt.instance("coordinator", "k")).messages

        first, messages = run(main())
        fake.assert_all_used()
        bodies = [r.json for r in fake.requests if r.json["model"] == coordinator]
    assert first.text == "I asked the worker; the answer will follow."
    returned = json.loads(bodies[1]["messages"][-1]["content"])
    assert (
        returned["async"] is True and returned["response"] is None and returned["accepted"] is True
    )
    answer = bodies[2]["messages"][-1]
    assert answer["role"] == "user" and answer["content"].endswith("2 + 2 = 4")
    assert '"asyncResponseTo"' in answer["content"] and '"status":"ok"' in answer["content"]
    assert messages[-1].text == "The worker says 4."


_ASK_IN_MIDDLEWARE = """
async def _turn(ctx):
    if "middleware" in (ctx.input_event.input or ""):
        await ctx.agents.request("worker", "Compute 17 * 23.")
    return await ctx.next()


def register(api):
    api.pipeline.register("turn", _turn)
"""


def delegation_copy(tmp_path: Path, request_timeout_ms: int | None = None) -> Path:
    """examples/delegation with the coordinator's ``requestTimeoutMs`` replaced (None: unset)
    and a turn middleware that calls ``ctx.agents.request`` when the input says "middleware"."""
    bundle = tmp_path / "delegation"
    shutil.copytree(DELEGATION, bundle)
    manifest = bundle / "goondan.yaml"
    text = re.sub(r"\n  requestTimeoutMs: \d+\n", "\n", manifest.read_text())
    marker = "metadata:\n  name: coordinator\nspec:\n"
    assert marker in text and "requestTimeoutMs" not in text
    if request_timeout_ms is not None:
        text = text.replace(marker, f"{marker}  requestTimeoutMs: {request_timeout_ms}\n")
    text = text.replace(marker, f"{marker}  extensions:\n    - ref: Extension/ask\n")
    text += (
        "---\napiVersion: goondan.ai/v1\nkind: "
        "Extension\nmetadata:\n  name: ask\nspec:\n  entry: ./ask.py\n"
    )
    manifest.write_text(text)
    (bundle / "ask.py").write_text(_ASK_IN_MIDDLEWARE)
    return bundle


def test_requests_without_a_timeout_wait_15_seconds(state_root: Path, tmp_path: Path) -> None:
    """seed 000 §4.4 rule 3: ``request`` waits 15 000 ms by default, from a middleware
    (``ctx.agents.request``) and from the ``agents__request`` tool alike."""
    waits: list[tuple[str, str, int]] = []

    async def main() -> None:
        async with Runtime.from_bundle(delegation_copy(tmp_path), state_root=state_root) as rt:
            forward = rt.router.request

            async def spy(target: str, event: AgentEvent, *, timeout_ms: int) -> AgentEvent:
                waits.append((str(event.metadata["callSource"]), target, timeout_ms))
                return await forward(target, event, timeout_ms=timeout_ms)

            rt.router.request = spy  # type: ignore[method-assign]
            assert (await rt.run_turn("coordinator", "ask through middleware")).error is None
            tool = await rt.run_turn("coordinator", "What is 17 * 23?")
            assert tool.text == "The worker says: 17 * 23 = 391"

    run(main())
    assert waits == [("extension-middleware", "worker", 15_000), ("tool", "worker", 15_000)]


def test_agent_spec_request_timeout_is_the_default(state_root: Path, tmp_path: Path) -> None:
    bundle = delegation_copy(tmp_path, request_timeout_ms=250)
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(FakeToolCall("agents__request", {"target": "worker", "input": "slow"}),
                            for_model="fake-coordinator-model"),
            FakeReply.reply("gave up", for_model="fake-coordinator-model"),
            FakeReply.reply("too late", delay_s=2.0, for_model="fake-worker-model"),
        )

        async def main() -> Any:
            async with Runtime.from_bundle(
                bundle, state_root=state_root, model_factory=factory(fake)
            ) as rt:
                return await rt.run_turn("coordinator", "Go.")

        assert run(main()).text == "gave up"
        result = json.loads(fake.requests[-1].json["messages"][-1]["content"])
    assert result["code"] == "E_AGENT_TIMEOUT" and "250ms" in result["message"]


class _Loopback:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, message: Any) -> None:
        self.sent.append(message)


def test_ipc_router_delivers_an_async_answer_through_the_orchestrator() -> None:
    transport = _Loopback()
    router = IpcAgentRouter(transport, agent_name="coordinator", instance_key="k")  # type: ignore[arg-type]
    event = AgentEvent(type="agent.response", input="4", source={"kind": "agent", "name": "worker"},
                       metadata={"asyncResponseTo": "corr_1"})
    run(router.deliver(("coordinator", "k"), event))
    [message] = transport.sent
    assert (message.to, message.agent_event().instance_key) == ("coordinator", "k")
    assert "inReplyTo" not in message.agent_event().metadata  # a new turn, not an answer


def test_a_send_carries_no_reply_to_and_a_request_does(state_root: Path) -> None:
    """seed 002 §2.6 rules 2-3, through a real turn: ``agents__send`` hands the target an event
    without ``replyTo`` (nothing waits for it); ``agents__request`` sets ``replyTo`` with the
    caller and a correlation id."""
    coordinator = ScriptedModel(
        [
            {
                "toolCalls": [
                    {"name": "agents__send", "args": {"target": "worker", "input": "fyi"}},
                    {
                        "name": "agents__request",
                        "args": {"target": "worker", "input": "Compute 17 * 23."},
                    },
                ]
            },
            "done",
        ]
    )
    handed: list[tuple[str, AgentEvent]] = []

    async def main() -> None:
        async with Runtime.from_bundle(DELEGATION, state_root=state_root, models={
            "coordinator": coordinator, "worker": ScriptedModel(["ok"], loop=True),
        }) as rt:
            send, request = rt.router.send, rt.router.request

            async def spy_send(target: str, event: AgentEvent) -> None:
                handed.append(("send", event))
                await send(target, event)

            async def spy_request(target: str, event: AgentEvent, *, timeout_ms: int) -> AgentEvent:
                handed.append(("request", event))
                return await request(target, event, timeout_ms=timeout_ms)

            rt.router.send = spy_send  # type: ignore[method-assign]
            rt.router.request = spy_request  # type: ignore[method-assign]
            assert (await rt.run_turn("coordinator", "go")).text == "done"
            await rt.router.drain_tasks()

    run(main())
    (kind_a, sent), (kind_b, asked) = handed
    assert (kind_a, kind_b) == ("send", "request")
    assert sent.reply_to is None and "replyTo" not in sent.to_dict()
    assert asked.reply_to is not None and asked.reply_to.target == "coordinator"
    assert asked.reply_to.correlation_id.startswith("corr_")
    assert asked.to_dict()["replyTo"]["correlationId"] == asked.reply_to.correlation_id
