"""A conditional approval policy: writes outside ``freePrefix`` wait for a person.

A toolCall middleware calls ``ctx.require_approval(reason=...)`` before ``ctx.next()``; the
call is then not run, the turn parks, and the decision resumes it (docs/approvals.md).
"""

from __future__ import annotations

from typing import Any


def register(api: Any) -> None:
    free = str((api.config or {}).get("freePrefix") or "notes/")

    async def policy(ctx: Any) -> Any:
        if ctx.tool_name == "files__write" and not str(ctx.args.get("path", "")).startswith(free):
            ctx.require_approval(reason=f"writes {ctx.args.get('path')!r} outside {free}")
        return await ctx.next()

    api.pipeline.register("toolCall", policy)
