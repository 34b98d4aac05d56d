"""EventBus (seed 004 §13.2 events, §13.2.1 rule 4; runtime.md §9)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from goondan.pipeline import events as ev
from goondan.pipeline.events import EventBus, runtime_event
from tests.support.aio import run


def test_on_returns_an_unsubscribe_callable() -> None:
    """seed 004 §13.2.1 rule 4: api.events.on() returns a function that unsubscribes."""
    bus, got = EventBus(), []
    unsubscribe = bus.on("turn.completed", got.append)
    bus.emit("turn.completed", 1)
    unsubscribe()
    unsubscribe()  # idempotent
    bus.emit("turn.completed", 2)
    assert got == [1]
    assert bus.listener_count("turn.completed") == 0


def test_listeners_run_in_subscription_order_with_all_args() -> None:
    """runtime.md §9: listeners run in order; emit(name, *args) passes every argument."""
    bus, got = EventBus(), []
    bus.on("x", lambda *a: got.append(("first", a)))
    bus.on("x", lambda *a: got.append(("second", a)))
    bus.on("y", lambda *a: got.append(("other", a)))
    bus.emit("x", {"a": 1}, 2)
    assert got == [("first", ({"a": 1}, 2)), ("second", ({"a": 1}, 2))]


def test_a_failing_listener_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """runtime.md §9: one failing listener SHOULD NOT stop the others; the failure is logged."""
    bus, got = EventBus(), []

    def bad(payload: object) -> None:
        raise RuntimeError("listener broke")

    bus.on("e", bad)
    bus.on("e", got.append)
    with caplog.at_level(logging.ERROR, logger="goondan.pipeline.events"):
        bus.emit("e", "payload")
    assert got == ["payload"]
    assert "listener broke" in caplog.text


def test_async_listeners_are_scheduled_and_drained(caplog: pytest.LogCaptureFixture) -> None:
    """seed 004 §13.2 events: async listeners run as tasks; drain() waits; failures are logged."""
    got: list[str] = []

    async def main() -> int:
        bus = EventBus()
        gate = asyncio.Event()

        async def slow(payload: str) -> None:
            await gate.wait()
            got.append(f"slow:{payload}")

        async def broken(payload: str) -> None:
            raise ValueError("async listener broke")

        bus.on("e", slow)
        bus.on("e", broken)
        bus.on("e", lambda p: got.append(f"sync:{p}"))
        bus.emit("e", "p")
        pending = bus.pending
        gate.set()
        await bus.drain()
        assert bus.pending == 0
        return pending

    with caplog.at_level(logging.ERROR, logger="goondan.pipeline.events"):
        assert run(main()) == 2
    assert got == ["sync:p", "slow:p"]
    assert "async listener broke" in caplog.text


def test_async_listener_without_loop_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    """EventBus docs: emitting to an async listener outside a loop logs a warning instead of
    leaking."""
    bus = EventBus()

    async def listener(payload: object) -> None:  # pragma: no cover - never awaited
        raise AssertionError

    bus.on("e", listener)
    with caplog.at_level(logging.WARNING, logger="goondan.pipeline.events"):
        bus.emit("e", 1)
    assert "no running event loop" in caplog.text


def test_unsubscribe_during_emit_keeps_the_snapshot() -> None:
    """runtime.md §9: an emit in progress is not disturbed by (un)subscriptions."""
    bus, got = EventBus(), []
    unsubscribers: list[object] = []

    def first(p: object) -> None:
        got.append("first")
        unsubscribers[0]()  # type: ignore[operator]

    unsubscribers.append(bus.on("e", lambda p: got.append("second")))
    bus.on("e", first)
    bus.emit("e", None)
    bus.emit("e", None)
    assert got == ["second", "first", "first"]


def test_on_any_receives_every_event_name() -> None:
    """Runtime.subscribe support: on_any(fn) gets (name, *args) for every event."""
    bus, got = EventBus(), []
    off = bus.on_any(lambda name, *a: got.append((name, a)))
    bus.emit("turn.started", {"x": 1})
    off()
    bus.emit("turn.completed", {})
    assert got == [("turn.started", ({"x": 1},))]


def test_bad_subscriptions_are_rejected() -> None:
    """seed 004 §13.2 events: on(event: string, handler: function)."""
    bus = EventBus()
    with pytest.raises(TypeError):
        bus.on("", print)
    with pytest.raises(TypeError):
        bus.on("e", 3)  # type: ignore[arg-type]


def test_runtime_event_names_and_payload_shape() -> None:
    """runtime.md §9 / Decision 13: turn/step/tool event names; payload has traceId and spanId."""
    assert ev.RUNTIME_EVENTS == (
        "turn.started", "turn.completed", "turn.failed",
        "step.started", "step.completed", "step.failed",
        "tool.called", "tool.completed", "tool.failed",
    )
    payload = runtime_event(
        ev.TOOL_COMPLETED, agent_name="coder", trace_id="t" * 32, span_id="s" * 16,
        parent_span_id="p" * 16, toolCallId="c1", status="ok",
    )
    assert payload["type"] == "tool.completed" and payload["agentName"] == "coder"
    assert payload["traceId"] == "t" * 32 and payload["spanId"] == "s" * 16
    assert payload["parentSpanId"] == "p" * 16 and payload["toolCallId"] == "c1"
    assert payload["timestamp"].endswith("Z")
