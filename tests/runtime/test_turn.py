"""The Turn → Step → ToolCall loop, through the embedding API with scripted models."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from goondan.errors import LlmHttpError
from goondan.llm.base import ModelRequest
from goondan.llm.testing import FunctionModel, ScriptedModel
from goondan.runtime import Runtime
from goondan.types import AgentEvent
from tests.support.aio import run
from tests.support.runtime_harness import BASIC, base_records, shape


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def test_three_tool_steps_write_exact_sequence(state_root: Path) -> None:
    model = ScriptedModel([
        {"text": "first", "toolCalls": [call("calc__add", a=1, b=2)]},
        {"toolCalls": [call("calc__echo", text="hi")]},
        {"toolCalls": [call("calc__add", a=3, b=4), call("calc__echo", text="x")]},
        "done",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            result = await rt.run_turn("plain", "go", instance_key="k1")
            assert result.finish_reason == "text_response"
            assert result.text == "done"
            instance = await rt.instance("plain", "k1")
            records = base_records(instance)
            assert shape(records) == [
                ("user", "user", "go"),
                ("assistant", "assistant", "first|call:calc__add"),
                ("tool", "tool", "result:calc__add:json"),
                ("assistant", "assistant", "call:calc__echo"),
                ("tool", "tool", "result:calc__echo:text"),
                ("assistant", "assistant", "call:calc__add|call:calc__echo"),
                ("tool", "tool", "result:calc__add:json"),
                ("tool", "tool", "result:calc__echo:text"),
                ("assistant", "assistant", "done"),
            ]
            # stepIds are 0-based and name the turn; tool results answer the calls in order.
            turn_id = result.turn_id
            steps = [r["source"].get("stepId") for r in records if r["data"]["role"] == "assistant"]
            assert steps == [f"{turn_id}-step-{i}" for i in range(4)]
            calls = [p["toolCallId"] for r in records for p in r["data"]["content"]
                     if isinstance(p, dict) and p.get("type") == "tool-call"]
            results = [r["source"]["toolCallId"] for r in records if r["data"]["role"] == "tool"]
            assert calls == results
            assert records[2]["data"]["content"][0]["output"]["value"] == {"sum": 3}
            # events.jsonl is empty after the fold-commit.
            assert instance.store.paths.events.read_text() == ""
        model.assert_complete()
        # The system prompt and the tools reached the model; the history grows per step.
        first = model.requests[0]
        assert first.system == "You are a test agent."
        assert [t.name for t in first.tools] == ["calc__add", "calc__echo", "calc__wait"]
        assert [len(r.messages) for r in model.requests] == [1, 3, 5, 8]

    run(main())


def test_onion_order_across_turn_step_and_tool_call(state_root: Path) -> None:
    model = ScriptedModel([{"toolCalls": [call("calc__add", a=1, b=1)]}, "ok"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"onion": model}) as rt:
            instance = await rt.instance("onion")
            seen: list[str] = []
            instance.bus.on("onion", seen.append)
            await rt.run_turn("onion", "hi")
        assert seen == [
            "outer:turn:pre", "inner:turn:pre",
            "outer:step:pre", "inner:step:pre",
            "outer:toolCall:pre", "inner:toolCall:pre",
            "inner:toolCall:post", "outer:toolCall:post",
            "inner:step:post", "outer:step:post",
            "outer:step:pre", "inner:step:pre",
            "inner:step:post", "outer:step:post",
            "inner:turn:post", "outer:turn:post",
        ]

    run(main())


def test_step_catalog_edit_and_tool_args_edit(state_root: Path) -> None:
    model = ScriptedModel([{"toolCalls": [call("calc__add", a=5, b=1)]}, "ok"])

    async def main() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"editor": model}
        ) as rt:
            await rt.run_turn("editor", "hi")
            instance = await rt.instance("editor")
            records = base_records(instance)
        # hideTool removed calc__echo from what the model saw ...
        assert [t.name for t in model.requests[0].tools] == ["calc__add", "calc__wait"]
        # ... and doubleArg doubled "a" before the handler ran: 10 + 1.
        assert records[2]["data"]["content"][0]["output"]["value"] == {"sum": 11}
        # The recorded tool call keeps what the model asked for.
        assert records[1]["data"]["content"][0]["input"] == {"a": 5, "b": 1}

    run(main())


def test_max_steps_per_turn_is_enforced(state_root: Path) -> None:
    model = ScriptedModel([{"toolCalls": [call("calc__echo", text="again")]}], loop=True)

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            result = await rt.run_turn("plain", "loop forever")
            instance = await rt.instance("plain")
            records = base_records(instance)
        assert result.finish_reason == "max_steps"
        assert len(model.requests) == 4  # Swarm policy.maxStepsPerTurn
        assert "limit of 4 steps" in result.text
        assert shape(records)[-1] == ("assistant", "assistant", result.text)
        assert result.metadata["stepCount"] == 4

    run(main())


def test_required_tools_reminder_then_success(state_root: Path) -> None:
    model = ScriptedModel([
        "I can answer without tools",
        {"toolCalls": [call("calc__add", a=2, b=2)]},
        "4",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"strict": model}
        ) as rt:
            result = await rt.run_turn("strict", "2+2?")
            records = base_records(await rt.instance("strict"))
        assert result.finish_reason == "text_response"
        assert result.text == "4"
        roles = shape(records)
        assert roles[0] == ("user", "user", "2+2?")
        assert roles[1] == ("assistant", "assistant", "I can answer without tools")
        assert roles[2][0] == "user" and "calc__add" in roles[2][2]
        assert records[2]["metadata"].get("goondan.requiredToolsReminder") is True
        model.assert_complete()

    run(main())


def test_required_tools_unmet_until_max_steps(state_root: Path) -> None:
    model = ScriptedModel(["no tools for you"], loop=True)

    async def main() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"strict": model}
        ) as rt:
            result = await rt.run_turn("strict", "2+2?")
        assert result.finish_reason == "max_steps"
        assert "calc__add" in result.text and result.text.startswith("no tools for you")

    run(main())


def test_provider_failure_mid_turn_is_recoverable(state_root: Path) -> None:
    model = ScriptedModel([
        {"toolCalls": [call("calc__add", a=1, b=2)]},
        LlmHttpError("upstream exploded", status=500),
        "recovered",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            failed = await rt.run_turn("plain", "one")
            assert failed.finish_reason == "error"
            assert failed.error is not None and failed.error["code"] == "E_LLM_HTTP"
            instance = await rt.instance("plain")
            assert instance.status == "idle"
            assert shape(base_records(instance)) == [
                ("user", "user", "one"),
                ("assistant", "assistant", "call:calc__add"),
                ("tool", "tool", "result:calc__add:json"),
            ]
            ok = await rt.run_turn("plain", "two")
            assert ok.finish_reason == "text_response" and ok.text == "recovered"
        # The next request is provider-valid: every tool call has its result.
        messages = model.requests[-1].messages
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]

    run(main())


def test_middleware_exception_fails_turn_and_instance_stays_usable(state_root: Path) -> None:
    model = ScriptedModel(["fine"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"onion": model}) as rt:
            instance = await rt.instance("onion")

            async def broken(ctx: Any) -> Any:
                await ctx.agents.request("other", "hi")
                return await ctx.next()

            instance.pipeline.register("turn", broken)
            result = await rt.run_turn("onion", "hi")
            assert result.finish_reason == "error"
            # agent-to-agent calls run in process now; 'other' is no agent of the swarm
            assert result.error is not None and result.error["code"] == "E_AGENT_NOT_FOUND"
            assert "onion" in result.error.get("suggestion", "")
            assert shape(base_records(instance)) == [("user", "user", "hi")]

    run(main())


def test_cancellation_repairs_interrupted_tool_call(state_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "wait"
    model = ScriptedModel([
        {"toolCalls": [call("calc__add", a=1, b=1), call("calc__wait", marker=str(marker))]},
        "after cancel",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            events: list[dict[str, Any]] = []
            rt.subscribe(events.append)
            task = asyncio.ensure_future(rt.run_turn("plain", "block"))
            started = Path(f"{marker}.started")
            async with asyncio.timeout(10):
                while not started.exists():
                    await asyncio.sleep(0.005)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            else:  # pragma: no cover
                raise AssertionError("the turn should have been cancelled")
            assert instance.status == "idle"
            records = base_records(instance)
            assert shape(records) == [
                ("user", "user", "block"),
                ("assistant", "assistant", "call:calc__add|call:calc__wait"),
                ("tool", "tool", "result:calc__add:json"),
                ("tool", "tool", "result:calc__wait:error-json"),
            ]
            assert (
                records[3]["data"]["content"][0]["output"]["value"]["code"] == "E_TURN_INTERRUPTED"
            )
            failed = [e for e in events if e["type"] == "turn.failed"]
            assert failed and failed[0]["errorCode"] == "E_TURN_CANCELLED"
            result = await rt.run_turn("plain", "again")
            assert result.text == "after cancel"

    run(main())


def test_parallel_tool_calls_keep_call_order(state_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "slow"
    model = ScriptedModel([
        {"toolCalls": [call("calc__wait", marker=str(marker)), call("calc__add", a=1, b=2)]},
        "both done",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"parallel": model}
        ) as rt:
            completed: list[str] = []

            def on_event(event: dict[str, Any]) -> None:
                if event["type"] == "tool.completed":
                    completed.append(event["toolName"])
                    if event["toolName"] == "calc__add":
                        # add finished while wait is still running: release it now.
                        Path(f"{marker}.release").write_text("go")

            rt.subscribe(on_event)
            result = await rt.run_turn("parallel", "both")
            records = base_records(await rt.instance("parallel"))
        assert result.text == "both done"
        assert completed == ["calc__add", "calc__wait"]
        assert [r["source"].get("toolName") for r in records if r["data"]["role"] == "tool"] == [
            "calc__wait", "calc__add",
        ]

    run(main())


def test_events_carry_trace_span_and_usage(state_root: Path) -> None:
    model = ScriptedModel(
        [
            {
                "toolCalls": [call("calc__add", a=1, b=1)],
                "usage": {"inputTokens": 10, "outputTokens": 2},
            },
            {"text": "ok", "usage": {"inputTokens": 20, "outputTokens": 3}},
        ]
    )
    trace = "ab" * 16

    async def main() -> list[dict[str, Any]]:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            events: list[dict[str, Any]] = []
            rt.subscribe(events.append)
            instance = await rt.instance("plain")
            await instance.run(AgentEvent(type="message", input="hi", trace_id=trace,
                                          metadata={"parentSpanId": "c" * 16}))
            return events

    events = run(main())
    kinds = [e["type"] for e in events if e["type"] != "llm.delta"]
    assert kinds == [
        "turn.started", "step.started", "tool.called", "tool.completed", "step.completed",
        "step.started", "step.completed", "turn.completed",
    ]
    assert all(e["traceId"] == trace for e in events if e["type"] != "llm.delta")
    by_type = {e["type"]: e for e in events}
    turn = by_type["turn.started"]
    assert turn["parentSpanId"] == "c" * 16
    step = next(e for e in events if e["type"] == "step.started")
    tool = by_type["tool.called"]
    assert step["parentSpanId"] == turn["spanId"]
    assert tool["parentSpanId"] == step["spanId"]
    done = by_type["turn.completed"]
    assert done["toolCallCount"] == 1 and done["errorCount"] == 0 and done["stepCount"] == 2
    assert done["tokenUsage"]["prompt"] == 30 and done["tokenUsage"]["completion"] == 5
    assert isinstance(done["latencyMs"], float)
    first_step = next(e for e in events if e["type"] == "step.completed")
    assert first_step["toolCallCount"] == 1 and first_step["tokenUsage"]["prompt"] == 10
    deltas = "".join(e["text"] for e in events if e["type"] == "llm.delta" and e["kind"] == "text")
    assert deltas == "ok"


def test_reply_to_sends_response_through_on_outgoing(state_root: Path) -> None:
    from goondan.types import ReplyChannel

    sent: list[AgentEvent] = []

    async def on_outgoing(event: AgentEvent) -> None:
        sent.append(event)

    model = FunctionModel(lambda request: f"echo {len(request.messages)}")

    async def main() -> None:
        rt = Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model})
        rt.on_outgoing = on_outgoing
        async with rt:
            instance = await rt.instance("plain", "callee")
            event = AgentEvent(
                type="agent.request", input="ping", instance_key="callee",
                source={"kind": "agent", "name": "boss"},
                reply_to=ReplyChannel("boss", "corr-1"), trace_id="d" * 32,
                metadata={"callerInstanceKey": "boss-key"},
            )
            result = await instance.run(event)
            assert result.text == "echo 1"
            assert len(sent) == 1
            answer = sent[0]
            assert answer.type == "agent.response"
            assert answer.input == "echo 1"
            assert answer.metadata["inReplyTo"] == "corr-1"
            assert answer.instance_key == "boss-key"
            assert answer.trace_id == "d" * 32
            # An agent event gets the [goondan_context] header in its user message.
            assert instance.messages[0].text.startswith("[goondan_context]\n")

    run(main())


def test_drain_finishes_running_turn_and_refuses_queued(state_root: Path) -> None:
    from goondan.errors import AgentError

    async def main() -> None:
        started, release = asyncio.Event(), asyncio.Event()

        async def reply(request: ModelRequest) -> str:
            started.set()
            await release.wait()
            return "a"

        model = FunctionModel(reply)
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            first = instance.submit("one")
            await started.wait()
            assert instance.status == "processing"
            second = instance.submit("two")
            drained = asyncio.ensure_future(instance.drain())
            release.set()
            assert (await first).text == "a"
            await drained
            try:
                await second
            except AgentError as err:
                assert err.code == "E_AGENT_DRAINING"
            else:  # pragma: no cover
                raise AssertionError("a queued event must be refused once draining")
            try:
                await instance.run("three")
            except AgentError as err:
                assert err.code == "E_AGENT_DRAINING"
            else:  # pragma: no cover
                raise AssertionError("a new event must be refused once draining")
            assert [m.text for m in instance.messages] == ["one", "a"]

    run(main())


def test_fifo_one_turn_at_a_time(state_root: Path) -> None:
    active = 0
    peak = 0

    async def reply(request: ModelRequest) -> str:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0)
        active -= 1
        return "ok"

    model = FunctionModel(reply)

    async def main() -> list[str]:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            tasks = [instance.submit(f"m{i}") for i in range(5)]
            await asyncio.gather(*tasks)
            return [m.text for m in instance.messages if m.role == "user"]

    assert run(main()) == [f"m{i}" for i in range(5)]
    assert peak == 1


def test_a_connector_events_input_carries_its_id_and_a_reopened_instance_finds_it(
    state_root: Path,
) -> None:
    """The claim check of an agent process that takes over a dead process's reservation
    (docs/connectors.md "Delivery guarantee"): the input message of a connector event's Turn
    carries ``connectorEventId``, and a later process sees it in the stored conversation."""
    async def first() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"plain": ScriptedModel(["ok"])}
        ) as rt:
            await rt.run_turn(
                "plain", "from the hook", instance_key="c", metadata={"connectorEventId": "gh-42"}
            )
            instance = await rt.instance("plain", "c")
            assert instance.messages[0].metadata == {"connectorEventId": "gh-42"}

    async def later() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"plain": ScriptedModel(["ok"])}
        ) as rt:
            instance = await rt.instance("plain", "c")
            event = AgentEvent(type="msg", input="x", metadata={"connectorEventId": "gh-42"})
            other = AgentEvent(type="msg", input="x", metadata={"connectorEventId": "gh-43"})
            assert instance.input_written(event) and not instance.input_written(other)
            assert not instance.input_written(AgentEvent(type="msg", input="x"))

    run(first())
    run(later())
