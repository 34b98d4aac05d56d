"""What a step and a turn come to: small result types the loop branches on.

The step chain returns the middleware contract :class:`~goondan.pipeline.context.StepResult`
(``status``, ``hasToolCalls``, ``metadata``; see docs/extensions.md). The turn loop does not
read those flags and metadata keys itself: :func:`classify_step` turns a step's result into
exactly one of

* :class:`FinalText` — the model answered without calling tools; the turn may end;
* :class:`ToolsRan` — tools were called and their results recorded; the loop goes on;
* :class:`StepFailed` — the step failed; ``error`` is the turn's structured error.

A policy that wants to treat a failure differently (run the step again, say) matches on
``StepFailed`` and reads ``retry``; the classification stays in one place.

When a turn ends — normally, with an exception, or cancelled — the runner sums it up once as a
:class:`TurnOutcome`; ``AgentInstance`` finalises the turn from that value alone (repair,
fold-commit, status, the ``turn.completed``/``turn.failed`` event). See docs/runtime.md
"Errors and cancellation".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from goondan.conversation.messages import Message
from goondan.errors import help_url
from goondan.pipeline.context import StepResult, TurnResult
from goondan.pipeline.tracing import Span
from goondan.runtime.events import TurnEnded, TurnStarted, span_ids
from goondan.types import AgentEvent, JsonObject, TokenUsage, ToolCall, ToolCallResult, ToolError

__all__ = [
    "CANCELLED_ERROR",
    "FinalText",
    "StepFailed",
    "StepOutcome",
    "ToolsRan",
    "TurnOutcome",
    "classify_step",
    "first_error",
    "settle_result",
    "turn_started",
    "usage_delta",
]

CANCELLED_ERROR: JsonObject = {"code": "E_TURN_CANCELLED", "message": "the turn was cancelled",
                               "helpUrl": help_url("E_TURN_CANCELLED")}


@dataclass(frozen=True)
class FinalText:
    """The step ended without tool calls: ``message`` is the model's answer (if any).

    ``tool_results`` are results a step middleware reported although it asked the loop to stop;
    they still count towards ``requiredTools``.
    """

    message: Message | None
    tool_results: tuple[ToolCallResult, ...] = ()


@dataclass(frozen=True)
class ToolsRan:
    """The model called tools and every result was recorded; the loop runs another step."""

    tool_results: tuple[ToolCallResult, ...] = ()


@dataclass(frozen=True)
class StepFailed:
    """The step failed without raising: ``error`` is ``{code, message, helpUrl}`` for the
    TurnResult.

    ``retry`` is a hint from whoever classified the failure that running the step again could
    succeed (an empty or malformed model reply); the loop decides whether it does.
    """

    error: JsonObject
    retry: bool = False

    @property
    def error_message(self) -> str:
        """The error message (as the ``step.failed`` event reports it)."""
        return str(self.error.get("message") or "step failed")


StepOutcome = FinalText | ToolsRan | StepFailed


def classify_step(result: StepResult, last_assistant: Message | None) -> StepOutcome:
    """The outcome of a step chain's ``result``; ``last_assistant`` is the turn's latest answer."""
    results = tuple(result.tool_results)
    if result.status == "failed":
        code = str(result.metadata.get("errorCode") or "E_STEP_FAILED")
        message = str(result.metadata.get("errorMessage") or "step failed")
        return StepFailed({"code": code, "message": message, "helpUrl": help_url(code)})
    if result.has_tool_calls or result.metadata.get("shouldContinue") is True:
        # A step middleware may ask for another step (docs/extensions.md).
        return ToolsRan(results)
    return FinalText(last_assistant, results)


def turn_started(turn_id: str, event: AgentEvent, span: Span) -> TurnStarted:
    """The ``turn.started`` event of the turn ``event`` starts."""
    return TurnStarted(**span_ids(span), turn_id=turn_id, event_id=event.id,
                       event_type=event.type)


@dataclass(frozen=True)
class TurnOutcome:
    """How one turn ended, computed once: the result, whether it was cancelled, its counters."""

    result: TurnResult
    span: Span
    input_event: AgentEvent
    step_count: int
    tool_call_count: int
    error_count: int
    usage: TokenUsage = field(default_factory=TokenUsage)
    cancelled: bool = False
    interrupted: bool = False

    @property
    def turn_id(self) -> str:
        return self.result.turn_id

    @property
    def needs_repair(self) -> bool:
        """Tool calls may lack results: the turn failed, was cancelled or a step raised."""
        return self.cancelled or self.interrupted or self.result.finish_reason == "error"

    def metadata(self) -> JsonObject:
        """``TurnResult.metadata``: ``traceId``, ``spanId`` and the turn's counters."""
        return {
            "traceId": self.span.trace_id,
            "spanId": self.span.span_id,
            "stepCount": self.step_count,
            "toolCallCount": self.tool_call_count,
            "errorCount": self.error_count,
            "tokenUsage": self.usage.to_dict(),
        }

    def ended(self) -> TurnEnded:
        """Close the turn span and describe it as ``turn.completed`` / ``turn.failed``."""
        error = self.result.error
        message = error.get("message") if error is not None else None
        latency = self.span.finish(error=str(message) if error is not None else None).duration_ms
        return TurnEnded(
            **span_ids(self.span),
            failed=error is not None,
            turn_id=self.turn_id,
            event_id=self.input_event.id,
            event_type=self.input_event.type,
            finish_reason=self.result.finish_reason,
            step_count=self.step_count,
            tool_call_count=self.tool_call_count,
            error_count=self.error_count,
            token_usage=self.usage.to_dict(),
            latency_ms=latency,
            error_code=error.get("code") if error is not None else None,
            error_message=message,
        )


def settle_result(result: ToolCallResult, call: ToolCall) -> ToolCallResult:
    """The result as the answer to ``call``: a toolCall middleware may build its own result, but
    the recorded tool message must pair with the call, and an error needs an error object."""
    if result.tool_call_id != call.id or result.tool_name != call.name:
        result = dataclasses.replace(result, tool_call_id=call.id, tool_name=call.name)
    if not result.ok and result.error is None:
        result = dataclasses.replace(
            result, error=ToolError("the tool call failed (no error details)", code="E_TOOL")
        )
    return result


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first leaf exception of a (possibly nested) exception group."""
    first = group.exceptions[0]
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first


def usage_delta(after: TokenUsage, before: TokenUsage) -> TokenUsage:
    cached: int | None = None
    if after.cached_tokens is not None:
        cached = after.cached_tokens - (before.cached_tokens or 0)
    return TokenUsage(
        after.input_tokens - before.input_tokens,
        after.output_tokens - before.output_tokens,
        after.total_tokens - before.total_tokens,
        cached,
        after.unknown_calls - before.unknown_calls,
    )
