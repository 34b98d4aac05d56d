"""IpcMessage: JSON-only wire form and validation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goondan.errors import IpcError
from goondan.ipc.protocol import IpcMessage, decode, encode
from goondan.types import AgentEvent, ReplyChannel


def test_event_round_trip_keeps_every_field() -> None:
    event = AgentEvent(
        type="agent.request", input="hi", instance_key="k", trace_id="t" * 32,
        metadata={"__goondanAgentCallStack": ["a@k"]}, auth={"principal": {"id": "u1"}},
        reply_to=ReplyChannel("a", "corr_1"), extra={"custom": 1},
    )
    message = decode(encode(IpcMessage.event("a", "b", event)))
    assert message.to_dict()["from"] == "a" and message.to == "b"
    assert message.agent_event().to_dict() == event.to_dict()


def test_shutdown_and_ack_shapes() -> None:
    wire = json.loads(encode(IpcMessage.shutdown("b", grace_period_ms=500, reason="restart")))
    assert wire == {"type": "shutdown", "from": "orchestrator", "to": "b",
                    "payload": {"gracePeriodMs": 500, "reason": "restart"}}
    ack = decode(encode(IpcMessage.shutdown_ack("b", instance_key="k")))
    assert ack.type == "shutdown_ack" and ack.payload == {"instanceKey": "k"}


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"type": "delegate", "from": "a", "to": "b", "payload": {}}',
        b'{"type": "event", "from": "", "to": "b", "payload": {"type": "x"}}',
        b'{"type": "event", "from": "a", "to": "b", "payload": {}}',
        b'{"type": "event", "from": "a", "to": "b", '
        b'"payload": {"type": "x", "replyTo": {"target": 1}}}',
        b'{"type": "shutdown", "from": "o", "to": "b", '
        b'"payload": {"gracePeriodMs": -1, "reason": "restart"}}',
        b'{"type": "shutdown", "from": "o", "to": "b", '
        b'"payload": {"gracePeriodMs": 1, "reason": "why"}}',
        b"\xff\xfe",
    ],
)
def test_invalid_frames_are_refused(raw: bytes) -> None:
    with pytest.raises(IpcError) as info:
        decode(raw)
    assert info.value.code == "E_IPC_BAD_MESSAGE"


def test_non_json_payload_cannot_be_sent() -> None:
    message = IpcMessage("event", "a", "b", {"type": "x", "metadata": {"obj": object()}})
    with pytest.raises(IpcError):
        encode(message)
    with pytest.raises(IpcError):
        encode(IpcMessage("event", "a", "b", {"type": "x", "metadata": {"n": float("nan")}}))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(metadata=st.dictionaries(st.text(), json_values, max_size=5), text=st.text())
def test_any_json_metadata_round_trips(metadata: dict[str, object], text: str) -> None:
    event = AgentEvent(type="message", input=text, metadata=metadata)
    assert (
        decode(encode(IpcMessage.event("a", "b", event))).agent_event().to_dict() == event.to_dict()
    )
