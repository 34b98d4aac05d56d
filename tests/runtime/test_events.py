"""Typed runtime events: the wire form, decoding, and delivery to sinks by phase."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from goondan.pipeline.events import EventBus
from goondan.pipeline.tracing import start_span
from goondan.runtime.events import (
    EVENT_TYPES,
    LlmCallStarted,
    LlmDelta,
    RuntimeEvent,
    ToolEnded,
    TurnEnded,
    event_from_dict,
    span_ids,
)
from goondan.runtime.observe import EventSink, RuntimeObserver


def test_the_wire_form_keeps_the_documented_camel_case_payload() -> None:
    span = start_span("turn", "turn", parent_span_id="c" * 16)
    event = TurnEnded(**span_ids(span), failed=True, turn_id="turn_1", event_id="evt_1",
                      event_type="message", finish_reason="error", step_count=2,
                      tool_call_count=1, error_count=1, token_usage={"prompt": 3},
                      latency_ms=1.5, error_code="E_X", error_message="boom")
    event.agent_name, event.instance_key = "coder", "k"
    payload = event.to_dict()
    assert payload == {
        "type": "turn.failed", "timestamp": event.timestamp, "agentName": "coder",
        "instanceKey": "k", "traceId": span.trace_id, "spanId": span.span_id,
        "parentSpanId": "c" * 16, "turnId": "turn_1", "eventId": "evt_1", "eventType": "message",
        "finishReason": "error", "stepCount": 2, "toolCallCount": 1, "errorCount": 1,
        "tokenUsage": {"prompt": 3}, "latencyMs": 1.5, "duration": 1.5, "errorCode": "E_X",
        "errorMessage": "boom",
    }
    assert event.to_dict() is payload  # built once, shared by every sink


@pytest.mark.parametrize("event", [
    ToolEnded(trace_id="t" * 32, span_id="s" * 16, turn_id="turn_1", step_id="st", step_index=0,
              tool_call_id="c1", tool_name="a__b", status="ok", latency_ms=2.0),
    ToolEnded(trace_id="t" * 32, span_id="s" * 16, failed=True, turn_id="turn_1", step_id="st",
              step_index=0, tool_call_id="c1", tool_name="a__b", status="error",
              error_code="E_TOOL", error_message="no"),
    LlmDelta(turn_id="turn_1", step_id="st", step_index=1, kind="text", text="hi"),
])
def test_a_payload_decodes_back_to_its_event(event: RuntimeEvent) -> None:
    decoded = event_from_dict(event.to_dict())
    assert type(decoded) is type(event) and decoded.to_dict() == event.to_dict()


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown runtime event"):
        event_from_dict({"type": "nope"})
    assert {"turn.started", "tool.failed", "llm.delta", "llm.started"} <= EVENT_TYPES


class Recorder(EventSink):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def on_span_start(self, event: RuntimeEvent) -> None:
        self.calls.append(("start", event.type))

    def on_span_end(self, event: RuntimeEvent) -> None:
        self.calls.append(("end", event.type))

    def on_event(self, event: RuntimeEvent) -> None:
        self.calls.append(("point", event.type))


def test_sinks_get_events_by_phase_payload_listeners_only_documented_ones() -> None:
    bus = EventBus()
    observer = RuntimeObserver("coder", "k", bus=bus)
    recorder, payloads, on_bus = Recorder(), [], []
    observer.add_sink(recorder)
    observer.subscribe(payloads.append)
    bus.on("llm.started", on_bus.append)
    bus.on("tool.completed", on_bus.append)
    observer.emit(LlmCallStarted(turn_id="t", step_id="s"))
    observer.emit(LlmDelta(turn_id="t", kind="text", text="x"))
    observer.emit(ToolEnded(turn_id="t", step_id="s", step_index=0, tool_call_id="c",
                            tool_name="a__b", status="ok"))
    assert recorder.calls == [("start", "llm.started"), ("point", "llm.delta"),
                              ("end", "tool.completed")]
    assert [p["type"] for p in payloads] == ["llm.delta", "tool.completed"]
    assert [p["type"] for p in on_bus] == ["tool.completed"]
    assert payloads[1]["agentName"] == "coder" and payloads[1]["instanceKey"] == "k"


def test_a_failing_sink_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = RuntimeObserver("coder", "k")
    seen: list[Any] = []

    class Broken(EventSink):
        def on_event(self, event: RuntimeEvent) -> None:
            raise RuntimeError("sink bug")

    remove = observer.add_sink(Broken())
    observer.subscribe(seen.append)
    with caplog.at_level(logging.ERROR, logger="goondan.runtime"):
        observer.emit(LlmDelta(turn_id="t", kind="text", text="x"))
    assert len(seen) == 1 and "sink" in caplog.text
    remove()
    observer.emit(LlmDelta(turn_id="t", kind="text", text="y"))
    assert len(seen) == 2
