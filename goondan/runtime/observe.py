"""Runtime events and tracing spans for one agent instance (runtime.md §9, Decision 13).

Every turn, step and tool call is a :class:`goondan.pipeline.tracing.Span`
(OpenTelemetry-compatible ids: the turn's ``traceId``, a fresh ``spanId`` and the enclosing
``parentSpanId``), and every event carries those ids. :class:`RuntimeObserver` publishes the lifecycle events (``turn.started`` ... ``tool.failed``, plus ``llm.delta`` for
streamed text) to three audiences at once:

* the extension event bus (``api.events.on``), so extensions can react;
* direct subscribers (the embedding API's ``Runtime.subscribe``, the REPL renderer);
* the ``goondan.runtime`` logger, as one structured record per event (secrets masked by the
  logger's filter).

A failing listener never stops the others or the turn.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from goondan.types import JsonObject, now_iso

__all__ = ["EventListener", "RuntimeObserver"]

EventListener = Callable[[JsonObject], Any]

# Streamed fragments are far too chatty for the log; subscribers still get them.
_UNLOGGED = frozenset({"llm.delta"})


class _Bus(Protocol):
    def emit(self, name: str, *args: Any) -> None: ...


class RuntimeObserver:
    """Fans runtime events out to the extension bus, subscribers and the log."""

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
        self._listeners: list[EventListener] = []
        self._tasks: set[asyncio.Future[Any]] = set()

    def subscribe(self, listener: EventListener) -> Callable[[], None]:
        """Call ``listener(payload)`` for every event; returns the unsubscribe function."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def emit(self, event_type: str, fields: JsonObject) -> None:
        """Publish one event: ``{type, timestamp, agentName, instanceKey, **fields}``."""
        payload: JsonObject = {
            "type": event_type,
            "timestamp": now_iso(),
            "agentName": self.agent_name,
            "instanceKey": self.instance_key,
        }
        payload.update(fields)
        if self.bus is not None:
            try:
                self.bus.emit(event_type, payload)
            except Exception:  # a listener's bug must not fail the turn
                self.logger.exception("event bus listener failed for %s", event_type)
        for listener in tuple(self._listeners):
            try:
                outcome = listener(payload)
            except Exception:
                self.logger.exception("runtime event subscriber failed for %s", event_type)
                continue
            if inspect.isawaitable(outcome):
                self._schedule(outcome, event_type)
        if event_type not in _UNLOGGED and self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug("%s", event_type, extra={"goondan": payload})

    def _schedule(self, outcome: Awaitable[Any], event_type: str) -> None:
        """Run an ``async def`` subscriber's coroutine as a task (kept alive, errors logged)."""
        task = asyncio.ensure_future(outcome)
        self._tasks.add(task)

        def done(finished: asyncio.Future[Any]) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                self.logger.error("runtime event subscriber failed for %s: %s",
                                  event_type, finished.exception())

        task.add_done_callback(done)

    def __repr__(self) -> str:
        return (
            f"RuntimeObserver(agent={self.agent_name!r}, instance={self.instance_key!r}, "
            f"listeners={len(self._listeners)})"
        )
