"""Runtime subscribers may be ``async def``; a failed extension-state save never costs a turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.runtime.events import RuntimeEvent
from tests.support.aio import run
from tests.support.runtime_harness import BASIC


def test_async_subscriber_receives_every_event(state_root: Path) -> None:
    model = ScriptedModel(["hello"])
    seen: list[str] = []

    async def listener(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        seen.append(payload["type"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            instance = await rt.instance("plain")
            instance.subscribe(listener)
            await rt.run_turn("plain", "hi")
            for _ in range(50):  # the subscriber's tasks run on this loop
                if "turn.completed" in seen:
                    break
                await asyncio.sleep(0.01)
        assert (
            seen[0] == "turn.started" and "step.completed" in seen and seen[-1] == "turn.completed"
        )

    run(main())


def test_failed_extension_state_save_keeps_the_turn_result_and_retries(state_root: Path) -> None:
    model = ScriptedModel(["one", "two"])

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"onion": model}) as rt:
            instance = await rt.instance("onion")
            loaded = instance.extensions.get("outer")
            assert loaded is not None
            await loaded.api.state.set({"n": 1})
            attempts: list[str] = []
            store = instance.store
            save = store.save_extension_state

            def failing(name: str, value: Any) -> bool:
                attempts.append(name)
                raise OSError("disk full")

            store.save_extension_state = failing  # type: ignore[method-assign]
            first = await rt.run_turn("onion", "hi")
            assert (first.finish_reason, first.text) == ("text_response", "one")
            assert attempts == ["outer"]
            store.save_extension_state = save  # type: ignore[method-assign]
            second = await rt.run_turn("onion", "again")
            assert second.text == "two"
            saved = store.paths.extension("outer")
            assert json.loads(saved.read_text(encoding="utf-8")) == {"n": 1}

    run(main())


def test_the_observer_routes_each_event_class_to_the_sinks_that_want_it() -> None:
    """Skipped types never reach a sink; ``handler_for`` picks the callable; a sink added or
    removed later changes the routes of classes already seen."""
    from goondan.runtime.events import StepEnded, StepStarted
    from goondan.runtime.observe import EventSink, RuntimeObserver

    seen: list[tuple[str, str]] = []

    class Skipping(EventSink):
        skips = frozenset({"step.started"})

        def handle(self, event: RuntimeEvent) -> None:
            seen.append(("skipping", event.type))

    class Fast(EventSink):
        def handler_for(self, event_class: type[RuntimeEvent]) -> Any:
            return lambda event: seen.append(("fast", event.type))

        def handle(self, event: RuntimeEvent) -> None:  # not called: handler_for answers
            seen.append(("slow", event.type))

    def step(started: bool) -> RuntimeEvent:
        ids = {
            "trace_id": "a" * 32,
            "span_id": "b" * 16,
            "turn_id": "t",
            "step_id": "s",
            "step_index": 0,
        }
        return StepStarted(**ids) if started else StepEnded(**ids)

    observer = RuntimeObserver("agent", "key")
    observer.add_sink(Skipping())
    observer.emit(step(True))
    observer.emit(step(False))
    remove = observer.add_sink(Fast())
    observer.emit(step(True))
    observer.emit(step(False))
    remove()
    observer.emit(step(False))
    assert seen == [
        ("skipping", "step.completed"),
        ("fast", "step.started"),
        ("skipping", "step.completed"),
        ("fast", "step.completed"),
        ("skipping", "step.completed"),
    ]
