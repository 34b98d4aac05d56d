"""PipelineRegistry registration rules (seed 000 §2, §5, §6.2; seed 004 §13.2.1)."""

from __future__ import annotations

import functools

import pytest

from goondan.errors import PipelineError
from goondan.pipeline.context import ToolCallContext
from goondan.pipeline.registry import MIDDLEWARE_TYPES, PipelineRegistry
from goondan.types import ToolCallResult
from tests.support.aio import run
from tests.support.pipeline_harness import ok_result, tool_call_ctx


async def passthrough(ctx):  # type: ignore[no-untyped-def]
    return await ctx.next()


def recorder(log: list[str], name: str):  # type: ignore[no-untyped-def]
    async def middleware(ctx):  # type: ignore[no-untyped-def]
        log.append(f"{name}.pre")
        result = await ctx.next()
        log.append(f"{name}.post")
        return result

    middleware.__qualname__ = name
    return middleware


async def core(ctx: ToolCallContext) -> ToolCallResult:
    return ok_result(ctx.tool_call_id, ctx.tool_name)


def test_only_three_middleware_types_exist() -> None:
    """seed 000 §3 and §5.1 rule 1 / seed 004 §13.2.1 rule 1: only turn, step and toolCall."""
    assert MIDDLEWARE_TYPES == ("turn", "step", "toolCall")
    registry = PipelineRegistry()
    for kind in MIDDLEWARE_TYPES:
        registry.register(kind, passthrough)
    for bad in ("turn.pre", "toolCall.exec", "tool_call", "llm", "", "Turn"):
        with pytest.raises(PipelineError) as info:
            registry.register(bad, passthrough)
        assert info.value.code == "E_PIPELINE_TYPE"
        assert info.value.suggestion


def test_no_mutate_or_wrap_api() -> None:
    """seed 000 §5.1 rule 2 / seed 004 §13.2.1 rule 2: mutate(point, fn) and wrap(point, fn) MUST
    NOT exist."""
    registry = PipelineRegistry()
    assert not hasattr(registry, "mutate")
    assert not hasattr(registry, "wrap")


def test_non_callable_and_sync_functions_are_rejected_at_registration() -> None:
    """seed 000 §2 rule 1: every hook is an (async) middleware; others are refused up front."""
    registry = PipelineRegistry()
    for bad in (None, 42, "middleware", lambda ctx: ctx.next()):
        with pytest.raises(PipelineError) as info:
            registry.register("step", bad)  # type: ignore[arg-type]
        assert info.value.code == "E_PIPELINE_MIDDLEWARE"
    with pytest.raises(PipelineError):
        registry.register("step", passthrough, priority="high")  # type: ignore[arg-type]
    with pytest.raises(PipelineError):
        registry.register("step", passthrough, priority=True)
    assert registry.count() == 0


def test_async_callables_of_every_shape_are_accepted() -> None:
    """seed 000 §5.1: an async function, a partial of one, a bound method or an async __call__."""

    class Mw:
        async def __call__(self, ctx):  # type: ignore[no-untyped-def]
            return await ctx.next()

        async def method(self, ctx):  # type: ignore[no-untyped-def]
            return await ctx.next()

    async def with_extra(ctx, extra):  # type: ignore[no-untyped-def]
        return await ctx.next()

    registry = PipelineRegistry()
    registry.register("toolCall", Mw())
    registry.register("toolCall", Mw().method)
    registry.register("toolCall", functools.partial(with_extra, extra=1))
    result = run(registry.run_tool_call(tool_call_ctx(), core))
    assert result.ok and registry.count("toolCall") == 3


def test_one_extension_registers_several_types() -> None:
    """seed 000 §5.1 rule 4: one extension can register turn, step and toolCall middleware."""
    registry = PipelineRegistry()
    for kind in MIDDLEWARE_TYPES:
        registry.register(kind, passthrough, owner="ext")
    assert [registry.count(k) for k in MIDDLEWARE_TYPES] == [1, 1, 1]


def test_several_middlewares_of_one_type_chain_in_registration_order() -> None:
    """seed 000 §5.1 rules 3 and 5 / seed 004 §13.2.1 rule 3: same type, onion in registration
    order."""
    log: list[str] = []
    registry = PipelineRegistry()
    for name in ("A", "B", "C"):
        registry.register("toolCall", recorder(log, name))
    run(registry.run_tool_call(tool_call_ctx(), core))
    assert log == ["A.pre", "B.pre", "C.pre", "C.post", "B.post", "A.post"]


def test_priority_example_b5_a10_c10() -> None:
    """seed 000 §6.2 rules 3 and 5: B(5) -> A(10) -> C(10) -> core; lower priority is outer, ties
    stable."""
    log: list[str] = []
    registry = PipelineRegistry()
    registry.register("step", recorder(log, "A"), priority=10)
    registry.register("step", recorder(log, "B"), priority=5)
    registry.register("step", recorder(log, "C"), priority=10)
    assert [e.fn.__qualname__ for e in registry.entries("step")] == ["B", "A", "C"]
    log.clear()
    registry2 = PipelineRegistry()
    registry2.register("toolCall", recorder(log, "A"), priority=10)
    registry2.register("toolCall", recorder(log, "B"), priority=5)
    registry2.register("toolCall", recorder(log, "C"), priority=10)
    run(registry2.run_tool_call(tool_call_ctx(), core))
    assert log == ["B.pre", "A.pre", "C.pre", "C.post", "A.post", "B.post"]


def test_default_priority_is_zero_and_negative_priorities_go_outside() -> None:
    """seed 000 §5.1 MiddlewareOptions: priority defaults to 0; lower values are outer layers."""
    log: list[str] = []
    registry = PipelineRegistry()
    registry.register("toolCall", recorder(log, "default"))
    registry.register("toolCall", recorder(log, "early"), priority=-1)
    registry.register("toolCall", recorder(log, "late"), priority=0.5)
    run(registry.run_tool_call(tool_call_ctx(), core))
    assert log[:3] == ["early.pre", "default.pre", "late.pre"]


def test_order_is_deterministic_across_runs() -> None:
    """seed 000 §2 rule 7 / §6.2 rule 1: the same configuration always yields the same order."""
    logs: list[list[str]] = []
    for _ in range(3):
        log: list[str] = []
        registry = PipelineRegistry()
        for name, prio in (("x", 3), ("y", 1), ("z", 3), ("w", 1)):
            registry.register("toolCall", recorder(log, name), priority=prio)
        run(registry.run_tool_call(tool_call_ctx(), core))
        logs.append(log)
    assert logs[0] == logs[1] == logs[2]
    assert logs[0][:4] == ["y.pre", "w.pre", "x.pre", "z.pre"]


def test_repr_shows_counts() -> None:
    """House style: state in __repr__."""
    registry = PipelineRegistry()
    registry.register("turn", passthrough)
    assert "turn=1" in repr(registry)
