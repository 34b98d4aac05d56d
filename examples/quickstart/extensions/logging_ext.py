"""A logging extension: one middleware at each level (turn, step, toolCall).

Each middleware logs before and after ``await ctx.next()`` — the onion in action — and the
extension keeps a small persistent counter in ``api.state``. Run the REPL with ``-v`` to see
the lines (logger ``goondan.extension.logging``).
"""

from __future__ import annotations

import time
from typing import Any


def register(api: Any) -> None:
    log = api.logger

    async def turn(ctx: Any) -> Any:
        started = time.perf_counter()
        log.info("turn %s start (%d messages)", ctx.turn_id, len(ctx.conversation_state.next_messages))
        result = await ctx.next()
        state = dict(await api.state.get() or {})
        state["turns"] = int(state.get("turns", 0)) + 1
        await api.state.set(state)
        log.info("turn %s end: %s in %.1f ms (turn #%d of this instance)", ctx.turn_id,
                 result.finish_reason, (time.perf_counter() - started) * 1000, state["turns"])
        return result

    async def step(ctx: Any) -> Any:
        log.info("step %d start: %d tools offered", ctx.step_index, len(ctx.tool_catalog))
        result = await ctx.next()
        log.info("step %d end: %d tool call(s)", ctx.step_index, len(result.tool_calls))
        return result

    async def tool_call(ctx: Any) -> Any:
        log.info("tool %s args=%s", ctx.tool_name, ctx.args)
        result = await ctx.next()
        log.info("tool %s -> %s", ctx.tool_name, result.status)
        return result

    api.pipeline.register("turn", turn)
    api.pipeline.register("step", step)
    api.pipeline.register("toolCall", tool_call)
