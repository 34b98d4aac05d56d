"""In-process event bus (``api.events``) and the runtime event names (docs/runtime.md
"Runtime events").

``EventBus.on(name, fn)`` returns an unsubscribe callable (docs/extensions.md "Events");
``EventBus.emit(name, *args)`` calls every listener of ``name`` in subscription order with
``*args``. A listener that raises is logged on ``goondan.pipeline.events`` and the others still
run. ``emit`` is synchronous and never raises for a listener's fault.

Async listeners (``async def``) are *scheduled* as tasks on the running loop, in order, and
``emit`` does not wait for them; ``await bus.drain()`` waits until every scheduled listener
task has finished (the runtime drains at turn end and at shutdown). Emitting with an async
listener and no running loop logs a warning and skips that listener.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from goondan.types import JsonObject, now_iso

__all__ = [
    "RUNTIME_EVENTS",
    "STEP_COMPLETED",
    "STEP_FAILED",
    "STEP_STARTED",
    "TOOL_CALLED",
    "TOOL_COMPLETED",
    "TOOL_FAILED",
    "TURN_COMPLETED",
    "TURN_FAILED",
    "TURN_STARTED",
    "EventBus",
    "Listener",
    "runtime_event",
]

TURN_STARTED = "turn.started"
TURN_COMPLETED = "turn.completed"
TURN_FAILED = "turn.failed"
STEP_STARTED = "step.started"
STEP_COMPLETED = "step.completed"
STEP_FAILED = "step.failed"
TOOL_CALLED = "tool.called"
TOOL_COMPLETED = "tool.completed"
TOOL_FAILED = "tool.failed"

RUNTIME_EVENTS: tuple[str, ...] = (
    TURN_STARTED, TURN_COMPLETED, TURN_FAILED,
    STEP_STARTED, STEP_COMPLETED, STEP_FAILED,
    TOOL_CALLED, TOOL_COMPLETED, TOOL_FAILED,
)

Listener = Callable[..., Any]
_log = logging.getLogger("goondan.pipeline.events")


def runtime_event(
    type: str,
    *,
    agent_name: str,
    trace_id: str,
    span_id: str,
    parent_span_id: str | None = None,
    **fields: Any,
) -> JsonObject:
    """Payload of a runtime event: ``{type, timestamp, agentName, traceId, spanId, ...}``.

    ``fields`` are given in camelCase already (``turnId=..., stepIndex=...``), as they appear on
    the bus and in logs (docs/runtime.md "Runtime events").
    """
    payload: JsonObject = {
        "type": type,
        "timestamp": now_iso(),
        "agentName": agent_name,
        "traceId": trace_id,
        "spanId": span_id,
    }
    if parent_span_id is not None:
        payload["parentSpanId"] = parent_span_id
    payload.update(fields)
    return payload


def _label(fn: Listener) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


class EventBus:
    """Publish/subscribe by event name; one bus per agent instance."""

    def __init__(self, *, logger: logging.Logger | None = None) -> None:
        self._listeners: dict[str, tuple[Listener, ...]] = {}
        self._any: tuple[Listener, ...] = ()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._log = logger or _log

    def __repr__(self) -> str:
        count = sum(len(v) for v in self._listeners.values())
        return (
            f"<EventBus events={len(self._listeners)} listeners={count} pending={len(self._tasks)}>"
        )

    def on(self, name: str, fn: Listener) -> Callable[[], None]:
        """Subscribe ``fn`` to ``name``; the returned callable unsubscribes (idempotent)."""
        if not isinstance(name, str) or not name:
            raise TypeError("event name must be a non-empty string")
        if not callable(fn):
            raise TypeError(f"event listener must be callable, got {type(fn).__name__}")
        # Tuples are replaced, never mutated, so an emit in progress keeps its snapshot.
        self._listeners[name] = (*self._listeners.get(name, ()), fn)
        entry_fn = fn

        def unsubscribe() -> None:
            current = self._listeners.get(name, ())
            if entry_fn in current:
                items = list(current)
                items.remove(entry_fn)
                if items:
                    self._listeners[name] = tuple(items)
                else:
                    self._listeners.pop(name, None)

        return unsubscribe

    def on_any(self, fn: Callable[..., Any]) -> Callable[[], None]:
        """Subscribe ``fn(name, *args)`` to every event (used by ``Runtime.subscribe``)."""
        if not callable(fn):
            raise TypeError(f"event listener must be callable, got {type(fn).__name__}")
        self._any = (*self._any, fn)

        def unsubscribe() -> None:
            if fn in self._any:
                items = list(self._any)
                items.remove(fn)
                self._any = tuple(items)

        return unsubscribe

    def listener_count(self, name: str | None = None) -> int:
        """Listeners of ``name`` (or of every name, plus catch-all listeners)."""
        if name is not None:
            return len(self._listeners.get(name, ()))
        return sum(len(v) for v in self._listeners.values()) + len(self._any)

    def wants(self, name: str) -> bool:
        """True when an :meth:`emit` of ``name`` would reach a listener (skip building payloads)."""
        return name in self._listeners or bool(self._any)

    def emit(self, name: str, *args: Any) -> None:
        """Call every listener of ``name`` with ``*args``, in subscription order; never raises."""
        for fn in self._listeners.get(name, ()):
            self._call(name, fn, args)
        for fn in self._any:
            self._call(name, fn, (name, *args))

    def _call(self, name: str, fn: Listener, args: tuple[Any, ...]) -> None:
        try:
            result = fn(*args)
        except Exception:
            self._log.exception("event listener %s for %r failed", _label(fn), name)
            return
        if inspect.iscoroutine(result):
            self._schedule(name, fn, result)

    def _schedule(self, name: str, fn: Listener, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            coro.close()
            self._log.warning(
                "async event listener %s for %r skipped: no running event loop", _label(fn), name
            )
            return
        task = loop.create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                exc = t.exception()
                self._log.error(
                    "async event listener %s for %r failed: %s", _label(fn), name, exc,
                    exc_info=exc,
                )

        task.add_done_callback(done)

    @property
    def pending(self) -> int:
        """Number of async listener tasks still running."""
        return len(self._tasks)

    async def drain(self) -> None:
        """Wait until every scheduled async listener has finished (failures are logged)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def clear(self) -> None:
        """Remove every listener (pending async tasks keep running)."""
        self._listeners.clear()
        self._any = ()
