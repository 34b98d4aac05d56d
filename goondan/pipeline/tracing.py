"""Span bookkeeping for turns, steps and tool calls (docs/runtime.md "Tracing").

Every turn, step and tool call gets an OpenTelemetry-compatible ``spanId`` (16 hex) under the
turn's ``traceId`` (32 hex); a step's parent is its turn span, a tool call's parent is its step
span. A turn started by another agent's request keeps the caller's trace id and uses the
caller's span as parent. :class:`Span` only records ids and timings; exporting is left to
listeners of the runtime events, which carry ``traceId``/``spanId``/``parentSpanId``.
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from goondan.types import JsonObject, new_span_id, new_trace_id, now_iso

__all__ = ["CURRENT_SPAN", "Span", "SpanKind", "elapsed_ms", "start_span"]

SpanKind = Literal["turn", "step", "llm", "toolCall", "agentCall"]

# The innermost span running in this task (a tool call, an agent request): an agent request
# made inside it names it as the parent of the callee's turn, so one trace is one tree
# across agents (docs/observability.md "Span tree").
CURRENT_SPAN: ContextVar[Span | None] = ContextVar("goondan_current_span", default=None)


def elapsed_ms(start: float, end: float) -> float:
    """Milliseconds from ``start`` to ``end`` (``time.perf_counter`` readings) to the microsecond
    (``round(x, 3)`` gives the same but costs several times as much: it is on every span)."""
    return int((end - start) * 1_000_000.0 + 0.5) / 1000.0


@dataclass
class Span:
    """One timed unit of work inside a trace."""

    name: str
    kind: SpanKind
    trace_id: str
    span_id: str = field(default_factory=new_span_id)
    parent_span_id: str | None = None
    started_at: str = field(default_factory=now_iso)
    status: Literal["running", "ok", "error"] = "running"
    error_message: str | None = None
    _start: float = field(default_factory=time.perf_counter, repr=False)
    _end: float | None = field(default=None, repr=False)

    def child(self, name: str, kind: SpanKind) -> Span:
        """Start a span whose parent is this one, in the same trace."""
        return Span(name=name, kind=kind, trace_id=self.trace_id, parent_span_id=self.span_id)

    def finish(self, *, error: BaseException | str | None = None) -> Span:
        """Close the span (first call wins) with status ``ok`` or ``error``."""
        if self._end is None:
            self._end = time.perf_counter()
            if error is not None:
                self.status = "error"
                self.error_message = str(error) or type(error).__name__
            else:
                self.status = "ok"
        return self

    @property
    def finished(self) -> bool:
        return self._end is not None

    @property
    def duration_ms(self) -> float:
        """Elapsed milliseconds (so far, while running)."""
        end = self._end if self._end is not None else time.perf_counter()
        return elapsed_ms(self._start, end)

    def ids(self) -> JsonObject:
        """``{traceId, spanId, parentSpanId?}`` for event payloads and log records."""
        out: JsonObject = {"traceId": self.trace_id, "spanId": self.span_id}
        if self.parent_span_id is not None:
            out["parentSpanId"] = self.parent_span_id
        return out

    def to_dict(self) -> JsonObject:
        out = {"name": self.name, "kind": self.kind, **self.ids(), "startedAt": self.started_at,
               "status": self.status, "durationMs": self.duration_ms}
        if self.error_message is not None:
            out["errorMessage"] = self.error_message
        return out


def start_span(
    name: str,
    kind: SpanKind,
    *,
    trace_id: str | None = None,
    parent_span_id: str | None = None,
) -> Span:
    """Start a root span (new trace id unless one is propagated) or a child of
    ``parent_span_id``."""
    return Span(
        name=name, kind=kind, trace_id=trace_id or new_trace_id(), parent_span_id=parent_span_id
    )
