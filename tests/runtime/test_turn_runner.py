"""The turn loop against TurnRunner and AgentInstance directly: no YAML, no files, no lock.

The agent is a plain ``AgentSpec``, the model a ``ScriptedModel``, the store the in-memory
``ConversationStore`` of ``tests/support/memory_store.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from goondan.config import AgentSpec
from goondan.config.bundle import ModelBinding
from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.state import ConversationState
from goondan.errors import help_url
from goondan.llm.base import ModelRequest
from goondan.llm.testing import FunctionModel, ScriptedModel
from goondan.pipeline.context import StepContext, StepResult
from goondan.pipeline.registry import PipelineRegistry
from goondan.pipeline.tracing import start_span
from goondan.runtime.inputs import UnavailableAgents
from goondan.runtime.instance import AgentInstance
from goondan.runtime.observe import RuntimeObserver
from goondan.runtime.outcomes import FinalText, StepFailed, ToolsRan, classify_step
from goondan.runtime.turn import TurnEnv, TurnRunner
from goondan.tools.executor import ToolExecutor
from goondan.tools.registry import ToolRegistry
from goondan.types import AgentEvent, ToolCall, ToolCallResult, ToolSource
from goondan.workspace.plans import Append, Noop
from tests.support.aio import run
from tests.support.memory_store import MemoryStore


def spec(**overrides: Any) -> AgentSpec:
    values: dict[str, Any] = dict(
        name="plain", model=ModelBinding("m", "scripted", "scripted"), params={},
        system_prompt="Be brief.", tools=[], extensions=[], required_tools=[],
        parallel_tool_calls=False, workdir=Path("."), max_steps_per_turn=32, resource=None,
    )
    values.update(overrides)
    return AgentSpec(**values)


def add_tool(tools: ToolRegistry) -> None:
    tools.register({"name": "calc__add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
        lambda ctx, args: args["a"] + args["b"], source=ToolSource("extension", "calc"))


class Loop:
    """One TurnRunner over a fresh ConversationState, recording the events it emits."""

    def __init__(self, script: list[Any], *, pipeline: PipelineRegistry | None = None,
                 **spec_overrides: Any) -> None:
        self.model = ScriptedModel(script)
        self.tools = ToolRegistry()
        add_tool(self.tools)
        self.observer = RuntimeObserver("plain", "k")
        self.events: list[dict[str, Any]] = []
        self.observer.subscribe(self.events.append)
        self.env = TurnEnv(
            spec=spec(**spec_overrides), instance_key="k", model=self.model,
            pipeline=pipeline or PipelineRegistry(), tools=self.tools,
            executor=ToolExecutor(self.tools), observer=self.observer,
            max_steps_per_turn=spec_overrides.get("max_steps_per_turn", 32), workdir=Path("."),
        )
        self.state = ConversationState(())

    async def run(self, text: str, *, stream: bool = False) -> TurnRunner:
        runner = TurnRunner(
            self.env, self.state, self.state.emit, AgentEvent(type="message", input=text),
            turn_id="turn_1", span=start_span("turn", "turn"), agents=UnavailableAgents(),
        )
        self.result = await runner.run(stream=stream)
        return runner

    @property
    def roles(self) -> list[str]:
        return [m.data["role"] for m in self.state.next_messages]


def test_a_text_answer_ends_the_turn_after_one_step() -> None:
    loop = Loop(["Hello."])
    runner = run(loop.run("hi"))
    assert loop.result.finish_reason == "text_response" and loop.result.text == "Hello."
    assert loop.roles == ["user", "assistant"]
    outcome = runner.outcome(loop.result)
    assert (outcome.step_count, outcome.tool_call_count, outcome.error_count) == (1, 0, 0)
    assert not outcome.needs_repair
    loop.model.assert_complete()


def test_tool_calls_run_a_second_step_and_their_results_are_recorded() -> None:
    loop = Loop([{"toolCalls": [{"name": "calc__add", "args": {"a": 2, "b": 3}}]}, "5"])
    runner = run(loop.run("2+3?"))
    assert loop.result.text == "5"
    assert loop.roles == ["user", "assistant", "tool", "assistant"]
    assert runner.outcome(loop.result).tool_call_count == 1
    assert [t.name for t in loop.model.requests[0].tools] == ["calc__add"]
    kinds = [e["type"] for e in loop.events]
    assert kinds == ["step.started", "tool.called", "tool.completed", "step.completed",
                     "step.started", "step.completed"]


def test_a_step_middleware_s_failed_result_ends_the_turn_with_its_error() -> None:
    pipeline = PipelineRegistry()

    async def quota(ctx: StepContext) -> StepResult:
        return StepResult("failed", False, metadata={"errorMessage": "quota used up",
                                                     "errorCode": "E_QUOTA"})

    pipeline.register("step", quota)
    loop = Loop([], pipeline=pipeline)
    runner = run(loop.run("hi"))
    assert loop.result.finish_reason == "error"
    assert loop.result.error == {
        "code": "E_QUOTA",
        "message": "quota used up",
        "helpUrl": help_url("E_QUOTA"),
    }
    outcome = runner.outcome(loop.result)
    assert outcome.error_count == 1 and outcome.needs_repair
    assert loop.events[-1]["type"] == "step.failed"
    assert loop.events[-1]["errorMessage"] == "quota used up"


def test_required_tools_remind_then_the_step_limit_closes_the_turn() -> None:
    loop = Loop(["No.", "Still no."], required_tools=["calc__add"], max_steps_per_turn=2)
    run(loop.run("hi"))
    assert loop.result.finish_reason == "max_steps"
    assert loop.roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert "calc__add" in loop.result.text and "Still no." in loop.result.text


def test_the_stream_argument_decides_whether_deltas_are_published() -> None:
    quiet, streamed = Loop(["Hello."]), Loop(["Hello."])
    run(quiet.run("hi", stream=False))
    run(streamed.run("hi", stream=True))
    assert not [e for e in quiet.events if e["type"] == "llm.delta"]
    deltas = [e for e in streamed.events if e["type"] == "llm.delta"]
    assert "".join(e["text"] for e in deltas) == "Hello."


def test_classify_step_maps_status_flags_and_metadata_to_one_outcome() -> None:
    answer = Message.assistant("ok")
    result = ToolCallResult.success("c1", "calc__add", 5)
    assert classify_step(StepResult("completed", False), answer) == FinalText(answer)
    assert classify_step(StepResult("completed", True, [ToolCall("c1", "calc__add", {})], [result]),
                         answer) == ToolsRan((result,))
    failed = classify_step(StepResult("failed", False), answer)
    assert failed == StepFailed(
        {"code": "E_STEP_FAILED", "message": "step failed", "helpUrl": help_url("E_STEP_FAILED")}
    )
    assert isinstance(failed, StepFailed) and not failed.retry


# -- AgentInstance over the in-memory store ------------------------------------------------------
def instance(store: MemoryStore, script: list[Any]) -> AgentInstance:
    tools = ToolRegistry()
    add_tool(tools)
    return AgentInstance(spec(), instance_key="k", store=store, model=ScriptedModel(script),
                         pipeline=PipelineRegistry(), tools=tools, executor=ToolExecutor(tools),
                         state=store.load(), stream=False)


def test_an_instance_commits_each_turn_as_a_delta_and_goes_back_to_idle() -> None:
    store = MemoryStore()

    async def main() -> None:
        agent = instance(store, ["Hello.", "Bye."])
        await agent.run("hi")
        await agent.run("bye")
        await agent.close()

    run(main())
    assert store.texts == ["hi", "Hello.", "bye", "Bye."]
    assert [type(p) for p in store.plans] == [Noop, Append, Append]  # load, then two turns
    # Quick turns write the advisory status once each: their "idle" (docs/runtime.md "Performance").
    assert store.statuses == ["idle", "idle"]
    assert store.closed


def test_a_turn_that_outlasts_the_status_delay_records_processing_then_idle() -> None:
    store = MemoryStore()

    async def main() -> None:
        seen: list[str] = []

        async def reply(request: ModelRequest) -> str:
            # Wait (generous failure-only deadline) until the delayed status write happened.
            async with asyncio.timeout(30):
                while "processing" not in store.statuses:
                    await asyncio.sleep(0.01)
            seen.append(agent.status)
            return "done"

        tools = ToolRegistry()
        agent = AgentInstance(
            spec(),
            instance_key="k",
            store=store,
            model=FunctionModel(reply),
            pipeline=PipelineRegistry(),
            tools=tools,
            executor=ToolExecutor(tools),
            state=store.load(),
            stream=False,
        )
        await agent.run("slow")
        await agent.close()
        assert seen == ["processing"]

    run(main(), timeout_s=60)
    assert store.statuses == ["processing", "idle"]


def test_a_cancelled_turn_is_repaired_committed_and_reported_once() -> None:
    store = MemoryStore()
    started = asyncio.Event()

    async def slow(ctx: Any, args: Any) -> int:
        started.set()
        await asyncio.Event().wait()
        return 0

    async def main() -> list[dict[str, Any]]:
        agent = instance(store, [{"toolCalls": [{"name": "calc__wait", "args": {}}]}])
        agent.tools.register({"name": "calc__wait"}, slow, source=ToolSource("extension", "calc"))
        events: list[dict[str, Any]] = []
        agent.subscribe(events.append)
        task = agent.submit("go")
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert agent.status == "idle"
        await agent.close()
        return events

    events = run(main(), timeout_s=30)
    ends = [e for e in events if e["type"] in ("turn.completed", "turn.failed")]
    assert [(e["type"], e["errorCode"]) for e in ends] == [("turn.failed", "E_TURN_CANCELLED")]
    roles = [m.data["role"] for m in store.base]
    assert roles == ["user", "assistant", "tool"]  # the interrupted call got its synthetic result
    assert "E_TURN_INTERRUPTED" in str(store.base[-1].data)
    assert store.statuses[-1] == "idle"


def test_message_events_outside_a_turn_are_written_then_folded() -> None:
    store = MemoryStore([Message.user("old")])

    async def main() -> None:
        agent = instance(store, [])
        await agent.apply_message_events([MessageEvent.truncate()])
        await agent.close()

    run(main())
    assert store.texts == [] and len(store.writes) == 1


def test_llm_spans_are_built_only_for_a_typed_sink() -> None:
    from goondan.runtime.events import LlmCallEnded, LlmCallStarted, RuntimeEvent, StepStarted
    from goondan.runtime.observe import EventSink

    class Recorder(EventSink):
        def __init__(self) -> None:
            self.events: list[RuntimeEvent] = []

        def handle(self, event: RuntimeEvent) -> None:
            self.events.append(event)

    untraced = Loop(["Hello."])
    assert not untraced.observer.traced
    traced, recorder = Loop(["Hello."]), Recorder()
    traced.observer.add_sink(recorder)
    assert traced.observer.traced
    run(untraced.run("hi"))
    run(traced.run("hi"))
    step = next(e for e in recorder.events if isinstance(e, StepStarted))
    started = next(e for e in recorder.events if isinstance(e, LlmCallStarted))
    ended = next(e for e in recorder.events if isinstance(e, LlmCallEnded))
    assert started.parent_span_id == step.span_id and ended.span_id == started.span_id
    assert started.model == "scripted" and ended.finish_reason == "stop" and not ended.failed
    assert [e["type"] for e in traced.events] == [e["type"] for e in untraced.events]
