"""The agent-to-agent API (runtime/agents.py): rules, in-process router, the agents tool."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation.messages import Message
from goondan.errors import AgentError
from goondan.pipeline.context import TurnResult
from goondan.runtime.agents import CALL_STACK_KEY, AgentCallApi, SwarmCatalog
from goondan.runtime.local_router import InProcessAgentRouter
from goondan.tools.executor import ToolFailure
from goondan.types import AgentEvent, new_id

CATALOG = SwarmCatalog("s", "a", ("a", "b", "c"))


class Echo:
    """An instance that answers ``<agent>:<input>``; ``wait`` sleeps 1 s first."""

    def __init__(self, agent: str, key: str, **hooks: Any) -> None:
        self.agent, self.key, self.hooks, self.seen = agent, key, hooks, []

    async def run(self, event: AgentEvent) -> TurnResult:
        self.seen.append(event)
        if event.input == "wait":
            await asyncio.sleep(1)
        return TurnResult(
            new_id("turn"),
            "text_response",
            response_message=Message.assistant(f"{self.agent}:{event.input}"),
        )


def router() -> InProcessAgentRouter:
    return InProcessAgentRouter(CATALOG, lambda agent, key, **hooks: Echo(agent, key, **hooks))


def api(r: InProcessAgentRouter, stack: list[str] | None = None, **kw: Any) -> AgentCallApi:
    inbound = AgentEvent(
        type="m",
        metadata={CALL_STACK_KEY: stack} if stack else {},
        trace_id="t" * 32,
        auth={"principal": {"id": "u"}},
    )
    return AgentCallApi(r, CATALOG, agent_name="a", instance_key="k", input_event=inbound,
                        turn_id="turn-1", trace_id="t" * 32, span_id="s" * 16, **kw)


def test_request_builds_the_event_and_returns_the_answer() -> None:
    async def main() -> None:
        r = router()
        result = await api(r).request("b", "hi")
        assert result["response"] == "b:hi" and result["target"] == "b"
        event = r.instances[("b", "k")].seen[0]
        assert event.instance_key == "k" and event.trace_id == "t" * 32
        assert event.auth == {"principal": {"id": "u"}}
        assert event.metadata[CALL_STACK_KEY] == ["a@k"]
        assert event.parent_span_id == "s" * 16 and event.reply_to is not None
        assert event.id.startswith("agent_event_") and event.reply_to.correlation_id.startswith(
            "corr_"
        )
        assert (await api(r).send("c", "note"))["accepted"] is True
        assert (await api(r).catalog())["callableAgents"] == ["b", "c"]

    asyncio.run(main())


@pytest.mark.parametrize(
    ("stack", "target", "key", "code"),
    [
        (["b@k", "a@k"], "b", None, "E_AGENT_CYCLE"),
        (["a@k", "c@k", "b@k"], "a", None, "E_AGENT_CYCLE"),  # inbound from b: a→c→b→a
        (None, "a", None, "E_AGENT_CYCLE"),
        (None, "zz", None, "E_AGENT_NOT_FOUND"),
        ([f"x{i}@k" for i in range(8)], "b", None, "E_AGENT_DEPTH"),
    ],
)
def test_refusals(stack: list[str] | None, target: str, key: str | None, code: str) -> None:
    async def main() -> None:
        with pytest.raises(AgentError) as info:
            await api(router(), stack).request(target, "x", instance_key=key)
        assert info.value.code == code

    asyncio.run(main())


def test_cycle_message_shows_the_chain_and_other_keys_are_fine() -> None:
    async def main() -> None:
        with pytest.raises(AgentError) as info:
            await api(router(), ["b@k"]).request("b")
        assert "b@k → a@k → b@k" in info.value.message
        assert (await api(router()).request("a", "x", instance_key="other"))["response"] == "a:x"

    asyncio.run(main())


def test_timeout_leaves_the_callee_running() -> None:
    async def main() -> None:
        r = router()
        with pytest.raises(AgentError) as info:
            await api(r).request("b", "wait", timeout_ms=50)
        assert info.value.code == "E_AGENT_TIMEOUT" and "50ms" in info.value.message
        await r.aclose()  # waits for the callee's turn, which was not cancelled

    asyncio.run(main())


def test_spawn_and_list() -> None:
    async def main() -> None:
        r = router()
        first = await api(r).spawn("c", instance_key="job", cwd="/tmp")
        assert first == {"target": "c", "instanceKey": "job", "spawned": True, "cwd": "/tmp"}
        assert (await api(r).spawn("c", instance_key="job"))["spawned"] is False
        auto = await api(r).spawn("b")
        assert auto["instanceKey"].startswith("b-instance-")
        listing = await api(r).list()
        assert listing["count"] == 2 and listing["agents"][0]["ownerAgent"] == "a"

    asyncio.run(main())


def _agents_tool() -> Any:
    path = (
        Path(__file__).resolve().parents[2]
        / "goondan"
        / "builtin_packages"
        / "@goondan"
        / "base"
        / "tools"
        / "agents.py"
    )
    spec = importlib.util.spec_from_file_location("base_agents_tool", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agents_tool_maps_failures_to_codes() -> None:
    tool = _agents_tool()

    class Ctx:
        runtime: Any = None

    async def main() -> None:
        ctx = Ctx()
        with pytest.raises(ToolFailure) as info:
            await tool.handlers["request"](ctx, {"target": "b"})
        assert info.value.code == "E_AGENT_UNAVAILABLE"
        ctx.runtime = api(router(), ["b@k"])
        with pytest.raises(ToolFailure) as info:
            await tool.handlers["request"](ctx, {"target": "b", "input": "x"})
        assert info.value.code == "E_AGENT_CYCLE"
        ctx.runtime = api(router())
        out = await tool.handlers["request"](ctx, {"target": "b", "input": "x"})
        assert out["response"] == "b:x" and set(out) == {
            "target",
            "eventId",
            "correlationId",
            "response",
        }
        assert (await tool.handlers["send"](ctx, {"target": "c"}))["accepted"] is True
        assert (await tool.handlers["catalog"](ctx, {}))["selfAgent"] == "a"
        with pytest.raises(ToolFailure):
            await tool.handlers["request"](ctx, {"target": "b", "timeoutMs": -1})

    asyncio.run(main())
