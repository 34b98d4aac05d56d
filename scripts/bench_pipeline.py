"""Benchmarks for the pipeline area (issue 4): per-layer onion overhead and tool dispatch.

Prints per-operation figures and the ratio against each target (ratio < 1 means within target):

* overhead per middleware layer per call (target < 20 µs), measured as
  (time of a toolCall chain with N pass-through layers − time with 0 layers) / N;
* tool dispatch for a sync no-op handler: catalog check, schema check, thread hop, result wrap
  (target < 300 µs);
* the same for an async no-op handler (target < 100 µs).

Run: ``.venv/bin/python scripts/bench_pipeline.py`` (exit code 1 when a target is missed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from goondan.pipeline.context import ToolCallContext
from goondan.pipeline.registry import PipelineRegistry
from goondan.tools.context import ToolContext
from goondan.tools.executor import ToolExecutor
from goondan.tools.registry import ToolRegistry
from goondan.types import ToolCall, ToolCallResult, ToolCatalogItem, ToolSource

LAYERS = 10
ROUNDS = 5


async def _time(fn: Callable[[], Awaitable[Any]], n: int) -> float:
    """Best-of-ROUNDS mean seconds per call of ``fn``."""
    for _ in range(min(n, 200)):
        await fn()
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(n):
            await fn()
        samples.append((time.perf_counter() - start) / n)
    return min(samples)


async def bench_layers() -> float:
    ctx = ToolCallContext("a", "k", "t", "0" * 32, 0, "x__y", "c1", {})
    result = ToolCallResult.success("c1", "x__y", None)

    async def core(_: ToolCallContext) -> ToolCallResult:
        return result

    async def layer(c: ToolCallContext) -> ToolCallResult:
        return await c.next()

    empty, full = PipelineRegistry(), PipelineRegistry()
    for _ in range(LAYERS):
        full.register("toolCall", layer)
    base = await _time(lambda: empty.run_tool_call(ctx, core), 20_000)
    layered = await _time(lambda: full.run_tool_call(ctx, core), 5_000)
    return (layered - base) / LAYERS


def _executor(handler: Callable[..., Any]) -> tuple[ToolExecutor, list[ToolCatalogItem]]:
    registry = ToolRegistry()
    schema = {"type": "object", "properties": {"path": {"type": "string"},
                                               "n": {"type": "integer"}}, "required": ["path"]}
    # A realistic catalog of 20 tools, the called one in the middle.
    for i in range(20):
        registry.register({"name": f"tool{i}__run", "parameters": schema}, handler,
                          source=ToolSource("config", f"tool{i}"))
    return ToolExecutor(registry), registry.catalog()


async def bench_dispatch(handler: Callable[..., Any], n: int) -> float:
    executor, catalog = _executor(handler)
    call = ToolCall("c1", "tool10__run", {"path": "a.txt", "n": 3})
    context = ToolContext("a", "k", "t", "0" * 32, "c1", None, Path("."))
    return await _time(lambda: executor.execute(call, catalog=catalog, context=context), n)


def sync_noop(ctx: Any, input: Any) -> None:
    return None


async def async_noop(ctx: Any, input: Any) -> None:
    return None


def main() -> int:
    rows = [
        ("middleware layer overhead", asyncio.run(bench_layers()), 20e-6),
        (
            "tool dispatch, sync no-op handler",
            asyncio.run(bench_dispatch(sync_noop, 3_000)),
            300e-6,
        ),
        (
            "tool dispatch, async no-op handler",
            asyncio.run(bench_dispatch(async_noop, 10_000)),
            100e-6,
        ),
    ]
    failed = False
    print(f"{'operation':<38} {'per op':>10} {'target':>10} {'ratio':>7}")
    for name, seconds, target in rows:
        ratio = seconds / target
        failed |= ratio >= 1
        print(f"{name:<38} {seconds * 1e6:>8.2f}µs {target * 1e6:>8.0f}µs {ratio:>7.3f}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
