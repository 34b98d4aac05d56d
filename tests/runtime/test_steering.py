"""Issue 31 item 4, runtime side: ``AgentInstance.steer`` and the turn loop's drain.

An input handed to the running turn is appended as a user message (with its source header)
before the turn's next model request; one that arrives while the model writes its final answer
makes the turn take one more step; a turn that ends otherwise still records it; with no turn
running ``steer`` refuses (the caller runs the input as its own turn).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from goondan.config import AgentSpec
from goondan.config.bundle import ModelBinding
from goondan.llm.base import ModelRequest
from goondan.llm.testing import FunctionModel
from goondan.pipeline.registry import PipelineRegistry
from goondan.runtime.instance import AgentInstance
from goondan.tools.executor import ToolExecutor
from goondan.tools.registry import ToolRegistry
from goondan.types import AgentEvent, ToolSource
from tests.support.aio import run
from tests.support.memory_store import MemoryStore


def _spec(max_steps: int = 32) -> AgentSpec:
    return AgentSpec(
        name="plain",
        model=ModelBinding("m", "scripted", "scripted"),
        params={},
        system_prompt="Be brief.",
        tools=[],
        extensions=[],
        required_tools=[],
        parallel_tool_calls=False,
        workdir=Path("."),
        max_steps_per_turn=max_steps,
        resource=None,
        input_policy="steer",
    )


def _instance(model: Any, tools: ToolRegistry | None = None, max_steps: int = 32) -> AgentInstance:
    store = MemoryStore()
    tools = tools or ToolRegistry()
    return AgentInstance(_spec(max_steps), instance_key="k", store=store, model=model,
                         pipeline=PipelineRegistry(), tools=tools, executor=ToolExecutor(tools),
                         state=store.load(), stream=False)


def _steered(text: str) -> AgentEvent:
    return AgentEvent(
        type="message",
        input=text,
        instance_key="k",
        source={"kind": "connector", "name": "control"},
    )


def _user_texts(request: ModelRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "user"]


def test_input_steered_during_a_tool_call_is_in_the_next_model_request() -> None:
    gate = asyncio.Event()
    called = asyncio.Event()

    async def wait(ctx: Any, args: Any) -> str:
        called.set()
        await gate.wait()
        return "done"

    tools = ToolRegistry()
    tools.register({"name": "gate__wait", "parameters": {"type": "object", "properties": {}}}, wait,
                   source=ToolSource("extension", "gate"))
    replies: list[Any] = [{"toolCalls": [{"name": "gate__wait", "args": {}}]}, "both handled"]
    model = FunctionModel(lambda request: replies.pop(0))

    async def main() -> None:
        agent = _instance(model, tools)
        assert not agent.can_steer() and not agent.steer(_steered("too early"))  # no turn runs
        turn = asyncio.ensure_future(agent.run("<<first>>"))
        await asyncio.wait_for(called.wait(), 30)
        assert agent.can_steer() and agent.steer(_steered("<<second>>"))
        gate.set()
        result = await turn
        assert result.text == "both handled"
        assert not agent.steer(_steered("too late"))
        await agent.close()

    run(main(), timeout_s=60)
    assert len(model.requests) == 2
    second = model.requests[1]
    assert [m["role"] for m in second.messages][-3:] == ["assistant", "tool", "user"]
    steered = _user_texts(second)[-1]
    assert steered.startswith("[goondan_context]\n") and steered.endswith("\n<<second>>")
    assert '"source":{"kind":"connector","name":"control"}' in steered
    assert not any("too" in t for r in model.requests for t in _user_texts(r))


def test_input_steered_while_the_final_answer_is_written_gets_one_more_step() -> None:
    agent_box: list[AgentInstance] = []
    answers = ["first answer", "covers both"]

    def reply(request: ModelRequest) -> str:
        if len(answers) == 2:  # the input arrives while the model writes its (final) answer
            assert agent_box[0].steer(_steered("<<late>>"))
        return answers.pop(0)

    model = FunctionModel(reply)

    async def main() -> None:
        agent = _instance(model)
        agent_box.append(agent)
        result = await agent.run("<<first>>")
        assert result.text == "covers both"
        await agent.close()

    run(main(), timeout_s=60)
    assert len(model.requests) == 2
    assert _user_texts(model.requests[1])[-1].endswith("\n<<late>>")


def test_a_turn_that_ends_without_another_model_request_still_records_what_it_took() -> None:
    agent_box: list[AgentInstance] = []

    def reply(request: ModelRequest) -> Any:
        assert agent_box[0].steer(_steered("<<late>>"))
        return {"toolCalls": [{"name": "nothing__here", "args": {}}]}  # a step, then maxSteps

    model = FunctionModel(reply)

    async def main() -> None:
        agent = _instance(model, max_steps=1)
        agent_box.append(agent)
        result = await agent.run("<<first>>")
        assert result.finish_reason == "max_steps"
        assert any(m.role == "user" and m.text.endswith("\n<<late>>") and m.metadata.get("steered")
                   for m in agent.messages)
        await agent.close()

    run(main(), timeout_s=60)
    assert len(model.requests) == 1
