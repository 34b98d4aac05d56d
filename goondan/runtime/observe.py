"""Event sinks, and the observer that delivers one agent instance's runtime events to them.

Every turn, step, LLM call and tool call is a :class:`goondan.pipeline.tracing.Span`
(OpenTelemetry-compatible ids), reported as typed events (``goondan/runtime/events.py``). The
:class:`RuntimeObserver` stamps each event with the agent and instance key and hands it to its
sinks, in order:

* :class:`BusSink` — the extension event bus (``api.events.on``), so extensions can react;
* every sink added with :meth:`RuntimeObserver.add_sink` (typed: a persisted event log, an
  exporter) and every payload listener of :meth:`RuntimeObserver.subscribe` (the embedding
  API's ``Runtime.subscribe``, the REPL renderer, an agent process forwarding to the
  orchestrator) — each a :class:`PayloadSink`;
* the ``goondan.runtime`` logger at DEBUG, one structured record per event (secrets masked by
  the logger's filter).

:class:`TracedAgentCalls` wraps a turn's agents API so each agent request is an
``agentCall`` span. A sink implements :class:`EventSink`: ``on_span_start`` / ``on_span_end`` /
``on_event`` (a point event such as ``llm.delta``), like the OpenAI Agents SDK's
``TracingProcessor``. Payload sinks and the bus see only the documented event types (docs/runtime.md
"Runtime events"). A failing sink never stops the others or the turn.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from goondan.pipeline.tracing import CURRENT_SPAN, Span
from goondan.runtime.events import AgentAnswered, AgentRequested, RuntimeEvent, span_ids
from goondan.types import JsonObject

__all__ = [
    "BusSink",
    "EventListener",
    "EventSink",
    "PayloadSink",
    "RuntimeObserver",
    "TracedAgentCalls",
]

EventListener = Callable[[JsonObject], Any]


class _Bus(Protocol):
    def wants(self, name: str) -> bool: ...

    def emit(self, name: str, *args: Any) -> None: ...


class EventSink:
    """Receives runtime events; override the hooks you need (all default to doing nothing).

    :meth:`handle` dispatches by the event's phase; a sink that wants every event the same way
    may override ``handle`` itself. ``skips`` names the event types the sink ignores: when every
    sink skips a type outside the documented stream (``llm.started``), the runtime does not
    build those events at all.
    """

    skips: frozenset[str] = frozenset()

    def handler_for(
        self, event_class: type[RuntimeEvent]
    ) -> Callable[[RuntimeEvent], object] | None:
        """What the observer calls with each event of ``event_class`` (``None``: nothing).

        Asked once per class by :class:`RuntimeObserver`: by default :meth:`handle`, or
        ``None`` when the sink skips every type of the class. A sink may return another
        callable that does the same as ``handle`` for that class."""
        if self.skips.issuperset(event_class.TYPES):
            return None
        return self.handle

    def handle(self, event: RuntimeEvent) -> None:
        """Deliver ``event`` to the hook of its phase."""
        phase = event.phase
        if phase == "start":
            self.on_span_start(event)
        elif phase == "end":
            self.on_span_end(event)
        else:
            self.on_event(event)

    def on_span_start(self, event: RuntimeEvent) -> None:
        """A turn, step, LLM call, tool call or agent request started."""

    def on_span_end(self, event: RuntimeEvent) -> None:
        """A span ended (``failed`` on the event says how)."""

    def on_event(self, event: RuntimeEvent) -> None:
        """A point event: a streamed fragment (``llm.delta``) or an ingress."""


class BusSink(EventSink):
    """Publishes the documented events on the extension bus as ``bus.emit(type, payload)``."""

    def __init__(self, bus: _Bus) -> None:
        self.bus = bus

    def handle(self, event: RuntimeEvent) -> None:
        if event.public:
            name = event.type
            if self.bus.wants(name):  # no payload built when nobody listens
                self.bus.emit(name, event.to_dict())


class PayloadSink(EventSink):
    """Calls ``listener(payload)`` with the wire form of each documented event.

    With ``everything`` it also gets the events outside the documented stream (``llm.*``,
    ``agent.*``): an agent process forwards those to the orchestrator's sinks. An ``async def``
    listener's coroutine runs as a task (kept alive, failures logged).
    """

    def __init__(self, listener: EventListener, *, everything: bool = False,
                 logger: logging.Logger | None = None) -> None:
        self.listener = listener
        self.everything = everything
        self.logger = logger or logging.getLogger("goondan.runtime")
        self._tasks: set[asyncio.Future[Any]] = set()

    def handle(self, event: RuntimeEvent) -> None:
        if not (event.public or self.everything):
            return
        outcome = self.listener(event.to_dict())
        if inspect.isawaitable(outcome):
            self._schedule(outcome, event.type)

    def _schedule(self, outcome: Awaitable[Any], event_type: str) -> None:
        task = asyncio.ensure_future(outcome)
        self._tasks.add(task)

        def done(finished: asyncio.Future[Any]) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                self.logger.error("runtime event subscriber failed for %s: %s",
                                  event_type, finished.exception())

        task.add_done_callback(done)


class RuntimeObserver:
    """Stamps one instance's runtime events and fans them out to its sinks (see module doc)."""

    def __init__(
        self,
        agent_name: str,
        instance_key: str,
        *,
        bus: _Bus | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.bus = bus
        self.logger = logger or logging.getLogger("goondan.runtime")
        self._bus_sink = BusSink(bus) if bus is not None else None
        self._sinks: tuple[EventSink, ...] = ()
        # event class -> the sinks' handlers for it (EventSink.handler_for), made on first use
        self._routes: dict[type[RuntimeEvent], tuple[Callable[[RuntimeEvent], object], ...]] = {}
        self.traced = False
        self._unwanted: frozenset[str] = frozenset()

    def add_sink(self, sink: EventSink) -> Callable[[], None]:
        """Deliver every event to ``sink`` from now on; returns the function that removes it."""
        self._set_sinks((*self._sinks, sink))

        def remove() -> None:
            if sink in self._sinks:
                self._set_sinks(tuple(s for s in self._sinks if s is not sink))

        return remove

    def _set_sinks(self, sinks: tuple[EventSink, ...]) -> None:
        self._sinks = sinks
        self._routes = {}
        # Only a typed sink (or a payload sink asking for everything) receives the events
        # outside the documented stream; without one the runtime does not build them at all.
        typed = [s for s in sinks if not isinstance(s, PayloadSink) or s.everything]
        self.traced = bool(typed)
        self._unwanted = frozenset.intersection(*(s.skips for s in typed)) if typed else frozenset()

    def wants(self, event_type: str) -> bool:
        """Whether an event of ``event_type`` outside the documented stream reaches any sink
        (the documented events always go to the bus, the payload listeners and the log)."""
        return self.traced and event_type not in self._unwanted

    def subscribe(self, listener: EventListener, *, everything: bool = False) -> Callable[[], None]:
        """Call ``listener(payload)`` for every documented event (``everything``: all events)."""
        return self.add_sink(PayloadSink(listener, everything=everything, logger=self.logger))

    def emit(self, event: RuntimeEvent) -> None:
        """Publish ``event`` (stamped with this instance) to the bus, the sinks and the log."""
        event.agent_name = self.agent_name
        event.instance_key = self.instance_key
        if self._bus_sink is not None:
            try:
                self._bus_sink.handle(event)
            except Exception:  # a listener's bug must not fail the turn
                self.logger.exception("event bus listener failed for %s", event.type)
        handlers = self._routes.get(type(event))
        if handlers is None:
            handlers = self._route(type(event))
        for handle in handlers:
            try:
                handle(event)
            except Exception:
                self.logger.exception("runtime event subscriber failed for %s", event.type)
        # Streamed fragments are far too chatty for the log; sinks still get them.
        if event.public and event.phase != "point" and self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug("%s", event.type, extra={"goondan": event.to_dict()})

    def _route(
        self, event_class: type[RuntimeEvent]
    ) -> tuple[Callable[[RuntimeEvent], object], ...]:
        handlers = tuple(
            h for h in (s.handler_for(event_class) for s in self._sinks) if h is not None
        )
        self._routes[event_class] = handlers
        return handlers

    def __repr__(self) -> str:
        return (
            f"RuntimeObserver(agent={self.agent_name!r}, instance={self.instance_key!r}, "
            f"sinks={len(self._sinks)})"
        )


class TracedAgentCalls:
    """An agents API (``ctx.agents`` / ``ToolContext.runtime``) whose requests are ``agentCall``
    spans.

    ``AgentInstance`` wraps whatever its ``agents_factory`` returned, so each ``request``
    reports ``agent.requested`` and ``agent.answered`` / ``agent.failed`` to the instance's
    event sinks (docs/runtime.md "Typed events and sinks"), whichever router carries it.
    """

    def __init__(self, api: Any, emit: Callable[[RuntimeEvent], None], parent: Span) -> None:
        self.api = api
        self._emit = emit
        self._parent = parent

    def __repr__(self) -> str:
        return f"<TracedAgentCalls {self.api!r}>"

    async def request(self, target: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``api.request(...)`` inside an ``agentCall`` span."""
        current = CURRENT_SPAN.get()
        parent = (
            current
            if current is not None and current.trace_id == self._parent.trace_id
            else self._parent
        )
        span = parent.child(f"request {target}", "agentCall")
        token = CURRENT_SPAN.set(span)
        turn_id = getattr(self.api, "turn_id", None)
        self._emit(AgentRequested(
            **span_ids(span), turn_id=turn_id, target=target,
            target_instance_key=kwargs.get("instance_key"),
        ))
        try:
            answer: dict[str, Any] = await self.api.request(target, *args, **kwargs)
        except BaseException as exc:
            cancelled = isinstance(exc, asyncio.CancelledError)
            self._emit(AgentAnswered(
                **span_ids(span), failed=True, turn_id=turn_id, target=target,
                latency_ms=span.finish(error=exc).duration_ms,
                error_code="E_TURN_CANCELLED" if cancelled else getattr(exc, "code", "E_AGENT"),
                error_message="cancelled" if cancelled else str(exc),
            ))
            raise
        finally:
            CURRENT_SPAN.reset(token)
        correlation = answer.get("correlationId") if isinstance(answer, dict) else None
        self._emit(AgentAnswered(
            **span_ids(span), turn_id=turn_id, target=target,
            correlation_id=correlation if isinstance(correlation, str) else None,
            latency_ms=span.finish().duration_ms,
        ))
        return answer

    async def send(self, target: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``api.send(...)`` (fire and forget: no span)."""
        result: dict[str, Any] = await self.api.send(target, *args, **kwargs)
        return result

    async def spawn(self, target: str, **kwargs: Any) -> dict[str, Any]:
        """``api.spawn(...)``."""
        result: dict[str, Any] = await self.api.spawn(target, **kwargs)
        return result

    async def list(self, **kwargs: Any) -> dict[str, Any]:
        """``api.list(...)``."""
        result: dict[str, Any] = await self.api.list(**kwargs)
        return result

    async def catalog(self) -> dict[str, Any]:
        """``api.catalog()``."""
        result: dict[str, Any] = await self.api.catalog()
        return result
