"""Extension ``logging`` of ``@goondan/base``: log every turn, step and tool call.

(The file is not called ``logging.py`` so that it never shadows the standard library module,
e.g. for type checkers that see it as a top-level module.)

Three middleware (docs/base-extensions.md), each writing through ``api.logger``
(``goondan.extension.<name>``) a message ``"[logging.<layer>] <phase> <JSON fields>"``; the
same fields are attached to the log record as ``record.fields`` (a dict) for structured
handlers:

==========  =====  ===========================================================================
layer       level  fields
==========  =====  ===========================================================================
turn        info   start ``{turnId, traceId, inputType}`` / complete ``{turnId, durationMs,
                   finishReason}``
step        info   start ``{turnId, stepIndex, catalogSize}`` / complete ``{turnId, stepIndex,
                   durationMs, hasToolCalls}``
toolCall    debug  start ``{turnId, traceId, stepIndex, toolCallId, toolName, args?}`` /
                   complete ``{…, durationMs, status}``
==========  =====  ===========================================================================

An exception from the inner layers is logged at error level (``"[logging.<layer>] failed"``
with ``durationMs`` and ``error``) and re-raised unchanged. Cancellation is not logged.

Config: ``level`` (``debug`` < ``info`` < ``warn`` < ``error``; default ``info``; ``warning`` is
accepted for ``warn``) — messages below it are not produced at all; the Python logging
configuration filters what is produced as usual. ``includeToolArgs`` (default false) adds the
tool arguments to toolCall start messages (secrets are masked by goondan's log filter, but
arguments may still be sensitive). ``includeTurnMetadata`` (default true): when false the turn
start message is just ``"[logging.turn] start turnId=<id>"``. Invalid values fall back to the
defaults with a ``W_BASE_EXTENSION_CONFIG`` warning.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ._config import boolean, choice

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "warning": logging.WARNING, "error": logging.ERROR}
DEFAULTS: dict[str, Any] = {"level": "info", "includeToolArgs": False, "includeTurnMetadata": True}


def read_config(api: Any) -> dict[str, Any]:
    """``api.config`` over :data:`DEFAULTS`, each invalid value replaced by its default."""
    return {
        "level": choice(api, "level", DEFAULTS["level"], LEVELS, "debug|info|warn|error"),
        "includeToolArgs": boolean(api, "includeToolArgs", DEFAULTS["includeToolArgs"]),
        "includeTurnMetadata": boolean(api, "includeTurnMetadata", DEFAULTS["includeTurnMetadata"]),
    }


def _ms(start: float) -> int:
    return round((time.perf_counter() - start) * 1000)


def _error(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def register(api: Any) -> None:
    """Install the turn, step and toolCall logging middleware."""
    config = read_config(api)
    minimum = LEVELS[config["level"]]
    logger: logging.Logger = api.logger

    def log(level: int, message: str, fields: dict[str, Any] | None = None) -> None:
        if level < minimum:
            return
        if fields is None:
            logger.log(level, "%s", message)
        else:
            logger.log(level, "%s %s", message, json.dumps(fields, ensure_ascii=False, default=str),
                       extra={"fields": fields})

    async def turn(ctx: Any) -> Any:
        start = time.perf_counter()
        if config["includeTurnMetadata"]:
            log(logging.INFO, "[logging.turn] start", {
                "turnId": ctx.turn_id, "traceId": ctx.trace_id, "inputType": ctx.input_event.type,
            })
        else:
            log(logging.INFO, f"[logging.turn] start turnId={ctx.turn_id}")
        try:
            result = await ctx.next()
        except Exception as exc:
            log(logging.ERROR, "[logging.turn] failed", {
                "turnId": ctx.turn_id, "durationMs": _ms(start), "error": _error(exc),
            })
            raise
        log(logging.INFO, "[logging.turn] complete", {
            "turnId": ctx.turn_id, "durationMs": _ms(start), "finishReason": result.finish_reason,
        })
        return result

    async def step(ctx: Any) -> Any:
        start = time.perf_counter()
        log(
            logging.INFO,
            "[logging.step] start",
            {
                "turnId": ctx.turn_id,
                "stepIndex": ctx.step_index,
                "catalogSize": len(ctx.tool_catalog),
            },
        )
        try:
            result = await ctx.next()
        except Exception as exc:
            log(logging.ERROR, "[logging.step] failed", {
                "turnId": ctx.turn_id, "stepIndex": ctx.step_index, "durationMs": _ms(start),
                "error": _error(exc),
            })
            raise
        log(logging.INFO, "[logging.step] complete", {
            "turnId": ctx.turn_id, "stepIndex": ctx.step_index, "durationMs": _ms(start),
            "hasToolCalls": result.has_tool_calls,
        })
        return result

    async def tool_call(ctx: Any) -> Any:
        start = time.perf_counter()
        meta = {
            "turnId": ctx.turn_id, "traceId": ctx.trace_id, "stepIndex": ctx.step_index,
            "toolCallId": ctx.tool_call_id, "toolName": ctx.tool_name,
        }
        if config["includeToolArgs"]:
            log(logging.DEBUG, "[logging.toolCall] start", {**meta, "args": ctx.args})
        else:
            log(logging.DEBUG, "[logging.toolCall] start", meta)
        try:
            result = await ctx.next()
        except Exception as exc:
            log(logging.ERROR, "[logging.toolCall] failed", {
                **meta, "durationMs": _ms(start), "error": _error(exc),
            })
            raise
        log(logging.DEBUG, "[logging.toolCall] complete", {
            **meta, "durationMs": _ms(start), "status": result.status,
        })
        return result

    api.pipeline.register("turn", turn)
    api.pipeline.register("step", step)
    api.pipeline.register("toolCall", tool_call)
