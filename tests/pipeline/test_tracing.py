"""Span bookkeeping (Decision 13: every turn, step and tool call has spanId and parentSpanId)."""

from __future__ import annotations

import re

from goondan.pipeline.tracing import start_span


def test_spans_nest_under_one_trace() -> None:
    """Decision 13: turn → step → toolCall spans share the traceId and link parents."""
    turn = start_span("turn", "turn")
    step = turn.child("step 0", "step")
    tool = step.child("bash__exec", "toolCall")
    assert re.fullmatch(r"[0-9a-f]{32}", turn.trace_id)
    assert all(re.fullmatch(r"[0-9a-f]{16}", s.span_id) for s in (turn, step, tool))
    assert turn.parent_span_id is None
    assert step.parent_span_id == turn.span_id and tool.parent_span_id == step.span_id
    assert {s.trace_id for s in (turn, step, tool)} == {turn.trace_id}
    assert len({turn.span_id, step.span_id, tool.span_id}) == 3


def test_propagated_trace_and_parent() -> None:
    """Decision 13: traceId propagates across agent-to-agent calls (caller span is the parent)."""
    span = start_span("turn", "turn", trace_id="a" * 32, parent_span_id="b" * 16)
    assert span.ids() == {"traceId": "a" * 32, "spanId": span.span_id, "parentSpanId": "b" * 16}


def test_finish_records_status_once() -> None:
    """Spans end once with ok/error and a non-negative duration."""
    span = start_span("turn", "turn")
    assert span.status == "running" and not span.finished
    span.finish(error=ValueError("bad"))
    span.finish()
    assert span.status == "error" and span.error_message == "bad"
    data = span.to_dict()
    assert data["durationMs"] >= 0 and data["kind"] == "turn" and data["status"] == "error"
    assert start_span("x", "step").finish().status == "ok"
