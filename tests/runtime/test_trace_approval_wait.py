"""``inspect trace`` shows the wait for a person (goondan/runtime/traces.py, issue 30 item 5):
``approval.requested`` opens a span under the waiting tool call, the ``approval.decided`` of the
same approval closes it (the resumed turn applies it in another span)."""

from __future__ import annotations

from goondan.runtime.traces import SpanAssembler, build_tree, format_tree

TRACE, CALL = "a" * 32, "b" * 16


def _events() -> list[dict[str, object]]:
    base = {"agentName": "bot", "instanceKey": "k", "approvalId": "apr_1", "toolName": "x__y",
            "toolCallId": "c1", "turnId": "t1"}
    return [
        {**base, "type": "tool.called", "traceId": TRACE, "spanId": CALL,
         "timestamp": "2026-11-27T10:00:00.000Z"},
        {**base, "type": "approval.requested", "traceId": TRACE, "spanId": CALL,
         "timestamp": "2026-11-27T10:00:00.100Z"},
        {**base, "type": "tool.failed", "traceId": TRACE, "spanId": CALL, "latencyMs": 101,
         "errorCode": "E_APPROVAL_PENDING", "timestamp": "2026-11-27T10:00:00.101Z"},
        # the resumed turn applies the decision in a span of its own
        {**base, "type": "approval.decided", "traceId": "c" * 32, "spanId": "d" * 16,
         "status": "approved", "decidedBy": "U2", "via": "slack:U2",
         "timestamp": "2026-11-27T10:01:30.100Z"},
    ]


def test_the_wait_is_a_span_under_the_tool_call_from_request_to_decision() -> None:
    assembler = SpanAssembler()
    finished = [r for e in _events() if (r := assembler.feed(e)) is not None]
    [call, wait] = finished
    assert (wait.kind, wait.parent_span_id, wait.trace_id) == ("approval", CALL, TRACE)
    assert wait.duration_ms == 90_000.0 and len(wait.span_id) == 16
    lines = format_tree(build_tree([call, wait]))
    assert lines[1] == "  approval x__y  waited 90.0 s: approved by U2 via slack:U2"


def test_an_undecided_approval_is_shown_waiting() -> None:
    assembler = SpanAssembler()
    finished = [r for e in _events()[:3] if (r := assembler.feed(e)) is not None]
    [wait] = assembler.open.values()
    assert format_tree(build_tree([*finished, wait]))[1] == (
        "  approval x__y  waiting for a decision")
