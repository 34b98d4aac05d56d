"""Typed control messages: one dataclass per ``runtime.<kind>`` and a decode table.

On the wire a control message is still an ``event`` IPC message whose :class:`AgentEvent` has
``type: "runtime.<kind>"`` and its fields in camelCase ``metadata`` (docs/orchestrator.md "IPC").
Code on both sides works with the classes below: :meth:`Control.to_event` encodes,
:func:`decode_control` decodes at the boundary through :data:`CONTROL_TYPES`, so a field name is
written in one place and a misspelt key cannot silently read as ``None``.

Worker → orchestrator: :class:`Ready`, :class:`TurnStarted`, :class:`TurnFinished`,
:class:`StartError`, :class:`Delta` (a streamed runtime event), the queries
:class:`SpawnQuery` and :class:`ListQuery`, and a connector's :class:`Emit`,
:class:`ConnectorError`, :class:`Completed`, :class:`ApprovalDecided`. Orchestrator → worker:
:class:`Cancel`, :class:`Inspect` (a state query), :class:`Answer` (to a query or an ``emit``)
and, to a connector, :class:`ApprovalRequested`.
``shutdown`` / ``shutdown_ack`` are IPC message types of their own (:class:`Shutdown`,
:class:`ShutdownAck`, :func:`decode_shutdown`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from goondan.errors import IpcError
from goondan.ipc.protocol import CONTROL_PREFIX, ORCHESTRATOR, IpcMessage, ShutdownReason
from goondan.types import AgentEvent, JsonObject, ReplyChannel

__all__ = [
    "CONTROL_TYPES",
    "Answer",
    "ApprovalDecided",
    "ApprovalRequested",
    "Cancel",
    "Completed",
    "ConnectorError",
    "Control",
    "Delta",
    "Emit",
    "Inspect",
    "ListQuery",
    "Query",
    "Ready",
    "Shutdown",
    "ShutdownAck",
    "SpawnQuery",
    "StartError",
    "TurnFinished",
    "TurnStarted",
    "decode_control",
    "decode_shutdown",
]

# Fields that are on the event itself, not in its metadata.
_ENVELOPE: Final = frozenset({"correlation_id"})
_UNSET: Final = object()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class Control:
    """A control message; ``kind`` names it on the wire (``runtime.<kind>``).

    Fields map to camelCase metadata keys. A field with a default is left out while it has
    that default (``duplicate``, ``restartRequested`` appear only when they are true)."""

    kind: ClassVar[str] = ""

    @property
    def event_type(self) -> str:
        """``runtime.<kind>``."""
        return CONTROL_PREFIX + self.kind

    def metadata(self) -> JsonObject:
        """The camelCase metadata of this message."""
        meta: JsonObject = {}
        for f in dataclasses.fields(self):
            if f.name in _ENVELOPE:
                continue
            value = getattr(self, f.name)
            default = f.default if f.default is not dataclasses.MISSING else _UNSET
            if default is not _UNSET and value == default:
                continue
            meta[_camel(f.name)] = value
        return meta

    def to_event(self, *, sender: str, instance_key: str, source_kind: str = "agent") -> AgentEvent:
        """The :class:`AgentEvent` that carries this message."""
        return AgentEvent(
            type=self.event_type, instance_key=instance_key,
            source={"kind": source_kind, "name": sender}, metadata=self.metadata(),
        )

    def ipc_message(
        self, *, sender: str, to: str, instance_key: str, source_kind: str = "agent"
    ) -> IpcMessage:
        """The ``event`` IPC message that carries this message."""
        return IpcMessage.event(
            sender,
            to,
            self.to_event(sender=sender, instance_key=instance_key, source_kind=source_kind),
        )

    @classmethod
    def from_event(cls, event: AgentEvent) -> Control:
        """Decode ``event`` (its ``type`` already matched ``kind``)."""
        meta = event.metadata
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in _ENVELOPE:
                continue
            key = _camel(f.name)
            if key in meta:
                values[f.name] = meta[key]
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise IpcError(
                    f"control message {event.type} lacks metadata.{key}",
                    code="E_IPC_BAD_MESSAGE",
                    suggestion="both ends must run the same goondan "
                    "version; this is a bug if they do",
                )
        return cls(**values)


@dataclass(frozen=True)
class Ready(Control):
    """The worker is up and takes events."""

    kind: ClassVar[str] = "ready"
    pid: int | None = None
    # The process keeps a turn journal: a Turn it was running when it died resumes when it is
    # respawned, and ``resuming`` is that Turn's input event (docs/conversations.md "Durability").
    journal: bool = False
    resuming: JsonObject | None = None


@dataclass(frozen=True)
class TurnStarted(Control):
    """The Turn of ``event_id`` started (a crash from now on interrupts it)."""

    kind: ClassVar[str] = "turnStarted"
    event_id: str


@dataclass(frozen=True)
class TurnFinished(Control):
    """The Turn of ``event_id`` is folded; the next queued event may be sent."""

    kind: ClassVar[str] = "turnFinished"
    event_id: str
    finish_reason: str | None
    ok: bool
    cancelled: bool
    duplicate: bool = False  # the start marker said another process already ran it
    restart_requested: bool = False  # a tool asked for a restart (base ``self-restart``)
    restart_reason: str | None = None
    steered: tuple[str, ...] = ()  # the steered events this Turn took (inputPolicy: steer)


@dataclass(frozen=True)
class StartError(Control):
    """The worker could not start (configuration, connector import)."""

    kind: ClassVar[str] = "startError"
    code: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Delta(Control):
    """One runtime event of the Turn of ``event_id`` (every Turn's, for the event sinks)."""

    kind: ClassVar[str] = "delta"
    event_id: str
    payload: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class Query(Control):
    """A control request answered with :class:`Answer`; ``correlation_id`` is its ``replyTo``."""

    correlation_id: str = ""

    def to_event(self, *, sender: str, instance_key: str, source_kind: str = "agent") -> AgentEvent:
        event = super().to_event(sender=sender, instance_key=instance_key, source_kind=source_kind)
        event.reply_to = ReplyChannel(sender, self.correlation_id)
        return event

    @classmethod
    def from_event(cls, event: AgentEvent) -> Control:
        decoded = super().from_event(event)
        correlation = event.reply_to.correlation_id if event.reply_to is not None else ""
        object.__setattr__(decoded, "correlation_id", correlation)  # frozen: set once, here
        return decoded


@dataclass(frozen=True)
class SpawnQuery(Query):
    """``agents__spawn``: start (target, target_instance_key) with an optional workdir."""

    kind: ClassVar[str] = "spawn"
    target: str = ""
    target_instance_key: str = "default"
    cwd: str | None = None


@dataclass(frozen=True)
class ListQuery(Query):
    """``agents__list``: the spawned instances (of this owner, or all)."""

    kind: ClassVar[str] = "list"
    include_all: bool = False


@dataclass(frozen=True)
class Inspect(Query):
    """The orchestrator asks an agent process about its state (:mod:`goondan.ipc.queries`);
    answered with an ``inspect.answer`` event."""

    kind: ClassVar[str] = "inspect"
    what: str = "state"


@dataclass(frozen=True)
class Emit(Query):
    """A connector's event for the ingress (answered after the durable append; with
    ``answer``, after its Turn ended, with the Turn's answer: :mod:`goondan.connectors.asking`)."""

    kind: ClassVar[str] = "emit"
    event: Any = None
    answer: bool = False
    agent: str | None = None  # with answer: takes the entry agent's place in the routing
    # with answer: a Turn parked on an approval answers once resumed (docs/approvals.md)
    wait_for_approval: bool = False


@dataclass(frozen=True)
class ApprovalDecided(Query):
    """A connector took a decision for approval ``approval_id`` (a Slack button, a Telegram
    inline keyboard, a signed webhook POST): the orchestrator stores it and resumes the parked
    turn (docs/approvals.md); answered with ``{status, decided, decidedBy, via}`` or an error."""

    kind: ClassVar[str] = "approvalDecided"
    approval_id: str = ""
    approve: bool = False
    by: str = ""
    via: str = ""
    args: JsonObject | None = None
    note: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ApprovalRequested(Control):
    """Orchestrator → connector: a turn whose input came from this Connection waits for
    ``approval`` (the listing row of docs/approvals.md); ``properties`` are the input event's
    properties (where to announce it: Slack channel and thread, Telegram chat)."""

    kind: ClassVar[str] = "approvalRequested"
    approval: JsonObject = field(default_factory=dict)
    properties: JsonObject = field(default_factory=dict)


@dataclass(frozen=True)
class Answer(Control):
    """The answer to a :class:`Query`: ``result`` or ``error`` ``{code, message}``."""

    kind: ClassVar[str] = "answer"
    in_reply_to: str
    result: JsonObject | None = None
    error: JsonObject | None = None


@dataclass(frozen=True)
class Cancel(Control):
    """Cancel the Turn of ``event_id`` (or drop it if it has not started)."""

    kind: ClassVar[str] = "cancel"
    event_id: str
    reason: str


@dataclass(frozen=True)
class ConnectorError(Control):
    """A connector's ``run`` raised; the cause for the crash record."""

    kind: ClassVar[str] = "connectorError"
    code: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Completed(Control):
    """A connector's ``run`` returned: its work is done."""

    kind: ClassVar[str] = "completed"


CONTROL_TYPES: Final[dict[str, type[Control]]] = {
    cls.kind: cls
    for cls in (Ready, TurnStarted, TurnFinished, StartError, Delta, SpawnQuery, ListQuery, Inspect,
                Emit, Answer, Cancel, ConnectorError, Completed, ApprovalDecided,
                ApprovalRequested)
}


def decode_control(event: AgentEvent) -> Control | None:
    """The typed control message of ``event``; None for other events and unknown kinds
    (a newer peer's report is ignored, like before). Raises ``E_IPC_BAD_MESSAGE`` when a
    known kind lacks a field."""
    if not event.type.startswith(CONTROL_PREFIX):
        return None
    cls = CONTROL_TYPES.get(event.type[len(CONTROL_PREFIX):])
    return cls.from_event(event) if cls is not None else None


@dataclass(frozen=True)
class Shutdown:
    """``shutdown {gracePeriodMs, reason}``: drain, then exit 0."""

    grace_period_ms: int
    reason: ShutdownReason

    def ipc_message(self, to: str) -> IpcMessage:
        """The IPC message (orchestrator → worker)."""
        return IpcMessage.shutdown(to, grace_period_ms=self.grace_period_ms, reason=self.reason)


@dataclass(frozen=True)
class ShutdownAck:
    """``shutdown_ack {instanceKey, pending}``: the events that never started go back."""

    instance_key: str
    pending: list[AgentEvent] = field(default_factory=list)

    def ipc_message(self, sender: str) -> IpcMessage:
        """The IPC message (worker → orchestrator)."""
        return IpcMessage("shutdown_ack", sender, ORCHESTRATOR, {
            "instanceKey": self.instance_key, "pending": [e.to_dict() for e in self.pending],
        })


def decode_shutdown(message: IpcMessage) -> Shutdown | ShutdownAck | None:
    """The typed ``shutdown`` / ``shutdown_ack`` of ``message`` (validated by :mod:`protocol`)."""
    payload = message.payload
    if message.type == "shutdown":
        return Shutdown(int(payload["gracePeriodMs"]), payload["reason"])
    if message.type == "shutdown_ack":
        pending = payload.get("pending")
        events = [AgentEvent.from_dict(p) for p in pending] if isinstance(pending, list) else []
        return ShutdownAck(str(payload.get("instanceKey") or ""), events)
    return None
