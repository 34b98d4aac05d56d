"""The one generic onion that runs every turn, step and toolCall chain (docs/extensions.md
"Middleware: the onion").

``run_chain(layers, ctx, core, result_type)`` runs ``layers[0]`` (outermost) first. Each layer
receives the *same* context object; ``await ctx.next()`` inside a layer runs the next inner
layer, and the innermost ``next()`` runs ``core(ctx)``. The runner rebinds ``ctx.next`` on the
way in and restores the outer layer's binding on the way out, so that after ``next()``
returns the outer layer's post-processing sees its own (already spent) ``next``: a second call
raises ``E_PIPELINE_NEXT_TWICE``. A layer that returns without calling ``next()``
short-circuits every inner layer and the core: its return value becomes
the chain's result.

An exception a layer raises *itself* (not one passed through from ``next()``) keeps its type, so
outer layers can still catch it, but is tagged with the layer's label (middleware and extension
name); :func:`middleware_failure` turns it into ``E_PIPELINE_MIDDLEWARE_FAILED`` for the turn's
error (docs/extensions.md, "Errors").

The runner allocates one small closure per layer per invocation and nothing else, which keeps
the per-layer overhead to a few microseconds (``scripts/bench_pipeline.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from goondan.errors import GoondanError, PipelineError
from goondan.pipeline.context import _ChainContext
from goondan.pipeline.retry import RetryStep

__all__ = ["MIDDLEWARE_ATTR", "Layer", "middleware_failure", "run_chain"]

#: Set on an exception raised by a middleware itself: the middleware's label.
MIDDLEWARE_ATTR = "goondan_middleware"

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
            "Call `await ctx.next()` exactly once per invocation; to retry a step, raise "
            "RetryStep from step middleware (docs/extensions.md, \"Retrying a step\")."
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


def _blame(exc: Exception, layer: Layer) -> None:
    """Record that ``layer`` raised ``exc`` itself (not passed through from an inner layer).

    The exception keeps its type (outer layers may catch it, docs/extensions.md), and gains the
    attribute :data:`MIDDLEWARE_ATTR` plus a traceback note naming the middleware and extension;
    :func:`middleware_failure` turns it into the user-facing error.
    """
    if isinstance(exc, GoondanError | RetryStep) or getattr(exc, MIDDLEWARE_ATTR, None):
        return  # already a documented error, a control request, or blamed further in
    try:
        setattr(exc, MIDDLEWARE_ATTR, layer.label)
        exc.add_note(f"raised in middleware {layer.label}")
    except (AttributeError, TypeError):  # an exception type with __slots__: leave it as is
        pass


def middleware_failure(exc: BaseException) -> PipelineError | None:
    """``E_PIPELINE_MIDDLEWARE_FAILED`` naming the middleware (and extension) that raised ``exc``.

    ``None`` when ``exc`` did not originate in a middleware (see :func:`run_chain`).
    """
    label = getattr(exc, MIDDLEWARE_ATTR, None)
    if not isinstance(label, str):
        return None
    error = PipelineError(
        f"middleware {label} raised {type(exc).__name__}: {exc}",
        code="E_PIPELINE_MIDDLEWARE_FAILED",
        suggestion="This is a bug in the extension's middleware (or an error it let through): fix "
        "it, or remove the extension from the Agent's "
        "spec.extensions; --debug shows the traceback.",
    )
    error.__cause__ = exc
    return error


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
        inner: BaseException | None = None

        async def next_() -> Any:
            nonlocal called, inner
            if called:
                raise _next_twice(layer)
            called = True
            try:
                return await invoke(index + 1)
            except BaseException as exc:
                inner = exc
                raise
            finally:
                # Inner layers rebound ctx.next; hand it back to this layer for its post phase.
                ctx._next_binding = next_

        ctx._next_binding = next_
        try:
            result = await layer.fn(ctx)
        except Exception as exc:
            if exc is not inner:
                _blame(exc, layer)
            raise
        if not isinstance(result, result_type):
            raise _bad_result(layer, result, result_type)
        return result

    try:
        out: ResultT = await invoke(0)
        return out
    finally:
        # ctx.next() after the chain has finished is a misuse, reported as E_PIPELINE_NO_CHAIN.
        ctx._next_binding = None
