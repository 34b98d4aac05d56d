"""``ToolExecutor``: run one tool call and turn every failure into an error result (docs/tools.md
"Errors are results").

``await executor.execute(call, catalog=step_catalog, context=tool_ctx)`` never raises (only
``asyncio.CancelledError`` propagates). In order:

1. the name must be in the step's catalog, else ``E_TOOL_NOT_IN_CATALOG``, unless
   the executor was built with ``allow_registry_calls=True`` (the explicit security policy of
   docs/tools.md "Registry and catalog");
2. the name must be registered, else ``E_TOOL_NOT_FOUND``;
3. the arguments must be a JSON object (``ToolCall.invalid_args`` holds the model's raw text when
   they were not) and match the export's JSON Schema, else ``E_TOOL_INVALID_ARGS``;
4. the handler runs: ``async def`` handlers are awaited on the loop, plain functions run in a
   worker thread (a daemon thread, :func:`run_in_daemon_thread`), both under the tool's timeout
   (``timeoutMs``, default 120 s) → ``E_TOOL_TIMEOUT``. A timed-out *sync* handler's thread
   cannot be killed; it finishes in the background, its result is dropped, and it never keeps
   the process alive at exit;
5. an exception becomes ``E_TOOL`` (``name`` = exception class) unless it is a
   :class:`ToolFailure`, which chooses its own code and suggestion;
6. the output must be JSON-serialisable, else ``E_TOOL_OUTPUT``; the result holds a detached
   JSON copy of it. A ``TimeoutError`` raised by the handler itself (not by the tool's
   deadline) is an ordinary ``E_TOOL`` failure;
7. the output is finalised (``goondan.tools.output``): U+FFFD rule, secrets masked, size cap
   with a truncation marker (and the optional spill file).

The handler's :class:`ToolContext` carries the Tool's ``config`` and its output cap
(``max_output_bytes``) from the executor's :class:`ToolSettings`.

Every error message is masked for secrets and cut to the tool's ``errorMessageLimit`` (default
1000) with the ``... (truncated)`` suffix rule of docs/tools.md "Errors are results".
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from goondan.errors import help_url
from goondan.secrets import mask, mask_cut
from goondan.text import clean_text
from goondan.tools.catalog import catalog_names, closest_names
from goondan.tools.context import ToolContext
from goondan.tools.output import ToolSettings, finalize_output, scrub_output, spill_path
from goondan.tools.providers import run_handler, run_in_daemon_thread
from goondan.tools.registry import DEFAULT_ERROR_MESSAGE_LIMIT, RegisteredTool, ToolRegistry
from goondan.tools.schema import validate_args
from goondan.types import ToolCall, ToolCallResult, ToolCatalogItem

__all__ = [
    "TRUNCATION_SUFFIX",
    "ToolExecutor",
    "ToolFailure",
    "run_in_daemon_thread",
    "truncate_error_message",
]

TRUNCATION_SUFFIX = "... (truncated)"
_log = logging.getLogger("goondan.tools")
# Outputs up to this size are finalised on the event loop (see ToolExecutor._execute).
_INLINE_OUTPUT = 16 * 1024


class ToolFailure(Exception):
    """Raise from a handler to fail with your own ``code``/``suggestion``/``help_url``."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "E_TOOL",
        suggestion: str | None = None,
        help_url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.suggestion = suggestion
        self.help_url = help_url


def truncate_error_message(message: str, limit: int) -> str:
    """Cut ``message`` to ``limit`` characters, ending with ``... (truncated)``.

    For a limit shorter than the suffix itself the message is simply cut at ``limit``.
    """
    if len(message) <= limit:
        return message
    if limit < len(TRUNCATION_SUFFIX):
        return message[: max(limit, 0)]
    return message[: limit - len(TRUNCATION_SUFFIX)] + TRUNCATION_SUFFIX


class ToolExecutor:
    """Runs tool calls against one :class:`ToolRegistry`."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        allow_registry_calls: bool = False,
        logger: logging.Logger | None = None,
        settings: ToolSettings | None = None,
    ) -> None:
        self.registry = registry
        self.allow_registry_calls = allow_registry_calls
        self.settings = settings or ToolSettings()
        self._log = logger or _log

    def __repr__(self) -> str:
        return f"<ToolExecutor {self.registry!r} allow_registry_calls={self.allow_registry_calls}>"

    async def execute(
        self,
        call: ToolCall,
        *,
        catalog: Iterable[ToolCatalogItem | dict[str, Any] | str],
        context: ToolContext,
        on_start: Callable[[RegisteredTool], None] | None = None,
    ) -> ToolCallResult:
        """Run ``call`` and return its result; failures are results, never exceptions.

        ``on_start(tool)`` is called right before the handler runs, after every check (the
        turn's ``toolCall.started`` journal record); an exception from it propagates (the
        handler does not run), like a failed write of the turn's events."""
        try:
            return await self._execute(call, catalog, context, on_start)
        except asyncio.CancelledError:
            raise
        except _StartFailed as failed:
            raise failed.error from None
        except Exception as exc:  # pragma: no cover - defensive: a bug here must not kill the turn
            self._log.exception("tool executor failed on %s", call.name)
            return self._fail(call, None, f"internal error while running the tool: {exc}",
                              code="E_TOOL", name=type(exc).__name__)

    async def _execute(
        self,
        call: ToolCall,
        catalog: Iterable[ToolCatalogItem | dict[str, Any] | str],
        context: ToolContext,
        on_start: Callable[[RegisteredTool], None] | None = None,
    ) -> ToolCallResult:
        name = call.name
        if not self.allow_registry_calls:
            names = catalog_names(catalog)
            if name not in names:
                similar = closest_names(name, names)
                hint = f" Did you mean {', '.join(repr(n) for n in similar)}?" if similar else ""
                return self._fail(
                    call, None,
                    f"Tool '{name}' is not available in the current Tool Catalog.",
                    code="E_TOOL_NOT_IN_CATALOG", name="ToolNotInCatalogError",
                    suggestion=(
                        "Add the tool to the Agent's spec.tools, or register it dynamically and "
                        f"expose it from a step middleware.{hint}"
                    ),
                )
        tool = self.registry.get(name)
        if tool is None:
            return self._fail(
                call, None, f"Tool '{name}' is not registered.",
                code="E_TOOL_NOT_FOUND", name="ToolNotFoundError",
                suggestion="Check the tool name; the Tool's entry module may have failed to load.",
            )
        if call.invalid_args is not None:
            # The model wrote arguments that are not a JSON object: answer with the raw text so
            # it can correct itself on the next step (docs/models.md).
            raw = (
                call.invalid_args
                if len(call.invalid_args) <= 500
                else mask_cut(call.invalid_args[:500]) + "…"
            )
            return self._fail(
                call, tool, f"Invalid arguments for tool '{name}': not a JSON object: {raw}",
                code="E_TOOL_INVALID_ARGS", name="ToolInvalidArgsError",
                suggestion="Call the tool again with a JSON object matching its parameters schema.",
            )
        violation = validate_args(tool.item.parameters, call.args)
        if violation is not None:
            return self._fail(
                call, tool, f"Invalid arguments for tool '{name}': {violation}",
                code="E_TOOL_INVALID_ARGS", name="ToolInvalidArgsError",
                suggestion="Call the tool again with arguments matching its parameters schema.",
            )
        # Per-Tool settings belong to Tool resources; extension tools get the Agent's cap.
        source = tool.item.source
        resource = source.name if source is not None and source.type == "config" else None
        limit = self.settings.limit_for(resource)
        context = _for_call(context, call.id, self.settings.config_for(resource), limit)
        if on_start is not None:
            try:
                on_start(tool)  # durable before the handler can have any effect
            except Exception as exc:
                raise _StartFailed(exc) from exc
        deadline = asyncio.timeout(tool.timeout_ms / 1000.0)
        try:
            async with deadline:
                output = await run_handler(tool, context, call.args)
        except TimeoutError as exc:
            if not deadline.expired():
                # The handler's own TimeoutError (a socket or client timeout): an ordinary failure.
                return self._fail(call, tool, str(exc) or type(exc).__name__, code="E_TOOL",
                                  name=type(exc).__name__,
                                  suggestion="Check the tool's input parameters and try again.")
            return self._fail(
                call, tool, f"Tool '{name}' timed out after {_ms(tool.timeout_ms)} ms.",
                code="E_TOOL_TIMEOUT", name="ToolTimeoutError",
                suggestion="Try a smaller request, or raise the Tool's spec.timeoutMs.",
            )
        except ToolFailure as exc:
            return self._fail(call, tool, exc.message or type(exc).__name__, code=exc.code,
                              name=type(exc).__name__, suggestion=exc.suggestion,
                              help=exc.help_url)
        except asyncio.CancelledError:
            raise
        except (Exception, SystemExit) as exc:
            return self._fail(call, tool, str(exc) or type(exc).__name__, code="E_TOOL",
                              name=type(exc).__name__,
                              suggestion=getattr(exc, "suggestion", None) or
                              "Check the tool's input parameters and try again.")
        try:
            # Round-tripped so the result holds exactly the JSON the conversation records
            # (tuples become lists), detached from objects the handler may keep mutating.
            text = json.dumps(output, allow_nan=False)
            output = json.loads(text)
        except (TypeError, ValueError) as exc:
            return self._fail(
                call, tool, f"Tool '{name}' returned a value that is not JSON: {exc}",
                code="E_TOOL_OUTPUT", name=type(exc).__name__,
                suggestion="Return only dicts, lists, strings, finite numbers, booleans or None.",
            )
        spill_to = spill_path(context.workdir, call.id) if self.settings.spill else None
        if len(text) <= min(limit, _INLINE_OUTPUT):
            # This text (ASCII-escaped, spaced) is never shorter than the compact UTF-8 form the
            # cap measures, and scrubbing only shortens strings: the output fits, so finalising
            # it is the scrub alone — done on the loop, cheaper than a worker-thread hop.
            output = scrub_output(output)
        else:
            output = await asyncio.to_thread(
                finalize_output, output, limit=limit, spill_to=spill_to
            )
        return ToolCallResult.success(call.id, name, output)

    def _fail(
        self,
        call: ToolCall,
        tool: RegisteredTool | None,
        message: str,
        *,
        code: str,
        name: str,
        suggestion: str | None = None,
        help: str | None = None,
    ) -> ToolCallResult:
        limit = tool.error_message_limit if tool is not None else DEFAULT_ERROR_MESSAGE_LIMIT
        text = truncate_error_message(mask(clean_text(message)), limit)
        self._log.debug("tool %s failed: %s %s", call.name, code, text)
        return ToolCallResult.failure(
            call.id, call.name, text, code=code, name=name,
            suggestion=mask(clean_text(suggestion)) if suggestion else None,
            help_url=help or help_url(code),
        )


class _StartFailed(Exception):
    """``on_start`` failed: not a tool failure but the turn's (see :meth:`ToolExecutor.execute`)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _ms(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _for_call(
    context: ToolContext, call_id: str, config: dict[str, Any], limit: int
) -> ToolContext:
    return dataclasses.replace(context, tool_call_id=call_id, config=config, max_output_bytes=limit)
