"""Extension that logs every turn through ``api.logger`` at the configured level."""

from __future__ import annotations

import logging
from typing import Any


def register(api: Any) -> None:
    """Install a turn middleware that logs the turn id before and after it runs."""
    level = logging.getLevelName(str(api.config.get("level", "info")).upper())

    async def log_turn(ctx: Any) -> Any:
        api.logger.log(level, "turn %s started", ctx.turn_id)
        result = await ctx.next()
        api.logger.log(level, "turn %s finished", ctx.turn_id)
        return result

    api.pipeline.register("turn", log_turn)
