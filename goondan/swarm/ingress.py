"""Ingress: accept a Connection's events durably, route them, hand them to the orchestrator.

:meth:`Ingress.accept` is what every ``ctx.emit`` ends in (over IPC from the connector
process) and what ``goondan run``'s terminal front-end calls for the ``cli`` Connection:

1. the event id is checked against the Connection's inbox (a repeated id is a *duplicate*:
   nothing is stored or delivered, the receipt says so);
2. the event is routed (:func:`goondan.connectors.routing.route_event`); an event that
   matches none of the Connection's rules is dropped here with a warning (nothing stored);
3. the record is appended and flushed to the inbox (:class:`ConnectionInbox`) — from here on
   it survives a crash of any process;
4. it becomes an :class:`~goondan.types.AgentEvent` (its own Turn, a new traceId, source
   ``{kind: connector, name: <connector>}``, properties + ``connection_name`` +
   ``connector_name`` for the ``[goondan_context]`` header, and the start marker of the inbox's
   queue, :func:`goondan.swarm.durable_inputs.start_marker`) queued on
   (agent, instanceKey) by :meth:`Orchestrator.submit`.

The append and the queueing happen with no suspension point in between (``Orchestrator.submit``
queues before its first ``await``), so the orchestrator's queue order is the inbox order.
:meth:`Ingress.open` replays the pending records of every inbox in that order before any new event
is accepted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from goondan.connectors.event import ConnectorEvent, EmitReceipt, event_text
from goondan.connectors.inbox import ConnectionInbox, InboxRecord
from goondan.connectors.routing import route_event
from goondan.connectors.spec import ConnectionSpec
from goondan.errors import AgentError, ConnectorEventError, IpcError
from goondan.runtime.events import IngressReceived
from goondan.swarm.durable_inputs import start_marker
from goondan.swarm.orchestrator import Orchestrator
from goondan.types import AgentEvent, new_span_id, new_trace_id

__all__ = ["Accepted", "Ingress", "agent_event_for"]

_log = logging.getLogger("goondan.swarm.ingress")


@dataclass(frozen=True)
class Accepted:
    """The outcome of :meth:`Ingress.accept`: the receipt and, unless it was a duplicate or
    dropped, the routed agent and event."""

    receipt: EmitReceipt
    agent: str | None = None
    event: AgentEvent | None = None


def agent_event_for(record: InboxRecord, spec: ConnectionSpec,
                    inbox: ConnectionInbox) -> AgentEvent:
    """The AgentEvent of a record of ``inbox`` (docs/connectors.md "Delivery guarantee")."""
    event = record.event
    properties = {
        **event.properties,
        "connection_name": spec.name,
        "connector_name": spec.connector,
    }
    # The ingress span (an ``ingress.received`` event) is the parent of the turn it starts:
    # the trace's tree begins where the event entered the swarm (docs/observability.md).
    metadata: dict[str, object] = {"properties": properties, "connectorEventId": event.id}
    return AgentEvent(
        type=event.name,
        input=event_text(event),
        instance_key=record.instance_key,
        source={"kind": "connector", "name": spec.connector},
        trace_id=new_trace_id(),
        metadata=metadata,
        parent_span_id=new_span_id(),
        start_marker=start_marker(inbox.queue, inbox.scope, record.agent, record.instance_key,
                                  event.id),
    )


class Ingress:
    """Accepts the events of the running Swarm's Connections (see the module docstring)."""

    def __init__(
        self, orchestrator: Orchestrator, connections: Sequence[ConnectionSpec],
        directories: dict[str, Path], *, entry_agent: str, logger: logging.Logger | None = None,
        inbox_of: Callable[[str, Path], ConnectionInbox] | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self.connections = {c.name: c for c in connections}
        self.entry_agent = entry_agent
        # a Connection's inbox: the JSONL queue of its directory, or ``inbox_of``'s (the store's)
        self._inbox_of = inbox_of or (lambda _name, directory: ConnectionInbox(directory))
        self.inboxes = {c.name: self._inbox_of(c.name, directories[c.name]) for c in connections}
        self.logger = logger or _log
        self.accepted = 0
        self.duplicates = 0

    def __repr__(self) -> str:
        return f"<Ingress connections={sorted(self.connections)} accepted={self.accepted}>"

    async def open(self) -> int:
        """Open every inbox and queue its pending events in order; returns how many."""
        replayed = 0
        for name in list(self.inboxes):
            replayed += await self._open_inbox(name)
        return replayed

    async def _open_inbox(self, name: str) -> int:
        inbox = self.inboxes[name]
        pending = inbox.open()
        replayed = 0
        for record in pending:
            if await self._submit(self.connections[name], inbox, record) is not None:
                replayed += 1
        if pending:
            self.logger.info(
                "Connection %s: %d accepted event(s) had not started; delivering them", name,
                len(pending), extra={"event": "ingress.replayed", "connection": name,
                                     "count": len(pending)},
            )
        return replayed

    async def add_connection(self, spec: ConnectionSpec, directory: Path) -> int:
        """Accept events of a Connection added while running (``--watch``); opens its inbox and
        delivers what it holds, like :meth:`open`. Returns how many events were delivered."""
        self.connections[spec.name] = spec
        self.inboxes[spec.name] = self._inbox_of(spec.name, directory)
        return await self._open_inbox(spec.name)

    def update_connection(self, spec: ConnectionSpec) -> None:
        """New rules for a Connection (``--watch``); events accepted before keep their route."""
        self.connections[spec.name] = spec

    def remove_connection(self, name: str) -> None:
        """Stop accepting events of a Connection that left the bundle; closes its inbox (its
        pending events wait there until the Connection comes back)."""
        self.connections.pop(name, None)
        inbox = self.inboxes.pop(name, None)
        if inbox is not None:
            inbox.close()

    def close(self) -> None:
        """Close the inboxes."""
        for inbox in self.inboxes.values():
            inbox.close()

    def state_dir(self, connection: str) -> Path:
        """The connector's ``ctx.state_dir``."""
        return self.inboxes[connection].state_dir

    async def accept(self, connection: str, raw: ConnectorEvent | object, *, submit: bool = True,
                     default_agent: str | None = None) -> Accepted:
        """Durably accept one event of ``connection`` (see the module docstring).

        With ``submit=False`` the routed event is returned instead of queued (the caller sends
        it, e.g. as a request whose answer it prints). ``default_agent`` replaces the entry
        agent in the routing (an MCP tool names its agent). Raises
        :class:`ConnectorEventError` for an invalid event (nothing stored)."""
        spec = self.connections.get(connection)
        if spec is None:
            raise ConnectorEventError(f"unknown Connection {connection!r}")
        event = raw if isinstance(raw, ConnectorEvent) else ConnectorEvent.from_dict(raw)
        inbox = self.inboxes[connection]
        if inbox.seen(event.id):
            self.duplicates += 1
            return Accepted(EmitReceipt(event.id, duplicate=True))
        route = route_event(event, spec.rules, default_agent or self.entry_agent)
        if route is None:  # rules, none matching: dropped (Decision 15)
            self.logger.warning(
                "Connection %s: event %s (%s) matches no ingress rule; dropped",
                connection,
                event.id,
                event.name,
                extra={
                    "event": "ingress.unrouted",
                    "connection": connection,
                    "eventName": event.name,
                },
            )
            return Accepted(EmitReceipt(event.id, dropped=True))
        if route.agent not in self.orchestrator.agents:
            raise ConnectorEventError(
                f"Connection {connection!r} routes event {event.name!r} to agent {route.agent!r}, "
                "which is not part of the running Swarm",
            )
        record = inbox.append(event, route.agent, route.instance_key)
        self.accepted += 1
        if not submit:
            agent_event = agent_event_for(record, spec, inbox)
            self._received(spec, record, agent_event)
            return Accepted(EmitReceipt(event.id), route.agent, agent_event)
        return Accepted(EmitReceipt(event.id), route.agent,
                        await self._submit(spec, inbox, record, received=True))

    def _received(self, spec: ConnectionSpec, record: InboxRecord, event: AgentEvent) -> None:
        """Report ``ingress.received`` to the orchestrator's event sinks (the trace's root span)."""
        self.orchestrator.publish_event(IngressReceived(
            trace_id=event.trace_id or "", span_id=event.parent_span_id or "",
            agent_name=record.agent, instance_key=record.instance_key,
            source=spec.name, event_id=record.event.id, event_type=record.event.name,
            target=record.agent,
        ))

    async def _submit(self, spec: ConnectionSpec, inbox: ConnectionInbox, record: InboxRecord,
                      *, received: bool = False) -> AgentEvent | None:
        event = agent_event_for(record, spec, inbox)
        if received:
            self._received(spec, record, event)
        try:
            # submit queues before its first suspension point: queue order is inbox order.
            await self.orchestrator.submit(record.agent, event)
        except (AgentError, IpcError) as err:
            self.logger.warning(
                "Connection %s: event %s (%s) not delivered: %s", spec.name, record.event.id,
                record.event.name, err.message,
                extra={"event": "ingress.undeliverable", "connection": spec.name},
            )
            return None
        return event
