"""The connector contract: :class:`ConnectorEvent` and the :class:`ConnectorContext` a
connector's ``async def run(ctx)`` receives (docs/connectors.md).

A Connector is a protocol adapter. It turns outside traffic (stdin lines, HTTP requests, long
polling) into :class:`ConnectorEvent` values and hands each to ``await ctx.emit(event)``. It never
routes, never talks to agents and never answers users; routing is the orchestrator's job and
replies go out through tools. The exception: an approval a Turn of the Connection waits for is
announced and decided by its connector (``on_approval``, ``decide_approval``).

``ctx.emit`` returns an :class:`EmitReceipt` only once the event is durably accepted (appended
and flushed to the Connection's inbox under the state root), so an HTTP connector may answer
200 after it returns and the event survives a crash of any process from then on. An event that
carries an ``id`` already accepted on this Connection (a GitHub delivery id, a Slack
``event_id``, a Telegram ``update_id``) is not accepted twice: the receipt says ``duplicate``.

Wire form (camelCase, as every JSON file goondan writes)::

    {"id": "...", "name": "webhook_message", "instanceKey": "webhook:default",
     "message": {"type": "text", "text": "hi"}, "properties": {"route": "a"},
     "createdAt": "2026-11-24T09:00:00.000Z"}
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.errors import ConnectorEventError
from goondan.text import clean_json, clean_text
from goondan.types import JsonObject, new_id, now_iso

__all__ = [
    "ConnectorContext",
    "ConnectorEvent",
    "ConnectorEventError",
    "EmitReceipt",
    "event_text",
]

_MESSAGE_TYPES = ("text", "image", "file")


_log = logging.getLogger("goondan.connectors.event")


def _stringify_properties(raw: Any) -> dict[str, str]:
    """Keep primitive property values as strings; drop nested objects and nulls (what a
    connector's own normaliser does: :meth:`ConnectorEvent.text`)."""
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or value is None:
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            out[key] = str(value)
    return out


def _string_properties(raw: Any, event: str) -> dict[str, str]:
    """The string-valued properties of a wire event; every other value (number, boolean,
    null, object) is dropped with a debug log, as the reference parses events."""
    if not isinstance(raw, Mapping):
        if raw is not None:
            _log.debug("connector event %r: 'properties' is not an object; ignored", event)
        return {}
    out: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(key, str) and isinstance(value, str):
            out[key] = value
        else:
            _log.debug("connector event %r: property %r is not a string (%s); dropped", event, key,
                       type(value).__name__)
    return out


@dataclass(frozen=True)
class ConnectorEvent:
    """One normalised inbound event; each becomes its own Turn (docs/connectors.md
    "Writing a connector")."""

    name: str
    instance_key: str
    message: JsonObject
    properties: dict[str, str] = field(default_factory=dict)
    id: str = field(default_factory=lambda: new_id("cev"))
    created_at: str = field(default_factory=now_iso)

    def __post_init__(self) -> None:
        # Outside payloads may carry lone surrogates, however the event was built: the U+FFFD
        # rule (docs/security.md), so the inbox line and the turn input always encode.
        for name in ("name", "instance_key", "message", "properties", "id"):
            value = getattr(self, name)
            cleaned = clean_json(value)
            if cleaned is not value:
                object.__setattr__(self, name, cleaned)

    @classmethod
    def text(
        cls,
        name: str,
        text: str,
        *,
        instance_key: str,
        properties: Mapping[str, Any] | None = None,
        id: str | None = None,
    ) -> ConnectorEvent:
        """A text event; numbers and booleans in ``properties`` are stringified (``42`` → ``"42"``,
        ``True`` → ``"true"``), nulls and objects dropped: what a connector's normaliser does."""
        return cls(
            name=name,
            instance_key=instance_key,
            message={"type": "text", "text": clean_text(text)},
            properties=_stringify_properties(clean_json(dict(properties or {}))),
            id=id or new_id("cev"),
        )

    def to_dict(self) -> JsonObject:
        return {
            "id": self.id,
            "name": self.name,
            "instanceKey": self.instance_key,
            "message": dict(self.message),
            "properties": dict(self.properties),
            "createdAt": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Any) -> ConnectorEvent:
        """Parse the wire form (or what a connector passed to ``emit``).

        Raises :class:`ConnectorEventError` when ``name``/``instanceKey`` are not non-empty
        strings or ``message`` is not one of the three shapes. Only string properties are
        kept: a number, boolean, null or object value is dropped (with a debug log), as the
        reference parses events. A connector that wants ``42`` → ``"42"`` builds the event
        with :meth:`text`, which stringifies primitives (the built-in connectors do).
        """
        if not isinstance(data, Mapping):
            raise ConnectorEventError(
                f"a connector event must be an object, got {type(data).__name__}"
            )
        # Outside payloads may carry lone surrogates: the U+FFFD rule (docs/security.md).
        data = clean_json(dict(data))
        name = data.get("name")
        key = data.get("instanceKey", data.get("instance_key"))
        if not isinstance(name, str) or not name.strip():
            raise ConnectorEventError("a connector event needs a non-empty string 'name'")
        if not isinstance(key, str) or not key.strip():
            raise ConnectorEventError(
                f"connector event {name!r} needs a non-empty string 'instanceKey'"
            )
        message = data.get("message")
        if not isinstance(message, Mapping) or message.get("type") not in _MESSAGE_TYPES:
            raise ConnectorEventError(
                f"connector event {name!r} needs 'message' of type text, image or file"
            )
        kind = message["type"]
        needed = {"text": "text", "image": "url", "file": "url"}[kind]
        if not isinstance(message.get(needed), str):
            raise ConnectorEventError(
                f"connector event {name!r}: a {kind} message needs a string {needed!r}"
            )
        if kind == "file" and not isinstance(message.get("name"), str):
            raise ConnectorEventError(
                f"connector event {name!r}: a file message needs a string 'name'"
            )
        event_id = data.get("id")
        created = data.get("createdAt")
        return cls(
            name=name,
            instance_key=key,
            message=dict(message),
            properties=_string_properties(data.get("properties"), name),
            id=event_id if isinstance(event_id, str) and event_id else new_id("cev"),
            created_at=created if isinstance(created, str) and created else now_iso(),
        )


def event_text(event: ConnectorEvent) -> str:
    """The turn's input text: ``text``; ``[image] <url>``; ``[file:<name>] <url>``."""
    message = event.message
    kind = message.get("type")
    if kind == "image":
        return f"[image] {message.get('url', '')}"
    if kind == "file":
        return f"[file:{message.get('name', '')}] {message.get('url', '')}"
    return str(message.get("text", ""))


@dataclass(frozen=True)
class EmitReceipt:
    """What ``ctx.emit`` returns once the event is durable: its id, whether that id had
    already been accepted on this Connection (then nothing new was stored), and whether the
    event was dropped because the Connection has ingress rules and none matches it (nothing
    stored, no Turn; the orchestrator logs a warning)."""

    id: str
    duplicate: bool = False
    dropped: bool = False


EmitFn = Callable[[ConnectorEvent], Awaitable[EmitReceipt]]
# (event, agent, on_progress) -> a goondan.connectors.asking.TurnAnswer (not imported: it imports
# this)
AskFn = Callable[..., Awaitable[Any]]  # (event, agent, on_progress, *, wait_for_approval=)
# (approval id, approve, by, via, args, note, reason) -> {status, decided, decidedBy, via}
DecideFn = Callable[[str, bool, str, str, JsonObject | None, str | None, str | None],
                    Awaitable[JsonObject]]
# (the approval's listing row, the input event's properties) -> None: announce it
ApprovalHandler = Callable[[JsonObject, dict[str, Any]], Awaitable[None]]


class ConnectorContext:
    """What a connector's ``run(ctx)`` receives (``async def run(ctx)``, or a plain ``def run(ctx)``
    that goondan runs in a thread of its own — Decision 18).

    * ``config`` / ``secrets``: the Connection's resolved values as strings (secrets are
      registered with :mod:`goondan.secrets`, so a logged secret prints as ``***``).
    * ``logger``: ``goondan.connector.<connection>``.
    * ``state_dir``: a directory under the state root owned by this Connection, for cursors
      such as a Telegram update offset (write them atomically).
    * ``await emit(event)``: accepts a :class:`ConnectorEvent` or its wire dict; returns an
      :class:`EmitReceipt` after the durable append. Invalid events raise
      :class:`ConnectorEventError` (nothing is stored).
    * ``emit_sync(event)``: the same for a sync ``run`` (from its thread; blocks until the
      receipt is back).
    * ``await ask(event, agent=None, on_progress=None)``: emit and wait for the Turn's answer,
      a :class:`goondan.connectors.asking.TurnAnswer`; cancelling it cancels the Turn.
      With ``wait_for_approval`` a Turn that parks on an approval answers only once it resumed
      and ended; the wait shows as an ``approval.requested`` progress event.
    * ``agents`` (name → ``spec.description`` or ``""``, in the Swarm's order) and
      ``entry_agent``: the Swarm the Connection is bound to.
    * ``stopping``: a :class:`threading.Event` set when the connector is told to stop; a sync
      ``run`` watches it and returns (an async ``run`` is cancelled instead).
    * ``on_approval(handler)``: ``await handler(approval, properties)`` is called when a turn
      whose input came from this Connection waits for a person (``approval``: the listing row
      of docs/approvals.md; ``properties``: the input event's properties, where to announce it).
    * ``await decide_approval(id, approve=, by=, via=, args=, note=, reason=)``: store a
      decision a person took here (as ``goondan approvals`` does); the parked turn resumes.
      Returns ``{id, status, decided, decidedBy, via}`` (``decided`` false: an earlier decision
      stands); raises
      :class:`goondan.errors.ConnectorError` when the orchestrator refuses it.
    """

    def __init__(
        self,
        *,
        connection_name: str,
        connector_name: str,
        config: Mapping[str, str],
        secrets: Mapping[str, str],
        emit: EmitFn,
        state_dir: Path,
        ask: AskFn | None = None,
        decide: DecideFn | None = None,
        agents: Mapping[str, str] | None = None,
        entry_agent: str = "",
        logger: logging.Logger | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.connection_name = connection_name
        self.connector_name = connector_name
        self.config: dict[str, str] = dict(config)
        self.secrets: dict[str, str] = dict(secrets)
        self.state_dir = state_dir
        self.logger = logger or logging.getLogger(f"goondan.connector.{connection_name}")
        self.stopping = threading.Event()
        self._emit = emit
        self._ask = ask
        self._decide = decide
        self.approval_handler: ApprovalHandler | None = None
        self.agents: dict[str, str] = dict(agents or {})
        self.entry_agent = entry_agent
        self._loop = loop

    def __repr__(self) -> str:
        return (
            f"<ConnectorContext connection={self.connection_name!r} "
            f"connector={self.connector_name!r} config={sorted(self.config)} "
            f"secrets={sorted(self.secrets)}>"
        )

    async def emit(self, event: ConnectorEvent | Mapping[str, Any]) -> EmitReceipt:
        """Hand ``event`` to the orchestrator; returns once it is durably accepted."""
        try:
            parsed = event if isinstance(event, ConnectorEvent) else ConnectorEvent.from_dict(event)
        except ConnectorEventError as err:
            self.logger.warning("invalid event dropped: %s", err.message)
            raise
        return await self._emit(parsed)

    async def ask(self, event: ConnectorEvent | Mapping[str, Any], *, agent: str | None = None,
                  on_progress: Callable[[JsonObject], None] | None = None,
                  wait_for_approval: bool = False) -> Any:
        """Emit ``event`` and wait until its Turn ended; returns a
        :class:`goondan.connectors.asking.TurnAnswer` (the agent's final text, or the error that
        ended the Turn). ``agent`` takes the entry agent's place in the Connection's routing
        (the agent of a rule without ``agentRef``, and of every event when it has no rules).
        ``on_progress`` gets the Turn's step and tool events; cancelling the call cancels the
        Turn (docs/connectors.md "Waiting for the answer")."""
        if self._ask is None:
            raise RuntimeError(
                "ctx.ask needs a running swarm (it is set when goondan runs the connector)"
            )
        try:
            parsed = event if isinstance(event, ConnectorEvent) else ConnectorEvent.from_dict(event)
        except ConnectorEventError as err:
            self.logger.warning("invalid event dropped: %s", err.message)
            raise
        if wait_for_approval:
            return await self._ask(parsed, agent, on_progress, wait_for_approval=True)
        return await self._ask(parsed, agent, on_progress)

    def on_approval(self, handler: ApprovalHandler) -> None:
        """Announce approval requests with ``handler`` (see the class docstring)."""
        self.approval_handler = handler

    async def decide_approval(self, approval: str, *, approve: bool, by: str, via: str,
                              args: JsonObject | None = None, note: str | None = None,
                              reason: str | None = None) -> JsonObject:
        """Store a decision for ``approval`` through the orchestrator (class docstring)."""
        if self._decide is None:
            raise RuntimeError(
                "decide_approval needs a running swarm (it is set when goondan runs the connector)"
            )
        return await self._decide(approval, approve, by, via, args, note, reason)

    def emit_sync(self, event: ConnectorEvent | Mapping[str, Any]) -> EmitReceipt:
        """:meth:`emit` for a sync ``run(ctx)``: called from its thread, it blocks until the
        event is durably accepted and returns the receipt."""
        loop = self._loop
        if loop is None:
            raise RuntimeError(
                "emit_sync needs the connector's event loop "
                "(it is set when goondan runs the connector)"
            )
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            raise RuntimeError(
                "emit_sync blocks: call it from a sync run(ctx), use 'await ctx.emit(...)' here"
            )
        return asyncio.run_coroutine_threadsafe(self.emit(event), loop).result()
