"""Issue 29: what the runtime and the swarm read of an AgentEvent is typed (parent span, reply
target, start marker, stream), and the wire stays compatible: the metadata keys they used to
ride in are still read."""

from __future__ import annotations

import json

from goondan.ipc.protocol import IpcMessage, decode, encode
from goondan.types import AgentEvent


def test_typed_fields_travel_as_top_level_keys_and_round_trip() -> None:
    event = AgentEvent(type="message", input="hi", metadata={"callerAgent": "a"},
                       parent_span_id="p" * 16, reply_target="coordinator",
                       start_marker={"path": "/tmp/claims/x", "id": "e1"}, stream=True)
    wire = event.to_dict()
    assert (wire["parentSpanId"], wire["replyTarget"], wire["stream"]) == (
        "p" * 16,
        "coordinator",
        True,
    )
    assert wire["startMarker"] == {"path": "/tmp/claims/x", "id": "e1"}
    assert wire["metadata"] == {"callerAgent": "a"} and "extra" not in wire
    back = AgentEvent.from_dict(json.loads(json.dumps(wire)))
    assert back == event and back.extra == {}
    message = decode(encode(IpcMessage.event("a", "b", event)))
    assert message.agent_event() == event


def test_an_event_written_with_the_old_metadata_keys_reads_into_the_fields() -> None:
    old = {"id": "e1", "type": "message", "createdAt": "2026-01-01T00:00:00.000Z",
           "source": {"kind": "connector", "name": "cli"},
           "metadata": {"parentSpanId": "q" * 16, "replyTarget": "caller",
                        "__goondanStartMarker": {"path": "/tmp/claims/y", "id": "e1"},
                        "__goondanStream": True, "connectorEventId": "c1"}}
    event = AgentEvent.from_dict(old)
    assert (event.parent_span_id, event.reply_target, event.stream) == ("q" * 16, "caller", True)
    assert event.start_marker == {"path": "/tmp/claims/y", "id": "e1"}
    assert event.metadata == {"connectorEventId": "c1"}  # the fields are not kept twice
    built = AgentEvent(type="message", metadata={"parentSpanId": "r" * 16})
    assert built.parent_span_id == "r" * 16 and built.metadata == {}


def test_an_event_without_the_fields_keeps_the_old_wire_shape() -> None:
    wire = AgentEvent(type="message", input="hi", id="e2", created_at="t").to_dict()
    assert set(wire) == {"id", "type", "createdAt", "source", "input"}


def test_steering_and_wait_flags_are_typed_fields_too() -> None:
    """Steering (``inputPolicy: steer``) and ``send --wait`` ride typed fields, not metadata."""
    event = AgentEvent(type="message", input="hi", steer_into="evt-running", was_steered=True,
                       wait_for_final=True)
    wire = event.to_dict()
    assert (wire["steerInto"], wire["wasSteered"], wire["waitForFinal"]) == (
        "evt-running", True, True)
    assert "metadata" not in wire
    back = AgentEvent.from_dict(json.loads(json.dumps(wire)))
    assert back == event and back.extra == {}
    plain = AgentEvent.from_dict(AgentEvent(type="message", input="x").to_dict())
    assert (plain.steer_into, plain.was_steered, plain.wait_for_final) == (None, False, False)
