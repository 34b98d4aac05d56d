"""``PipelineRegistry``: register ``turn`` / ``step`` / ``toolCall`` middleware and run chains.

Only the three standard types exist (no ``mutate``/``wrap``); a lower
``priority`` is an outer layer; equal priorities keep registration order (stable sort), and
registration order is ``Agent.spec.extensions`` order because extensions register one after the
other. All three chains use the one generic onion in :mod:`goondan.pipeline.chain`.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from goondan.errors import PipelineError
from goondan.pipeline.chain import Layer, run_chain
from goondan.pipeline.context import (
    StepContext,
    StepResult,
    ToolCallContext,
    TurnContext,
    TurnResult,
)
from goondan.pipeline.retry import (
    RETRY_METADATA_KEY,
    RetryStep,
    retry_limit_error,
    retry_misuse_error,
)
from goondan.types import ToolCallResult

__all__ = [
    "MIDDLEWARE_TYPES",
    "MiddlewareEntry",
    "MiddlewareType",
    "PipelineRegistry",
    "StepMiddleware",
    "ToolCallMiddleware",
    "TurnMiddleware",
    "is_async_callable",
]

MiddlewareType = Literal["turn", "step", "toolCall"]
MIDDLEWARE_TYPES: tuple[MiddlewareType, ...] = get_args(MiddlewareType)

TurnMiddleware = Callable[[TurnContext], Awaitable[TurnResult]]
StepMiddleware = Callable[[StepContext], Awaitable[StepResult]]
ToolCallMiddleware = Callable[[ToolCallContext], Awaitable[ToolCallResult]]


def is_async_callable(fn: object) -> bool:
    """True for ``async def`` functions, partials/methods of them and objects with an async
    ``__call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 - we need the class attribute
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


def _label(fn: object, owner: str | None) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{name!s} (extension {owner!r})" if owner else str(name)


def _priority(options: Mapping[str, Any] | None, priority: float | None) -> float:
    """The priority from ``options`` (``{"priority": n}``) or the keyword; never both."""
    if options is None:
        return 0 if priority is None else priority
    if not isinstance(options, Mapping):
        raise PipelineError(
            "middleware options must be a mapping such as "
            f"{{'priority': 5}}, got {type(options).__name__}",
            code="E_PIPELINE_MIDDLEWARE",
            suggestion="Call register(type, fn, {'priority': "
            "5}) or register(type, fn, priority=5).",
        )
    unknown = sorted(str(k) for k in options if k != "priority")
    if unknown:
        raise PipelineError(
            f"unknown middleware option(s) {unknown}; the only option is 'priority'",
            code="E_PIPELINE_MIDDLEWARE",
            suggestion="Pass {'priority': <number>} (lower values are outer layers).",
        )
    if "priority" in options and priority is not None and options["priority"] != priority:
        raise PipelineError(
            "middleware priority given twice (options and priority=) with different values",
            code="E_PIPELINE_MIDDLEWARE",
            suggestion="Give the priority once: {'priority': 5} or priority=5.",
        )
    value = options.get("priority", priority)
    return 0 if value is None else value


@dataclass(frozen=True)
class MiddlewareEntry:
    """A registered middleware: the function, its priority and its registration order."""

    type: MiddlewareType
    fn: Callable[[Any], Awaitable[Any]]
    priority: float
    order: int
    owner: str | None = None

    @property
    def label(self) -> str:
        return _label(self.fn, self.owner)


class PipelineRegistry:
    """Holds the middlewares of one agent instance and runs the three chains."""

    def __init__(self) -> None:
        self._entries: dict[str, list[MiddlewareEntry]] = {t: [] for t in MIDDLEWARE_TYPES}
        self._layers: dict[str, tuple[Layer, ...]] = {t: () for t in MIDDLEWARE_TYPES}
        self._order = 0

    def __repr__(self) -> str:
        counts = ", ".join(f"{t}={len(self._entries[t])}" for t in MIDDLEWARE_TYPES)
        return f"<PipelineRegistry {counts}>"

    def register(
        self,
        type: str,
        fn: Callable[[Any], Awaitable[Any]],
        options: Mapping[str, Any] | None = None,
        *,
        priority: float | None = None,
        owner: str | None = None,
    ) -> None:
        """Add ``fn`` (an ``async def fn(ctx)``) to the ``type`` chain (docs/extensions.md).

        The priority is given either as the options mapping of the reference API
        (``register("step", fn, {"priority": 5})``) or as ``priority=5``; lower is outer,
        default 0. ``owner`` names the registering extension in error messages
        (``api.pipeline`` fills it). Raises :class:`PipelineError` ``E_PIPELINE_TYPE`` for any
        type other than ``"turn"``, ``"step"`` or ``"toolCall"``, and ``E_PIPELINE_MIDDLEWARE``
        for a non-callable, non-async function, a non-numeric priority, unknown options or a
        priority given both ways.
        """
        priority = _priority(options, priority)
        if type not in self._entries:
            raise PipelineError(
                f"unknown middleware type {type!r}",
                code="E_PIPELINE_TYPE",
                suggestion="Use one of 'turn', 'step' or "
                "'toolCall' (mutate/wrap hooks do not exist).",
            )
        if not callable(fn):
            raise PipelineError(
                f"{type} middleware must be an async function, got {fn.__class__.__name__}",
                code="E_PIPELINE_MIDDLEWARE",
                suggestion="Pass a function defined with `async def middleware(ctx): ...`.",
            )
        if not is_async_callable(fn):
            raise PipelineError(
                f"{type} middleware {_label(fn, owner)} is not an async function",
                code="E_PIPELINE_MIDDLEWARE",
                suggestion="Define it with `async def` and `return await ctx.next()`.",
            )
        if (
            isinstance(priority, bool)
            or not isinstance(priority, int | float)
            or math.isnan(priority)
        ):
            raise PipelineError(
                f"middleware priority must be a number, got {priority!r}",
                code="E_PIPELINE_MIDDLEWARE",
                suggestion="Pass {'priority': <int>} or priority=<int>; "
                "lower values are outer layers (default 0).",
            )
        entry = MiddlewareEntry(type, fn, priority, self._order, owner)  # type: ignore[arg-type]
        self._order += 1
        entries = self._entries[type]
        entries.append(entry)
        # Stable sort: equal priorities keep registration order (docs/extensions.md).
        ordered = sorted(entries, key=lambda e: (e.priority, e.order))
        self._layers[type] = tuple(Layer(e.fn, e.label) for e in ordered)

    def entries(self, type: MiddlewareType) -> list[MiddlewareEntry]:
        """The middlewares of one type, outermost first."""
        return sorted(self._entries[type], key=lambda e: (e.priority, e.order))

    def count(self, type: MiddlewareType | None = None) -> int:
        """Number of registered middlewares (of one type, or in total)."""
        if type is not None:
            return len(self._entries[type])
        return sum(len(v) for v in self._entries.values())

    async def run_turn(
        self, ctx: TurnContext, core: Callable[[TurnContext], Awaitable[TurnResult]]
    ) -> TurnResult:
        """Run the turn chain around ``core`` (the step loop)."""
        try:
            return await run_chain(self._layers["turn"], ctx, core, TurnResult)
        except RetryStep as misplaced:
            raise retry_misuse_error("turn") from misplaced

    async def run_step(
        self, ctx: StepContext, core: Callable[[StepContext], Awaitable[StepResult]]
    ) -> StepResult:
        """Run the step chain around ``core`` (LLM call + tool calls).

        A step middleware that raises :class:`RetryStep` gets the whole chain run again, bounded
        (see :mod:`goondan.pipeline.retry`); ``next()`` is never called twice.
        """
        catalog = list(ctx.tool_catalog)
        retries = 0
        while True:
            try:
                return await run_chain(self._layers["step"], ctx, core, StepResult)
            except RetryStep as retry:
                if retries >= retry.max_retries:
                    raise retry_limit_error(retry, retries) from retry
                retries += 1
                ctx.metadata[RETRY_METADATA_KEY] = {"attempt": retries, "reason": retry.reason}
                ctx.tool_catalog = list(catalog)
                if retry.delay_ms:
                    await asyncio.sleep(retry.delay_ms / 1000)

    async def run_tool_call(
        self,
        ctx: ToolCallContext,
        core: Callable[[ToolCallContext], Awaitable[ToolCallResult]],
    ) -> ToolCallResult:
        """Run the toolCall chain around ``core`` (catalog check + handler)."""
        try:
            return await run_chain(self._layers["toolCall"], ctx, core, ToolCallResult)
        except RetryStep as misplaced:
            raise retry_misuse_error("toolCall") from misplaced
