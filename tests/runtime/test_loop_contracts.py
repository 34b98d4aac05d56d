"""Contracts of the Turn → Step → ToolCall loop as the real ``AgentInstance`` runs them.

Each test registers plain middleware on a live instance (``instance.pipeline.register``) and
drives it with a scripted model, so what is checked is the runtime's behaviour, not the chain
runner's alone (that is ``tests/pipeline/test_chain.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import GoondanError, help_url
from goondan.llm.testing import ScriptedModel
from goondan.pipeline.context import StepResult, TurnResult
from goondan.runtime import Runtime
from goondan.types import ToolCatalogItem, ToolSource
from tests.support.aio import run
from tests.support.runtime_harness import BASIC, base_records, shape


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def test_catalog_is_rebuilt_each_step_config_first_and_edits_do_not_leak(state_root: Path) -> None:
    """seed 002 §2.1 rules 1, 2, 4 / §12.3, seed 000 §3.2 rules 2-3, runtime.md §6 step 5.2: every
    step starts from config tools then extension tools (deduped, config first); a step
    middleware's edits in step N (list and items) never reach step N+1."""
    model = ScriptedModel([{"toolCalls": [call("calc__add", a=1, b=1)]}, "ok"])
    seen: list[list[str]] = []

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            source = ToolSource("extension", "ext")
            instance.tools.register({"name": "ext__ping"}, lambda ctx, i: "pong", source=source)
            # Same name as a config tool: the config tool wins, once, in config position.
            instance.tools.register({"name": "calc__echo", "description": "shadow"},
                                    lambda ctx, i: "x", source=source)

            async def edit(ctx: Any) -> Any:
                seen.append([f"{t.name}:{t.description}" for t in ctx.tool_catalog])
                if ctx.step_index == 0:
                    ctx.tool_catalog[0].description = "edited in place"
                    ctx.tool_catalog[0].parameters["properties"]["c"] = {"type": "number"}
                    ctx.tool_catalog.pop(1)
                    ctx.tool_catalog.append(ToolCatalogItem("calc__extra"))
                return await ctx.next()

            instance.pipeline.register("step", edit)
            await rt.run_turn("plain", "go")

    run(main())
    fresh = ["calc__add:Add two numbers.", "calc__echo:Return the input unchanged.",
             "calc__wait:Wait until the test releases it (or forever).", "ext__ping:"]
    assert seen == [fresh, fresh]
    assert [t.name for t in model.requests[0].tools] == [
        "calc__add", "calc__wait", "ext__ping", "calc__extra"
    ]
    second = model.requests[1].tools
    assert [t.name for t in second] == ["calc__add", "calc__echo", "calc__wait", "ext__ping"]
    assert second[0].description == "Add two numbers."
    assert "c" not in second[0].parameters["properties"]


def test_nested_args_edits_reach_the_handler_but_not_the_recorded_call(state_root: Path) -> None:
    """seed 000 §3.3 rules 2-3 / §9.4: args edited before next() (even nested values, in place)
    reach the handler, while the assistant message keeps the model's original arguments."""
    model = ScriptedModel([
        {"toolCalls": [call("calc__echo", text="short", opts={"n": 1, "tags": ["a"]})]},
        "done",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            received: list[Any] = []

            async def handler(ctx: Any, args: Any) -> Any:
                received.append(json.loads(json.dumps(args)))
                return "ok"

            tool = instance.tools.get("calc__echo")
            assert tool is not None
            object.__setattr__(tool, "handler", handler)
            object.__setattr__(tool, "is_async", True)

            async def mutate(ctx: Any) -> Any:
                ctx.args["opts"]["n"] = 2
                ctx.args["opts"]["tags"].append("b")
                ctx.args["text"] = "changed"
                return await ctx.next()

            instance.pipeline.register("toolCall", mutate)
            await rt.run_turn("plain", "go")
            records = base_records(instance)
            assert received == [{"text": "changed", "opts": {"n": 2, "tags": ["a", "b"]}}]
            original = {"text": "short", "opts": {"n": 1, "tags": ["a"]}}
            assert records[1]["data"]["content"][0]["input"] == original
            assert instance.messages[1].data["content"][0]["input"] == original
        # The next model request shows the model its own call, unchanged.
        assistant = model.requests[1].messages[1]
        assert assistant["content"][0]["input"] == {
            "text": "short",
            "opts": {"n": 1, "tags": ["a"]},
        }

    run(main())


def test_turn_middleware_emits_after_next_land_in_the_same_fold(state_root: Path) -> None:
    """seed 000 §3.1 rule 4 / §7.1 rule 3, runtime.md §6 step 6: events emitted after next()
    returned are folded with the turn: base.jsonl has them, events.jsonl is empty."""
    model = ScriptedModel(["answer"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")

            async def after(ctx: Any) -> Any:
                result = await ctx.next()
                ctx.emit_message_event(MessageEvent.append(Message.system("post note")))
                return result

            instance.pipeline.register("turn", after)
            result = await rt.run_turn("plain", "hi")
            assert result.text == "answer"
            assert shape(base_records(instance)) == [
                ("user", "user", "hi"), ("assistant", "assistant", "answer"),
                ("system", "system", "post note"),
            ]
            assert instance.store.paths.events.read_text() == ""
            assert len(instance.state.events) == 0

    run(main())


def test_short_circuiting_turn_middleware_still_commits_what_it_emitted(state_root: Path) -> None:
    """seed 000 §2 rule 4 / §3.1 rule 7: a turn middleware that never calls next() skips the
    step loop (no model call); its result is the turn's and its events are committed."""
    model = ScriptedModel([])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")

            async def canned(ctx: Any) -> Any:
                reply = Message.assistant("canned reply")
                ctx.emit_message_event(MessageEvent.append(reply))
                return TurnResult(ctx.turn_id, "text_response", response_message=reply)

            instance.pipeline.register("turn", canned)
            result = await rt.run_turn("plain", "hi")
            assert result.finish_reason == "text_response" and result.text == "canned reply"
            assert shape(base_records(instance)) == [
                ("user", "user", "hi"), ("assistant", "assistant", "canned reply"),
            ]
            assert result.metadata["stepCount"] == 0
        assert model.requests == []

    run(main())


def test_step_middleware_exception_fails_the_turn_and_keeps_a_valid_conversation(
    state_root: Path,
) -> None:
    """runtime.md §6 Errors / Decision 3: an exception in step middleware (after the tools ran)
    ends the turn with finishReason error; what was emitted is committed; step.failed carries
    the error; the instance stays usable."""
    model = ScriptedModel([{"toolCalls": [call("calc__add", a=1, b=2)]}, "again"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            events: list[dict[str, Any]] = []
            instance.subscribe(events.append)
            armed = [True]

            async def explode(ctx: Any) -> Any:
                result = await ctx.next()
                if armed[0]:
                    armed[0] = False
                    raise GoondanError("step post failed", code="E_TEST_STEP")
                return result

            instance.pipeline.register("step", explode)
            failed = await rt.run_turn("plain", "one")
            assert failed.finish_reason == "error"
            assert failed.error == {
                "code": "E_TEST_STEP",
                "message": "step post failed",
                "helpUrl": help_url("E_TEST_STEP"),
            }
            assert shape(base_records(instance)) == [
                ("user", "user", "one"), ("assistant", "assistant", "call:calc__add"),
                ("tool", "tool", "result:calc__add:json"),
            ]
            step_failed = [e for e in events if e["type"] == "step.failed"]
            assert len(step_failed) == 1 and step_failed[0]["errorMessage"] == "step post failed"
            turn_failed = [e for e in events if e["type"] == "turn.failed"]
            assert turn_failed[0]["errorCode"] == "E_TEST_STEP"
            ok = await rt.run_turn("plain", "two")
            assert ok.finish_reason == "text_response" and ok.text == "again"

    run(main())


def test_tool_call_middleware_exception_repairs_the_interrupted_call(state_root: Path) -> None:
    """runtime.md §6 Errors / Decision 3: an exception in toolCall middleware fails the turn; the
    call left without a result gets a synthetic E_TURN_INTERRUPTED result."""
    model = ScriptedModel([{"toolCalls": [call("calc__add", a=1, b=2)]}, "later"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            armed = [True]

            async def explode(ctx: Any) -> Any:
                if armed[0]:
                    armed[0] = False
                    raise RuntimeError("middleware bug")
                return await ctx.next()

            instance.pipeline.register("toolCall", explode)
            failed = await rt.run_turn("plain", "one")
            assert failed.error is not None and "middleware bug" in failed.error["message"]
            records = base_records(instance)
            assert shape(records)[-1] == ("tool", "tool", "result:calc__add:error-json")
            assert (
                records[-1]["data"]["content"][0]["output"]["value"]["code"] == "E_TURN_INTERRUPTED"
            )
            assert (await rt.run_turn("plain", "two")).text == "later"

    run(main())


def test_parallel_tool_call_failure_keeps_the_error_code(state_root: Path) -> None:
    """runtime.md §6 Errors: with parallelToolCalls a toolCall middleware's error ends the turn
    with that error's own code and message (not a wrapping exception group)."""
    model = ScriptedModel(
        [{"toolCalls": [call("calc__add", a=1, b=2), call("calc__echo", text="x")]}]
    )

    async def main() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"parallel": model}
        ) as rt:
            instance = await rt.instance("parallel")

            async def deny(ctx: Any) -> Any:
                if ctx.tool_name == "calc__echo":
                    raise GoondanError("echo is forbidden", code="E_TEST_DENY")
                return await ctx.next()

            instance.pipeline.register("toolCall", deny)
            failed = await rt.run_turn("parallel", "both")
            assert failed.error == {
                "code": "E_TEST_DENY",
                "message": "echo is forbidden",
                "helpUrl": help_url("E_TEST_DENY"),
            }
            records = base_records(instance)
            assert [
                r["source"].get("toolName") for r in records if r["data"]["role"] == "tool"
            ] == [
                "calc__add",
                "calc__echo",
            ]

    run(main())


def test_failed_step_result_ends_the_turn_and_step_failed_has_the_message(state_root: Path) -> None:
    """seed 000 §4.7, runtime.md §9: a step chain returning status failed ends the turn with
    finishReason error; step.failed carries errorMessage as documented."""
    model = ScriptedModel(["never used"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            events: list[dict[str, Any]] = []
            instance.subscribe(events.append)

            async def refuse(ctx: Any) -> Any:
                return StepResult(
                    "failed",
                    False,
                    metadata={"errorMessage": "quota used up", "errorCode": "E_QUOTA"},
                )

            instance.pipeline.register("step", refuse)
            result = await rt.run_turn("plain", "hi")
            assert result.error == {
                "code": "E_QUOTA",
                "message": "quota used up",
                "helpUrl": help_url("E_QUOTA"),
            }
            failed = [e for e in events if e["type"] == "step.failed"]
            assert len(failed) == 1 and failed[0]["errorMessage"] == "quota used up"
            assert [e["type"] for e in events if e["type"] == "turn.failed"] == ["turn.failed"]
        assert model.requests == []

    run(main())


def test_tool_call_context_offers_no_agents_and_no_message_emit(state_root: Path) -> None:
    """seed 000 §3.3 / §4.3 / §4.4 rule 2 (MUST NOT): the toolCall context has the seed's fields
    only: no ctx.agents, and no conversation state or emitMessageEvent either."""
    model = ScriptedModel([{"toolCalls": [call("calc__add", a=1, b=2)]}, "ok"])
    fields: list[dict[str, Any]] = []

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")

            async def look(ctx: Any) -> Any:
                fields.append({
                    "agents": hasattr(ctx, "agents"),
                    "emit": hasattr(ctx, "emit_message_event"),
                    "state": hasattr(ctx, "conversation_state"),
                    "ids": (ctx.agent_name, ctx.tool_name, ctx.step_index, bool(ctx.trace_id)),
                })
                return await ctx.next()

            instance.pipeline.register("toolCall", look)
            await rt.run_turn("plain", "go")

    run(main())
    assert fields == [{"agents": False, "emit": False, "state": False,
                       "ids": ("plain", "calc__add", 0, True)}]


def test_required_tools_count_only_ok_results_of_this_turn(state_root: Path) -> None:
    """runtime.md §6 step 5.5 (MUST): requiredTools are met only when one of them returned ok in
    this Turn: an error result does not count, nor does an ok result of an earlier turn."""
    model = ScriptedModel([
        {"toolCalls": [call("calc__add", a=1)]},  # invalid args → error result
        "answer too early",
        {"toolCalls": [call("calc__add", a=1, b=2)]},
        "3",
        "second turn without tools",
        {"toolCalls": [call("calc__add", a=2, b=2)]},
        "4",
    ])

    async def main() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"strict": model}
        ) as rt:
            first = await rt.run_turn("strict", "1+2?")
            assert first.finish_reason == "text_response" and first.text == "3"
            second = await rt.run_turn("strict", "2+2?")
            assert second.finish_reason == "text_response" and second.text == "4"
            records = base_records(await rt.instance("strict"))
        reminders = [r for r in records if r["metadata"].get("goondan.requiredToolsReminder")]
        assert len(reminders) == 2
        texts = [t for _, _, t in shape(records)]
        assert texts.index("answer too early") + 1 == texts.index(reminders[0]["data"]["content"])
        assert texts.index("second turn without tools") + 1 == texts.index(
            reminders[1]["data"]["content"], texts.index("answer too early") + 2
        )
        model.assert_complete()

    run(main())


REQUIRED = {
    "turn.started": {"turnId", "instanceKey"},
    "turn.completed": {"turnId", "instanceKey", "stepCount", "duration", "latencyMs",
                       "toolCallCount", "errorCount", "tokenUsage"},
    "step.started": {"stepId", "stepIndex", "turnId"},
    "step.completed": {"stepId", "stepIndex", "turnId", "toolCallCount", "duration", "latencyMs",
                       "errorCount", "tokenUsage"},
    "tool.called": {"toolCallId", "toolName", "stepId", "turnId"},
    "tool.completed": {"toolCallId", "toolName", "status", "duration", "latencyMs", "stepId",
                       "turnId"},
    "tool.failed": {"toolCallId", "toolName", "duration", "latencyMs", "stepId", "turnId",
                    "errorMessage"},
}


def test_runtime_events_carry_the_documented_fields_despite_failing_listeners(
    state_root: Path,
) -> None:
    """runtime.md §9 / Decision 13: every lifecycle event has type, timestamp, agentName,
    traceId, spanId and its table's fields; listeners that raise (bus or subscriber) are
    logged and never affect the turn or the other listeners."""
    model = ScriptedModel([
        {"toolCalls": [call("calc__add", a=1, b=2), call("calc__nope")],
         "usage": {"inputTokens": 4, "outputTokens": 1}},
        "done",
    ])

    async def main() -> list[dict[str, Any]]:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")

            def broken(*args: Any) -> None:
                raise RuntimeError("listener bug")

            for name in REQUIRED:
                instance.bus.on(name, broken)
            instance.subscribe(broken)
            events: list[dict[str, Any]] = []
            instance.subscribe(events.append)
            result = await rt.run_turn("plain", "go")
            assert result.finish_reason == "text_response" and result.text == "done"
            return events

    events = [e for e in run(main()) if e["type"] != "llm.delta"]
    assert [e["type"] for e in events] == [
        "turn.started", "step.started", "tool.called", "tool.completed", "tool.called",
        "tool.failed", "step.completed", "step.started", "step.completed", "turn.completed",
    ]
    for event in events:
        missing = ({"type", "timestamp", "agentName", "traceId", "spanId"}
                   | REQUIRED[event["type"]]) - set(event)
        assert not missing, (event["type"], missing)
        assert event["agentName"] == "plain"
    failed = next(e for e in events if e["type"] == "tool.failed")
    assert failed["errorCode"] == "E_TOOL_NOT_IN_CATALOG"
    done = events[-1]
    assert done["errorCount"] == 1 and done["toolCallCount"] == 2
    assert done["tokenUsage"]["total"] >= 5


def test_extension_state_is_saved_once_changed_after_all_turn_middleware(state_root: Path) -> None:
    """seed 004 §13.4 rule 5, runtime.md §6 step 6: state set in turn post-processing is written
    at turn end, after the outermost turn middleware returned; unchanged state is not rewritten."""
    model = ScriptedModel(["a", "b", "c"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"onion": model}) as rt:
            instance = await rt.instance("onion")
            state = instance.extensions.get("inner").api.state
            log: list[str] = []
            save = instance.store.save_extension_state

            def counting_save(name: str, value: Any) -> Any:
                log.append(f"save:{name}:{json.dumps(value)}")
                return save(name, value)

            instance.store.save_extension_state = counting_save
            counter = [0]

            async def inner_post(ctx: Any) -> Any:
                result = await ctx.next()
                counter[0] += 1
                await state.set({"turns": min(counter[0], 2)})
                return result

            async def outermost(ctx: Any) -> Any:
                result = await ctx.next()
                log.append("outermost returned")
                return result

            instance.pipeline.register("turn", inner_post, priority=100)
            instance.pipeline.register("turn", outermost, priority=-100)
            for text in ("one", "two", "three"):
                await rt.run_turn("onion", text)
            path = instance.store.paths.dir / "extensions" / "inner.json"
            assert json.loads(path.read_text()) == {"turns": 2}
            assert log == [
                "outermost returned", 'save:inner:{"turns": 1}',
                "outermost returned", 'save:inner:{"turns": 2}',
                "outermost returned",
            ]

    run(main())


def test_tool_call_middleware_result_is_settled_to_answer_its_call(state_root: Path) -> None:
    """seed 002 §2.4 rule 1 / §10.1, Decision 3: a toolCall middleware's own result is recorded
    as the answer to *this* call (its id), and an error result without an error object gets
    one, so the turn goes on and tool.failed carries an errorMessage."""
    from goondan.types import ToolCallResult

    model = ScriptedModel(
        [{"toolCalls": [call("calc__add", a=1, b=2), call("calc__echo", text="x")]}, "fine"]
    )

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            events: list[dict[str, Any]] = []
            instance.subscribe(events.append)

            async def replace(ctx: Any) -> Any:
                if ctx.tool_name == "calc__add":
                    return ToolCallResult("made-up-id", ctx.tool_name, "ok", output={"sum": 0})
                return ToolCallResult(ctx.tool_call_id, ctx.tool_name, "error")

            instance.pipeline.register("toolCall", replace)
            result = await rt.run_turn("plain", "go")
            assert result.finish_reason == "text_response" and result.text == "fine"
            records = base_records(instance)
            calls = [p["toolCallId"] for p in records[1]["data"]["content"]]
            answers = [r["source"]["toolCallId"] for r in records if r["data"]["role"] == "tool"]
            assert answers == calls
            error = records[3]["data"]["content"][0]["output"]["value"]
            assert error["code"] == "E_TOOL" and error["message"]
            failed = next(e for e in events if e["type"] == "tool.failed")
            assert failed["errorMessage"] == error["message"]

    run(main())


def test_turn_middleware_that_recovers_from_a_failed_step_still_gets_a_repaired_conversation(
    state_root: Path,
) -> None:
    """Decision 3, seed 000 §3.1 rule 6 (MAY transform the result): a turn middleware may catch
    the step loop's exception and return its own answer; the tool call the failure left without
    a result is still repaired, so the next request is provider-valid."""
    model = ScriptedModel([{"toolCalls": [call("calc__add", a=1, b=2)]}, "next turn"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            armed = [True]

            async def explode(ctx: Any) -> Any:
                if armed[0]:
                    armed[0] = False
                    raise RuntimeError("tool layer down")
                return await ctx.next()

            async def fallback(ctx: Any) -> Any:
                try:
                    return await ctx.next()
                except RuntimeError as exc:
                    reply = Message.assistant(f"Sorry: {exc}")
                    ctx.emit_message_event(MessageEvent.append(reply))
                    return TurnResult(ctx.turn_id, "text_response", response_message=reply)

            instance.pipeline.register("turn", fallback)
            instance.pipeline.register("toolCall", explode)
            result = await rt.run_turn("plain", "one")
            assert (
                result.finish_reason == "text_response" and result.text == "Sorry: tool layer down"
            )
            records = base_records(instance)
            calls = [p["toolCallId"] for p in records[1]["data"]["content"]]
            answers = [r["source"]["toolCallId"] for r in records if r["data"]["role"] == "tool"]
            assert answers == calls
            assert (await rt.run_turn("plain", "two")).text == "next turn"
        roles = [m["role"] for m in model.requests[-1].messages]
        assert roles[:3] == ["user", "assistant", "tool"]

    run(main())
