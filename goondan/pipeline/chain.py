"""The one generic onion that runs every turn, step and toolCall chain (seed 000 §6).

``run_chain(layers, ctx, core, result_type)`` runs ``layers[0]`` (outermost) first. Each layer
receives the *same* context object; ``await ctx.next()`` inside a layer runs the next inner
layer, and the innermost ``next()`` runs ``core(ctx)``. The runner rebinds ``ctx.next`` on the
way in and restores the outer layer's binding on the way out, so that after ``next()``
returns the outer layer's post-processing sees its own (already spent) ``next``: a second call
raises ``E_PIPELINE_NEXT_TWICE``. A layer that returns without calling ``next()``
short-circuits every inner layer and the core (seed 000 §2 rule 4): its return value becomes
the chain's result.

The runner allocates one small closure per layer per invocation and nothing else, which keeps
the per-layer overhead to a few microseconds (``scripts/bench_pipeline.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from goondan.errors import PipelineError
from goondan.pipeline.context import _ChainContext

__all__ = ["Layer", "run_chain"]

ResultT = TypeVar("ResultT")
CtxT = TypeVar("CtxT", bound=_ChainContext)


@dataclass(frozen=True, slots=True)
class Layer:
    """One registered middleware as the chain runner sees it."""

    fn: Callable[[Any], Awaitable[Any]]
    label: str


def _next_twice(layer: Layer) -> PipelineError:
    return PipelineError(
        f"middleware {layer.label} called ctx.next() more than once",
        code="E_PIPELINE_NEXT_TWICE",
        suggestion=(
            "Call `await ctx.next()` exactly once per invocation; to retry, return a result "
            "or raise and let the runtime decide (seed 000 §2 rule 11)."
        ),
    )


def _bad_result(layer: Layer, result: Any, expected: type) -> PipelineError:
    hint = (
        " (did you forget `return await ctx.next()`?)" if result is None else ""
    )
    return PipelineError(
        f"middleware {layer.label} returned {type(result).__name__} instead of "
        f"a {expected.__name__}{hint}",
        code="E_PIPELINE_RESULT",
        suggestion="Return the value of `await ctx.next()` (optionally transformed).",
    )


async def run_chain(
    layers: Sequence[Layer],
    ctx: CtxT,
    core: Callable[[CtxT], Awaitable[ResultT]],
    result_type: type[ResultT],
) -> ResultT:
    """Run ``layers`` around ``core`` as an onion, sharing ``ctx``; return the outermost result."""
    count = len(layers)
    if count == 0:
        return await core(ctx)

    async def invoke(index: int) -> Any:
        if index == count:
            return await core(ctx)
        layer = layers[index]
        called = False

        async def next_() -> Any:
            nonlocal called
            if called:
                raise _next_twice(layer)
            called = True
            try:
                return await invoke(index + 1)
            finally:
                # Inner layers rebound ctx.next; hand it back to this layer for its post phase.
                ctx._next_binding = next_

        ctx._next_binding = next_
        result = await layer.fn(ctx)
        if not isinstance(result, result_type):
            raise _bad_result(layer, result, result_type)
        return result

    try:
        out: ResultT = await invoke(0)
        return out
    finally:
        # ctx.next() after the chain has finished is a misuse, reported as E_PIPELINE_NO_CHAIN.
        ctx._next_binding = None
