"""The generic onion (seed 000 §2, §3, §6): next(), short-circuit, transformation, shared
context."""

from __future__ import annotations

import pytest

from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.state import ConversationState
from goondan.errors import PipelineError
from goondan.pipeline.context import (
    StepContext,
    StepResult,
    ToolCallContext,
    TurnContext,
    TurnResult,
)
from goondan.pipeline.registry import PipelineRegistry
from goondan.runtime.agents import AgentCallApi, SwarmCatalog, response_event
from goondan.types import AgentEvent, ToolCallResult, ToolCatalogItem
from tests.support.aio import run
from tests.support.pipeline_harness import ok_result, step_ctx, tool_call_ctx, turn_ctx


def recorder(log: list[str], name: str):  # type: ignore[no-untyped-def]
    async def middleware(ctx):  # type: ignore[no-untyped-def]
        log.append(f"{name}.pre")
        result = await ctx.next()
        log.append(f"{name}.post")
        return result

    return middleware


async def tool_core(ctx: ToolCallContext) -> ToolCallResult:
    return ok_result(ctx.tool_call_id, ctx.tool_name, dict(ctx.args))


def test_outer_pre_first_and_outer_post_last() -> None:
    """seed 000 §6.1 rules 1-2 and §2 rule 6: onion; outer pre runs first, outer post last."""
    log: list[str] = []
    registry = PipelineRegistry()
    registry.register("turn", recorder(log, "outer"))
    registry.register("turn", recorder(log, "inner"))

    async def core(ctx: TurnContext) -> TurnResult:
        log.append("core")
        return TurnResult(ctx.turn_id, "text_response")

    run(registry.run_turn(turn_ctx(), core))
    assert log == ["outer.pre", "inner.pre", "core", "inner.post", "outer.post"]


def test_chain_without_middleware_runs_the_core() -> None:
    """seed 000 §2 rule 2: with no layers, the chain is just the core."""
    result = run(PipelineRegistry().run_tool_call(tool_call_ctx(args={"a": 1}), tool_core))
    assert result.output == {"a": 1}


def test_next_twice_in_one_layer_raises() -> None:
    """seed 000 §2 rule 4 / §3.1 rule 7: next() exactly once; a second call is
    E_PIPELINE_NEXT_TWICE."""
    calls = 0

    async def twice(ctx):  # type: ignore[no-untyped-def]
        await ctx.next()
        return await ctx.next()

    async def core(ctx: ToolCallContext) -> ToolCallResult:
        nonlocal calls
        calls += 1
        return ok_result()

    registry = PipelineRegistry()
    registry.register("toolCall", twice)
    with pytest.raises(PipelineError) as info:
        run(registry.run_tool_call(tool_call_ctx(), core))
    assert info.value.code == "E_PIPELINE_NEXT_TWICE"
    assert "twice" in info.value.message
    assert calls == 1


def test_next_twice_detected_in_inner_layer_and_after_inner_failure() -> None:
    """seed 000 §3.2 rules 5-6: a retry by calling next() again (even after an exception) is
    refused."""
    async def retrying(ctx):  # type: ignore[no-untyped-def]
        try:
            return await ctx.next()
        except RuntimeError:
            return await ctx.next()

    async def failing(ctx):  # type: ignore[no-untyped-def]
        raise RuntimeError("llm down")

    registry = PipelineRegistry()
    registry.register("step", recorder([], "outer"))
    registry.register("step", retrying)
    registry.register("step", failing)

    async def core(ctx: StepContext) -> StepResult:
        return StepResult("completed", False)

    with pytest.raises(PipelineError) as info:
        run(registry.run_step(step_ctx(), core))
    assert info.value.code == "E_PIPELINE_NEXT_TWICE"


def test_exceptions_propagate_through_the_onion() -> None:
    """seed 000 §2 rule 11 / §9.5: middleware signals intent by raising; the runtime sees the
    exception."""
    log: list[str] = []

    async def raiser(ctx):  # type: ignore[no-untyped-def]
        raise ValueError("stop")

    registry = PipelineRegistry()
    registry.register("toolCall", recorder(log, "outer"))
    registry.register("toolCall", raiser)
    with pytest.raises(ValueError, match="stop"):
        run(registry.run_tool_call(tool_call_ctx(), tool_core))
    assert log == ["outer.pre"]


def test_skipping_next_short_circuits_inner_layers_and_core() -> None:
    """seed 000 §2 rule 4 / §3.1 rule 7: without next(), inner layers and the core do not run."""
    log: list[str] = []

    async def blocker(ctx):  # type: ignore[no-untyped-def]
        log.append("blocker")
        return ToolCallResult.failure(ctx.tool_call_id, ctx.tool_name, "blocked", code="E_POLICY")

    async def core(ctx: ToolCallContext) -> ToolCallResult:
        log.append("core")
        return ok_result()

    registry = PipelineRegistry()
    registry.register("toolCall", recorder(log, "outer"))
    registry.register("toolCall", blocker)
    registry.register("toolCall", recorder(log, "inner"))
    result = run(registry.run_tool_call(tool_call_ctx(), core))
    assert log == ["outer.pre", "blocker", "outer.post"]
    assert result.status == "error" and result.error is not None
    assert result.error.code == "E_POLICY"


def test_results_may_be_transformed() -> None:
    """seed 000 §2 rule 5 / §3.1 rule 6: a middleware may transform next()'s result."""
    async def upper(ctx):  # type: ignore[no-untyped-def]
        result = await ctx.next()
        result.output = str(result.output).upper()
        return result

    async def replace(ctx):  # type: ignore[no-untyped-def]
        await ctx.next()
        return ToolCallResult.success(ctx.tool_call_id, ctx.tool_name, "replaced")

    async def core(ctx: ToolCallContext) -> ToolCallResult:
        return ok_result(output="quiet")

    registry = PipelineRegistry()
    registry.register("toolCall", upper)
    assert run(registry.run_tool_call(tool_call_ctx(), core)).output == "QUIET"
    registry.register("toolCall", replace)
    assert run(registry.run_tool_call(tool_call_ctx(), core)).output == "REPLACED"


def test_turn_result_transformed() -> None:
    """seed 000 §3.1 rule 6: TurnResult may be transformed in turn.post."""
    async def tag(ctx):  # type: ignore[no-untyped-def]
        result = await ctx.next()
        result.metadata["tagged"] = True
        return result

    async def core(ctx: TurnContext) -> TurnResult:
        return TurnResult(ctx.turn_id, "text_response")

    registry = PipelineRegistry()
    registry.register("turn", tag)
    assert run(registry.run_turn(turn_ctx(), core)).metadata == {"tagged": True}


def test_a_middleware_returning_nothing_is_reported() -> None:
    """seed 000 §5.1: middleware types return the chain's result type; None names the culprit."""
    async def forgot_return(ctx):  # type: ignore[no-untyped-def]
        await ctx.next()

    registry = PipelineRegistry()
    registry.register("toolCall", forgot_return)
    with pytest.raises(PipelineError) as info:
        run(registry.run_tool_call(tool_call_ctx(), tool_core))
    assert info.value.code == "E_PIPELINE_RESULT"
    assert "forgot_return" in info.value.message and "return await ctx.next()" in info.value.message


def test_next_outside_a_chain_is_an_error() -> None:
    """seed 000 §2 rule 2: next() only exists inside a chain (E_PIPELINE_NO_CHAIN)."""
    ctx = tool_call_ctx()
    with pytest.raises(PipelineError) as info:
        run(ctx.next())
    assert info.value.code == "E_PIPELINE_NO_CHAIN"
    registry = PipelineRegistry()

    async def keep(c):  # type: ignore[no-untyped-def]
        return await c.next()

    registry.register("toolCall", keep)
    run(registry.run_tool_call(ctx, tool_core))
    with pytest.raises(PipelineError) as info:
        run(ctx.next())
    assert info.value.code == "E_PIPELINE_NO_CHAIN"


def test_args_edited_before_next_reach_the_core() -> None:
    """seed 000 §3.3 rules 2-3: args are mutable and the edited args reach the handler."""
    async def rewrite(ctx):  # type: ignore[no-untyped-def]
        ctx.args = {**ctx.args, "command": "ls -la"}
        return await ctx.next()

    async def add_flag(ctx):  # type: ignore[no-untyped-def]
        ctx.args["flag"] = True
        return await ctx.next()

    registry = PipelineRegistry()
    registry.register("toolCall", rewrite)
    registry.register("toolCall", add_flag)
    result = run(registry.run_tool_call(tool_call_ctx(args={"command": "ls"}), tool_core))
    assert result.output == {"command": "ls -la", "flag": True}


def test_catalog_edits_before_next_are_seen_by_the_core() -> None:
    """seed 000 §3.2 rules 2-3: tool_catalog is mutable and the edited catalog reaches the step
    core."""
    seen: list[list[str]] = []

    async def drop(ctx):  # type: ignore[no-untyped-def]
        ctx.tool_catalog = [t for t in ctx.tool_catalog if "disabled" not in t.name]
        return await ctx.next()

    async def add(ctx):  # type: ignore[no-untyped-def]
        ctx.tool_catalog.append(ToolCatalogItem("skills__list"))
        return await ctx.next()

    async def core(ctx: StepContext) -> StepResult:
        seen.append([t.name for t in ctx.tool_catalog])
        return StepResult("completed", False)

    registry = PipelineRegistry()
    registry.register("step", drop)
    registry.register("step", add)
    catalog = [ToolCatalogItem("bash__exec"), ToolCatalogItem("x__disabled")]
    run(registry.run_step(step_ctx(tool_catalog=catalog), core))
    assert seen == [["bash__exec", "skills__list"]]


def test_metadata_is_shared_by_every_layer_and_the_core() -> None:
    """seed 000 §3 context tables: metadata is mutable and shared between middlewares."""
    async def writer(ctx):  # type: ignore[no-untyped-def]
        ctx.metadata["from_outer"] = 1
        result = await ctx.next()
        assert ctx.metadata["from_core"] == 2
        return result

    async def core(ctx: ToolCallContext) -> ToolCallResult:
        ctx.metadata["from_core"] = ctx.metadata["from_outer"] + 1
        return ok_result()

    registry = PipelineRegistry()
    registry.register("toolCall", writer)
    run(registry.run_tool_call(tool_call_ctx(), core))


def test_turn_middleware_sees_base_messages_and_emits_before_and_after_next() -> None:
    """seed 000 §3.1 rules 2-4, §4.5 rules 1-4, §7.1 rules 2-3: baseMessages, emit in pre and
    post."""
    first = Message.user("earlier")
    state = ConversationState([first])
    observed: dict[str, object] = {}

    async def mw(ctx):  # type: ignore[no-untyped-def]
        observed["base"] = [m.id for m in ctx.conversation_state.base_messages]
        ctx.emit_message_event(MessageEvent.append(Message.system("pre")))
        result = await ctx.next()
        ctx.emit_message_event(MessageEvent.append(Message.system("post")))
        return result

    async def core(ctx: TurnContext) -> TurnResult:
        observed["in_core"] = [m.text for m in ctx.conversation_state.next_messages]
        return TurnResult(ctx.turn_id, "text_response")

    registry = PipelineRegistry()
    registry.register("turn", mw)
    run(registry.run_turn(turn_ctx(state), core))
    assert observed["base"] == [first.id]
    assert observed["in_core"] == ["earlier", "pre"]
    assert [e.type for e in state.events] == ["append", "append"]
    assert [m.text for m in state.next_messages] == ["earlier", "pre", "post"]
    assert [m.id for m in state.base_messages] == [first.id]


class _EchoRouter:
    """Transport under the real ``AgentCallApi``: records what it is handed, answers "echo:"."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None, int | None]] = []

    async def request(self, target: str, event: AgentEvent, *, timeout_ms: int) -> AgentEvent:
        self.calls.append(("request", target, event.input, timeout_ms))
        return response_event(
            event, agent_name=target, instance_key="k", text=f"echo:{event.input}"
        )

    async def send(self, target: str, event: AgentEvent) -> None:
        self.calls.append(("send", target, event.input, None))


def test_turn_and_step_middleware_can_call_other_agents() -> None:
    """seed 000 §3.1 rule 5, §3.2 rule 4, §4.4 rule 3: ctx.agents.request/send from turn and step
    middleware, through the runtime's real ``ctx.agents``; a request without ``timeout_ms``
    waits 15 000 ms."""
    async def ask(ctx):  # type: ignore[no-untyped-def]
        answer = await ctx.agents.request("reviewer", "check this")
        await ctx.agents.send("auditor", "fyi")
        ctx.metadata["answer"] = answer["response"]
        return await ctx.next()

    async def step_core(ctx: StepContext) -> StepResult:
        return StepResult("completed", False, metadata=dict(ctx.metadata))

    async def turn_core(ctx: TurnContext) -> TurnResult:
        return TurnResult(ctx.turn_id, "text_response", metadata=dict(ctx.metadata))

    router = _EchoRouter()
    catalog = SwarmCatalog("default", "main", ("main", "reviewer", "auditor"))

    def agents() -> AgentCallApi:
        return AgentCallApi(router, catalog, agent_name="main", instance_key="k")

    registry = PipelineRegistry()
    registry.register("turn", ask)
    registry.register("step", ask)
    assert (
        run(registry.run_turn(turn_ctx(agents=agents()), turn_core)).metadata["answer"]
        == "echo:check this"
    )
    assert (
        run(registry.run_step(step_ctx(agents=agents()), step_core)).metadata["answer"]
        == "echo:check this"
    )
    assert (
        router.calls
        == [("request", "reviewer", "check this", 15_000), ("send", "auditor", "fyi", None)] * 2
    )


def test_tool_call_context_has_no_agents() -> None:
    """seed 000 §4.4 rules 1-2: ctx.agents only on turn/step contexts, never on toolCall (MUST
    NOT)."""
    assert "agents" in TurnContext.__dataclass_fields__
    assert "agents" in StepContext.__dataclass_fields__
    assert "agents" not in ToolCallContext.__dataclass_fields__
    assert not hasattr(tool_call_ctx(), "agents")


def test_context_fields_of_seed_000() -> None:
    """seed 000 §3.1-3.3 / §4.1-4.3: the context fields exist (snake_case)."""
    common = {"agent_name", "instance_key", "turn_id", "trace_id", "metadata"}
    assert common | {"input_event", "conversation_state", "agents", "emit_message_event"} <= set(
        TurnContext.__dataclass_fields__
    )
    assert common | {"turn", "step_index", "conversation_state", "agents", "emit_message_event",
                     "tool_catalog"} <= set(StepContext.__dataclass_fields__)
    assert common | {"step_index", "tool_name", "tool_call_id", "args"} <= set(
        ToolCallContext.__dataclass_fields__
    )


def test_nested_chains_turn_step_toolcall() -> None:
    """seed 000 §6.3 / §12: toolCall chains run inside the step core, steps inside the turn core."""
    log: list[str] = []
    registry = PipelineRegistry()
    for kind in ("turn", "step", "toolCall"):
        registry.register(kind, recorder(log, f"A.{kind}"))
        registry.register(kind, recorder(log, f"B.{kind}"))

    async def turn_core(ctx: TurnContext) -> TurnResult:
        async def step_core(sctx: StepContext) -> StepResult:
            await registry.run_tool_call(tool_call_ctx(), tool_core)
            return StepResult("completed", True)

        await registry.run_step(step_ctx(), step_core)
        return TurnResult(ctx.turn_id, "text_response")

    run(registry.run_turn(turn_ctx(), turn_core))
    assert log == [
        "A.turn.pre", "B.turn.pre",
        "A.step.pre", "B.step.pre",
        "A.toolCall.pre", "B.toolCall.pre", "B.toolCall.post", "A.toolCall.post",
        "B.step.post", "A.step.post",
        "B.turn.post", "A.turn.post",
    ]


def test_concurrent_chains_do_not_interfere() -> None:
    """seed 000 §3.3: each tool call has its own context, so parallel tool calls chain
    independently."""
    import asyncio

    gate = asyncio.Event()

    async def slow(ctx):  # type: ignore[no-untyped-def]
        ctx.metadata["seen"] = ctx.tool_call_id
        if ctx.tool_call_id == "first":
            await gate.wait()
        result = await ctx.next()
        assert ctx.metadata["seen"] == ctx.tool_call_id
        return result

    async def core(ctx: ToolCallContext) -> ToolCallResult:
        if ctx.tool_call_id == "second":
            gate.set()
        return ok_result(ctx.tool_call_id, ctx.tool_name, ctx.tool_call_id)

    registry = PipelineRegistry()
    registry.register("toolCall", slow)
    registry.register("toolCall", recorder([], "inner"))

    async def main() -> list[ToolCallResult]:
        return list(await asyncio.gather(
            registry.run_tool_call(tool_call_ctx(tool_call_id="first"), core),
            registry.run_tool_call(tool_call_ctx(tool_call_id="second"), core),
        ))

    assert [r.output for r in run(main())] == ["first", "second"]
