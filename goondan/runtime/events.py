"""Typed runtime events: spans of turns, steps, LLM calls, tool calls and agent requests.

Every unit of work is a span (``goondan.pipeline.tracing.Span``: ``traceId``, ``spanId``,
``parentSpanId``). A span produces a *start* event and an *end* event; streamed text and
ingress are *point* events. Sinks (``goondan/runtime/observe.py``) receive them by phase —
``on_span_start`` / ``on_span_end`` / ``on_event``, like the OpenAI Agents SDK's
``TracingProcessor`` — and never see a hand-built dict.

The wire form (:meth:`RuntimeEvent.to_dict`, :func:`event_from_dict`) is the camelCase payload
documented in docs/runtime.md "Runtime events": ``{type, timestamp, agentName, instanceKey,
traceId, spanId, parentSpanId?, ...}``. It is what extensions get from ``api.events.on``, what
``Runtime.subscribe`` listeners get, and what an agent process sends to the orchestrator, so
the console renders the same payload in ``goondan repl`` and ``goondan run``.

The ten event types of the documented stream are ``public``; the others (``llm.started``,
``llm.completed``, ``agent.requested``, ``agent.answered``, ``ingress.received``) go to typed
sinks only, so that a payload subscriber keeps seeing exactly the documented sequence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from goondan.pipeline.tracing import Span
from goondan.types import JsonObject, now_iso

__all__ = [
    "EVENT_TYPES",
    "AgentAnswered",
    "AgentRequested",
    "ApprovalDecided",
    "ApprovalRequested",
    "IngressReceived",
    "LlmCallEnded",
    "LlmCallStarted",
    "LlmDelta",
    "Phase",
    "RuntimeEvent",
    "StepEnded",
    "StepStarted",
    "ToolCalled",
    "ToolEnded",
    "TurnEnded",
    "TurnStarted",
    "event_from_dict",
    "span_ids",
]

Phase = Literal["start", "end", "point"]

# attribute -> wire key, for the few keys that are not plain camelCase of the attribute.
_RENAMED = {"latency_ms": "latencyMs"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(kw_only=True, eq=False)
class RuntimeEvent:
    """One runtime event; subclasses add their fields (snake_case here, camelCase on the wire).

    ``agent_name`` and ``instance_key`` are stamped by the observer that publishes the event.
    Fields left ``None`` are omitted from the wire form.
    """

    TYPES: ClassVar[tuple[str, ...]] = ()  # wire type names this class decodes
    phase: ClassVar[Phase] = "point"
    public: ClassVar[bool] = True
    _wire_fields: ClassVar[tuple[tuple[str, str], ...]] = ()

    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str | None = None
    agent_name: str = ""
    instance_key: str = ""
    timestamp: str = field(default_factory=now_iso)
    _payload: JsonObject | None = field(default=None, init=False, repr=False)

    @property
    def type(self) -> str:
        """The wire ``type`` (``turn.completed`` ...)."""
        return self.TYPES[0]

    def __repr__(self) -> str:
        # One short repr for every event class (the ids that identify it, not every field).
        return (
            f"<{type(self).__name__} {self.type} "
            f"{self.agent_name}@{self.instance_key} span={self.span_id}>"
        )

    def to_dict(self) -> JsonObject:
        """The camelCase payload (built once; treat it as read-only, every sink shares it)."""
        payload = self._payload
        if payload is None:
            payload = {"type": self.type, "timestamp": self.timestamp,
                       "agentName": self.agent_name, "instanceKey": self.instance_key}
            if self.trace_id:
                payload["traceId"] = self.trace_id
            if self.span_id:
                payload["spanId"] = self.span_id
            if self.parent_span_id is not None:
                payload["parentSpanId"] = self.parent_span_id
            for attr, key in self._wire_fields:
                value = getattr(self, attr)
                if value is not None:
                    payload[key] = value
            if "latencyMs" in payload:
                payload["duration"] = payload["latencyMs"]  # the older name, kept on the wire
            self._payload = payload
        return payload


def span_ids(span: Span) -> dict[str, Any]:
    """``trace_id``/``span_id``/``parent_span_id`` keyword arguments for an event of ``span``."""
    return {"trace_id": span.trace_id, "span_id": span.span_id,
            "parent_span_id": span.parent_span_id}


_REGISTRY: dict[str, type[RuntimeEvent]] = {}


def _register(cls: type[RuntimeEvent]) -> type[RuntimeEvent]:
    own = [f for f in dataclasses.fields(cls) if f.name not in _BASE_FIELDS and f.init]
    cls._wire_fields = tuple(
        (f.name, _RENAMED.get(f.name, _camel(f.name))) for f in own if f.name != "failed"
    )
    for name in cls.TYPES:
        _REGISTRY[name] = cls
    return cls


_BASE_FIELDS = frozenset(f.name for f in dataclasses.fields(RuntimeEvent))


def event_from_dict(payload: JsonObject) -> RuntimeEvent:
    """Decode a wire payload (from a pipe or a log) back into its event class.

    Raises ``ValueError`` for an unknown ``type``; unknown keys are ignored.
    """
    name = str(payload.get("type"))
    cls = _REGISTRY.get(name)
    if cls is None:
        raise ValueError(f"unknown runtime event type {name!r}")
    kwargs: dict[str, Any] = {
        "trace_id": str(payload.get("traceId") or ""),
        "span_id": str(payload.get("spanId") or ""),
        "parent_span_id": payload.get("parentSpanId"),
        "agent_name": str(payload.get("agentName") or ""),
        "instance_key": str(payload.get("instanceKey") or ""),
        "timestamp": str(payload.get("timestamp") or now_iso()),
    }
    for attr, key in cls._wire_fields:
        if key in payload:
            kwargs[attr] = payload[key]
    if any(f.name == "failed" for f in dataclasses.fields(cls)):
        kwargs["failed"] = name == cls.TYPES[1]
    return cls(**kwargs)


# -- turn ----------------------------------------------------------------------------------------
@_register
@dataclass(kw_only=True, eq=False, repr=False)
class TurnStarted(RuntimeEvent):
    """``turn.started``: an input event began a turn."""

    TYPES: ClassVar[tuple[str, ...]] = ("turn.started",)
    phase: ClassVar[Phase] = "start"
    turn_id: str
    event_id: str | None = None
    event_type: str | None = None


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class TurnEnded(RuntimeEvent):
    """``turn.completed`` / ``turn.failed`` (``failed``: the TurnResult has an error)."""

    TYPES: ClassVar[tuple[str, ...]] = ("turn.completed", "turn.failed")
    phase: ClassVar[Phase] = "end"
    failed: bool = False
    turn_id: str
    event_id: str | None = None
    event_type: str | None = None
    finish_reason: str
    step_count: int = 0
    tool_call_count: int = 0
    error_count: int = 0
    token_usage: JsonObject | None = None
    cost: float | None = None  # US dollars, when the Model has spec.pricing
    latency_ms: float = 0.0
    error_code: str | None = None
    error_message: str | None = None

    @property
    def type(self) -> str:
        return self.TYPES[1] if self.failed else self.TYPES[0]


# -- step ----------------------------------------------------------------------------------------
@_register
@dataclass(kw_only=True, eq=False, repr=False)
class StepStarted(RuntimeEvent):
    """``step.started``."""

    TYPES: ClassVar[tuple[str, ...]] = ("step.started",)
    phase: ClassVar[Phase] = "start"
    turn_id: str
    step_id: str
    step_index: int


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class StepEnded(RuntimeEvent):
    """``step.completed`` / ``step.failed`` (counters are absent when the step raised)."""

    TYPES: ClassVar[tuple[str, ...]] = ("step.completed", "step.failed")
    phase: ClassVar[Phase] = "end"
    failed: bool = False
    turn_id: str
    step_id: str
    step_index: int
    tool_call_count: int | None = None
    error_count: int | None = None
    token_usage: JsonObject | None = None
    cost: float | None = None
    latency_ms: float = 0.0
    error_message: str | None = None

    @property
    def type(self) -> str:
        return self.TYPES[1] if self.failed else self.TYPES[0]


# -- LLM call ------------------------------------------------------------------------------------
@_register
@dataclass(kw_only=True, eq=False, repr=False)
class LlmCallStarted(RuntimeEvent):
    """``llm.started``: one model request of a step (typed sinks only)."""

    TYPES: ClassVar[tuple[str, ...]] = ("llm.started",)
    phase: ClassVar[Phase] = "start"
    public: ClassVar[bool] = False
    turn_id: str
    step_id: str
    model: str | None = None
    provider: str | None = None
    stream: bool = False
    message_count: int = 0
    tool_count: int = 0


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class LlmCallEnded(RuntimeEvent):
    """``llm.completed`` / ``llm.failed``: the model request's outcome (typed sinks only)."""

    TYPES: ClassVar[tuple[str, ...]] = ("llm.completed", "llm.failed")
    phase: ClassVar[Phase] = "end"
    public: ClassVar[bool] = False
    failed: bool = False
    turn_id: str
    step_id: str
    model: str | None = None  # repeated from llm.started: an end event describes its span alone
    provider: str | None = None
    finish_reason: str | None = None
    token_usage: JsonObject | None = None
    cost: float | None = None
    tool_call_count: int = 0
    latency_ms: float = 0.0
    error_message: str | None = None

    @property
    def type(self) -> str:
        return self.TYPES[1] if self.failed else self.TYPES[0]


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class LlmDelta(RuntimeEvent):
    """``llm.delta``: a streamed fragment (text, or a tool call's name/arguments)."""

    TYPES: ClassVar[tuple[str, ...]] = ("llm.delta",)
    turn_id: str
    step_id: str | None = None
    step_index: int | None = None
    kind: str
    text: str | None = None
    index: int | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None


# -- tool call -----------------------------------------------------------------------------------
@_register
@dataclass(kw_only=True, eq=False, repr=False)
class ToolCalled(RuntimeEvent):
    """``tool.called``: a tool call enters the toolCall chain (``args`` as the model sent them)."""

    TYPES: ClassVar[tuple[str, ...]] = ("tool.called",)
    phase: ClassVar[Phase] = "start"
    turn_id: str
    step_id: str
    step_index: int
    tool_call_id: str
    tool_name: str
    args: JsonObject | None = None


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class ToolEnded(RuntimeEvent):
    """``tool.completed`` (result ``ok``) / ``tool.failed`` (error result or exception)."""

    TYPES: ClassVar[tuple[str, ...]] = ("tool.completed", "tool.failed")
    phase: ClassVar[Phase] = "end"
    failed: bool = False
    turn_id: str
    step_id: str
    step_index: int
    tool_call_id: str
    tool_name: str
    status: str
    latency_ms: float = 0.0
    error_code: str | None = None
    error_message: str | None = None

    @property
    def type(self) -> str:
        return self.TYPES[1] if self.failed else self.TYPES[0]


# -- agent requests and ingress ------------------------------------------------------------------
@_register
@dataclass(kw_only=True, eq=False, repr=False)
class AgentRequested(RuntimeEvent):
    """``agent.requested``: this agent asked another one (an ``agentCall`` span; typed sinks
    only)."""

    TYPES: ClassVar[tuple[str, ...]] = ("agent.requested",)
    phase: ClassVar[Phase] = "start"
    public: ClassVar[bool] = False
    turn_id: str | None = None
    target: str
    target_instance_key: str | None = None
    correlation_id: str | None = None


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class AgentAnswered(RuntimeEvent):
    """``agent.answered`` / ``agent.failed``: the answer (or error) of an agent request."""

    TYPES: ClassVar[tuple[str, ...]] = ("agent.answered", "agent.failed")
    phase: ClassVar[Phase] = "end"
    public: ClassVar[bool] = False
    failed: bool = False
    turn_id: str | None = None
    target: str
    correlation_id: str | None = None
    latency_ms: float = 0.0
    error_code: str | None = None
    error_message: str | None = None

    @property
    def type(self) -> str:
        return self.TYPES[1] if self.failed else self.TYPES[0]


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class IngressReceived(RuntimeEvent):
    """``ingress.received``: an outside event (a connector's) entered the swarm."""

    TYPES: ClassVar[tuple[str, ...]] = ("ingress.received",)
    public: ClassVar[bool] = False
    source: str
    event_id: str | None = None
    event_type: str | None = None
    target: str | None = None


# -- approvals (docs/approvals.md) -----------------------------------------------------------------
@_register
@dataclass(kw_only=True, eq=False, repr=False)
class ApprovalRequested(RuntimeEvent):
    """``approval.requested``: a tool call waits for a person (its span is the tool call's)."""

    TYPES: ClassVar[tuple[str, ...]] = ("approval.requested",)
    turn_id: str
    approval_id: str
    tool_call_id: str
    tool_name: str
    reason: str | None = None
    expires_at: str | None = None


@_register
@dataclass(kw_only=True, eq=False, repr=False)
class ApprovalDecided(RuntimeEvent):
    """``approval.decided``: the resumed turn applies a decision (approved, denied, expired)."""

    TYPES: ClassVar[tuple[str, ...]] = ("approval.decided",)
    turn_id: str
    approval_id: str
    tool_call_id: str
    tool_name: str
    status: str
    decided_by: str | None = None
    via: str | None = None


EVENT_TYPES: frozenset[str] = frozenset(_REGISTRY)
