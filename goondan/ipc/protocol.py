"""The IPC message: ``{type: event|shutdown|shutdown_ack, from, to, payload}`` as JSON text.

Only three message types exist (docs/orchestrator.md "IPC"). Everything the orchestrator and an
agent process exchange is one of them:

* ``event`` carries an :class:`~goondan.types.AgentEvent` (``payload``). Agent-to-agent requests
  set ``replyTo``; answers carry ``metadata.inReplyTo``. Events addressed ``to: "orchestrator"``
  whose ``type`` starts with ``runtime.`` are *control reports* of an agent process (ready,
  turn started/finished, spawn/list queries, ``runtime.delta`` stream events); they never
  start a Turn. In the other direction, ``runtime.cancel {eventId}`` (orchestrator → agent)
  cancels the Turn of that event (or drops it if it has not started); it never starts a Turn
  either.
* ``shutdown`` asks a process to drain: ``{gracePeriodMs, reason}``.
* ``shutdown_ack`` answers it after the running Turn was folded: ``{instanceKey}``.

The typed form of every control report and of ``shutdown``/``shutdown_ack`` is in
:mod:`goondan.ipc.control`; this module is the wire envelope.

Messages are encoded as UTF-8 JSON (never pickled objects) and decoding validates the shape, so
a misbehaving peer produces an :class:`~goondan.errors.IpcError` instead of arbitrary objects.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from goondan.errors import IpcError
from goondan.text import clean_text
from goondan.types import LEGACY_METADATA_KEYS, AgentEvent, JsonObject

__all__ = [
    "CANCEL_EVENT",
    "CONTROL_PREFIX",
    "MESSAGE_TYPES",
    "ORCHESTRATOR",
    "SHUTDOWN_REASONS",
    "START_MARKER_KEY",
    "STREAMED_EVENT_TYPES",
    "STREAM_KEY",
    "IpcMessage",
    "MessageType",
    "ShutdownReason",
    "cancel_event",
    "control_event",
    "decode",
    "encode",
]

MessageType = Literal["event", "shutdown", "shutdown_ack"]
ShutdownReason = Literal["restart", "config_change", "orchestrator_shutdown", "idle"]

MESSAGE_TYPES: Final = ("event", "shutdown", "shutdown_ack")
SHUTDOWN_REASONS: Final = ("restart", "config_change", "orchestrator_shutdown", "idle")
ORCHESTRATOR: Final = "orchestrator"
# Event types of control reports (agent process → orchestrator); never routed to an agent.
CONTROL_PREFIX: Final = "runtime."
# Orchestrator → agent: cancel the Turn of ``metadata.eventId`` (Ctrl-C in the ``goondan run``
# chat).
CANCEL_EVENT: Final = CONTROL_PREFIX + "cancel"
# The metadata keys that carried AgentEvent.stream and AgentEvent.start_marker before they were
# typed fields (still read, see goondan.types.LEGACY_METADATA_KEYS). ``stream``: the agent
# process reports the Turn's runtime events to the orchestrator as ``runtime.delta`` control
# events (``{eventId, payload}``), e.g. for the ``goondan run`` chat. ``start_marker``
# ``{path, id}``: a file the agent process appends ``{"id": id}`` to (flushed) just before the
# event's Turn starts, so a restarted orchestrator knows which durably accepted connector events
# already had their Turn (docs/connectors.md, "Delivery guarantee").
STREAM_KEY: Final = LEGACY_METADATA_KEYS["stream"]
START_MARKER_KEY: Final = LEGACY_METADATA_KEYS["start_marker"]
# The runtime events forwarded for a streamed Turn (what the console renderer draws; and
# ``approval.requested``: a caller that waits through a park sees the wait, docs/serving.md).
STREAMED_EVENT_TYPES: Final = frozenset({
    "llm.delta", "step.started", "step.completed", "tool.called", "tool.completed", "tool.failed",
    "approval.requested",
})


@dataclass
class IpcMessage:
    """One message on an IPC channel; ``from_`` is ``from`` on the wire."""

    type: MessageType
    from_: str
    to: str
    payload: JsonObject = field(default_factory=dict)

    @classmethod
    def event(cls, from_: str, to: str, event: AgentEvent) -> IpcMessage:
        """An ``event`` message carrying ``event``."""
        return cls("event", from_, to, event.to_dict())

    @classmethod
    def shutdown(cls, to: str, *, grace_period_ms: int, reason: ShutdownReason) -> IpcMessage:
        """The orchestrator's drain request (docs/orchestrator.md "Supervision")."""
        return cls(
            "shutdown", ORCHESTRATOR, to, {"gracePeriodMs": grace_period_ms, "reason": reason}
        )

    @classmethod
    def shutdown_ack(cls, from_: str, *, instance_key: str) -> IpcMessage:
        """An agent's answer to ``shutdown`` once its running Turn is folded."""
        return cls("shutdown_ack", from_, ORCHESTRATOR, {"instanceKey": instance_key})

    def agent_event(self) -> AgentEvent:
        """The payload of an ``event`` message as an :class:`AgentEvent`."""
        if self.type != "event":
            raise IpcError(
                f"{self.type} message has no AgentEvent payload", code="E_IPC_BAD_MESSAGE"
            )
        return AgentEvent.from_dict(self.payload)

    @property
    def is_control(self) -> bool:
        """True for an agent process's control report to the orchestrator."""
        return (
            self.type == "event"
            and self.to == ORCHESTRATOR
            and str(self.payload.get("type", "")).startswith(CONTROL_PREFIX)
        )

    def to_dict(self) -> JsonObject:
        """Wire form with camelCase keys (``from`` instead of ``from_``)."""
        return {"type": self.type, "from": self.from_, "to": self.to, "payload": self.payload}

    @classmethod
    def from_dict(cls, data: Any) -> IpcMessage:
        """Validate and build a message; raises :class:`IpcError` ``E_IPC_BAD_MESSAGE``."""
        if not isinstance(data, dict):
            raise _bad(f"an IPC message must be a JSON object, got {type(data).__name__}")
        kind = data.get("type")
        if kind not in MESSAGE_TYPES:
            raise _bad(
                f"unknown IPC message type {kind!r}; expected one of {', '.join(MESSAGE_TYPES)}"
            )
        sender, target = data.get("from"), data.get("to")
        if not isinstance(sender, str) or not sender:
            raise _bad("IPC message field 'from' must be a non-empty string")
        if not isinstance(target, str) or not target:
            raise _bad("IPC message field 'to' must be a non-empty string")
        payload = data.get("payload", {})
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise _bad(f"IPC {kind} payload must be a JSON object")
        if kind == "event":
            _check_event_payload(payload)
        elif kind == "shutdown":
            grace = payload.get("gracePeriodMs")
            if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
                raise _bad("shutdown payload needs a non-negative integer 'gracePeriodMs'")
            if payload.get("reason") not in SHUTDOWN_REASONS:
                raise _bad(
                    f"shutdown reason {payload.get('reason')!r} is not one of "
                    f"{', '.join(SHUTDOWN_REASONS)}"
                )
        return cls(kind, sender, target, payload)


def _check_event_payload(payload: JsonObject) -> None:
    if not isinstance(payload.get("type"), str) or not payload["type"]:
        raise _bad("event payload (AgentEvent) needs a non-empty string 'type'")
    for key in ("id", "input", "instanceKey", "traceId"):
        if key in payload and payload[key] is not None and not isinstance(payload[key], str):
            raise _bad(f"event payload field {key!r} must be a string")
    for key in ("metadata", "source", "auth"):
        if key in payload and payload[key] is not None and not isinstance(payload[key], dict):
            raise _bad(f"event payload field {key!r} must be an object")
    reply = payload.get("replyTo")
    if reply is not None and (
        not isinstance(reply, dict)
        or not isinstance(reply.get("target"), str)
        or not isinstance(reply.get("correlationId"), str)
    ):
        raise _bad("event payload 'replyTo' must be {target: str, correlationId: str}")


def _bad(message: str) -> IpcError:
    return IpcError(
        message,
        code="E_IPC_BAD_MESSAGE",
        suggestion="both ends must run the same goondan version; this is a bug if they do",
    )


def encode(message: IpcMessage) -> bytes:
    """UTF-8 JSON bytes of ``message``; raises ``E_IPC_BAD_MESSAGE`` for non-JSON payloads."""
    try:
        text = json.dumps(
            message.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise _bad(f"IPC payload is not JSON-serialisable: {exc}") from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate anywhere in the payload: the U+FFFD rule (docs/security.md).
        return clean_text(text).encode("utf-8")


def decode(data: bytes) -> IpcMessage:
    """Parse and validate one message from UTF-8 JSON bytes."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(f"IPC frame is not UTF-8 JSON: {exc}") from exc
    return IpcMessage.from_dict(raw)


def control_event(kind: str, *, agent: str, instance_key: str, **metadata: Any) -> AgentEvent:
    """A control report ``runtime.<kind>`` (ready, turnStarted, turnFinished, spawn, list)."""
    return AgentEvent(
        type=CONTROL_PREFIX + kind,
        instance_key=instance_key,
        source={"kind": "agent", "name": agent},
        metadata=dict(metadata),
    )


def cancel_event(event_id: str, *, instance_key: str, reason: str = "cancelled") -> AgentEvent:
    """The orchestrator's ``runtime.cancel`` request for the Turn of ``event_id``."""
    return AgentEvent(
        type=CANCEL_EVENT,
        instance_key=instance_key,
        source={"kind": "agent", "name": ORCHESTRATOR},
        metadata={"eventId": event_id, "reason": reason},
    )
