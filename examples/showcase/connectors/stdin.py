"""Connector that turns each line typed on stdin into a ``user_message`` event."""

from __future__ import annotations

import asyncio
import sys
from typing import Any


async def run(ctx: Any) -> None:
    """Read lines until EOF and emit one event per line."""
    prompt = ctx.config.get("PROMPT", "> ")
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        await ctx.emit({
            "name": "user_message",
            "message": {"type": "text", "text": line.rstrip("\n")},
            "properties": {"channel": "terminal"},
            "instanceKey": "terminal:local",
        })
