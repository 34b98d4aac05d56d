"""Asking for a step retry from step middleware: ``raise RetryStep(...)``.

A middleware must call ``ctx.next()`` exactly once (docs/extensions.md, "Middleware rules"), so
it cannot retry by calling it again. Instead it raises :class:`RetryStep` — typically after
``await ctx.next()`` raised a retryable error (a provider 429/5xx) or returned a result it
rejects — and the step runner (:meth:`goondan.pipeline.PipelineRegistry.run_step`) runs the
whole step chain again with a fresh ``next``:

* the same step (same index and id, same ``step.started`` / ``step.completed`` events): a retry
  does not count against ``maxStepsPerTurn``;
* ``ctx.tool_catalog`` starts again from the catalog the step was given; ``ctx.metadata`` is
  carried over, with ``metadata["goondan.stepRetry"] = {"attempt": n, "reason": ...}``, so a
  middleware can count attempts itself (the ``retryCount`` pattern);
* bounded: at most ``max_retries`` retries of one step (default 3, never more than
  :data:`MAX_STEP_RETRIES`); one more request fails the turn with ``E_PIPELINE_RETRY_LIMIT``
  whose message includes the error the RetryStep was raised from;
* ``delay_ms`` waits before the next attempt (capped at :data:`MAX_RETRY_DELAY_MS`; cancellable).

Messages the failed attempt already appended (an assistant message, tool results) stay in the
conversation, and tools that ran are not undone: a middleware that wants them gone emits
``remove`` events before raising. ``RetryStep`` is only for step middleware; raised from a turn
or toolCall middleware (or from a tool) it fails the turn with ``E_PIPELINE_RETRY_MISUSE``.
"""

from __future__ import annotations

from goondan.errors import PipelineError

__all__ = [
    "DEFAULT_STEP_RETRIES",
    "MAX_RETRY_DELAY_MS",
    "MAX_STEP_RETRIES",
    "RETRY_METADATA_KEY",
    "RetryStep",
    "retry_limit_error",
    "retry_misuse_error",
]

DEFAULT_STEP_RETRIES = 3
MAX_STEP_RETRIES = 10
MAX_RETRY_DELAY_MS = 60_000
RETRY_METADATA_KEY = "goondan.stepRetry"


class RetryStep(Exception):
    """Raised by step middleware: run this step again (bounded; see the module docstring)."""

    def __init__(self, reason: str = "", *, max_retries: int = DEFAULT_STEP_RETRIES,
                 delay_ms: float = 0) -> None:
        super().__init__(reason or "step retry requested")
        self.reason = reason or "step retry requested"
        self.max_retries = max(0, min(int(max_retries), MAX_STEP_RETRIES))
        self.delay_ms = max(0.0, min(float(delay_ms), MAX_RETRY_DELAY_MS))

    def __repr__(self) -> str:
        return (
            f"RetryStep({self.reason!r}, "
            f"max_retries={self.max_retries}, delay_ms={self.delay_ms:g})"
        )


def _cause_text(retry: RetryStep) -> str:
    cause = retry.__cause__ or retry.__context__
    if cause is None or cause is retry:
        return ""
    message = getattr(cause, "message", None) or str(cause)
    return f"; last error: {type(cause).__name__}: {message}"


def retry_limit_error(retry: RetryStep, retries: int) -> PipelineError:
    """The error that ends the turn when a step asked for more retries than allowed."""
    return PipelineError(
        f"step retried {retries} time(s) and a middleware "
        f"asked again ({retry.reason}){_cause_text(retry)}",
        code="E_PIPELINE_RETRY_LIMIT",
        suggestion="The step kept failing; check the cause above (the provider, a tool) or raise "
        "RetryStep with a larger max_retries (at most 10).",
    )


def retry_misuse_error(chain: str) -> PipelineError:
    """``RetryStep`` escaped a chain other than the step chain."""
    return PipelineError(
        f"RetryStep was raised in the {chain} chain; only step middleware can retry",
        code="E_PIPELINE_RETRY_MISUSE",
        suggestion="Raise RetryStep from a 'step' middleware (around `await ctx.next()`); a "
        "toolCall middleware can return a failed ToolCallResult instead.",
    )
