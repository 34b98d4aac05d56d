"""Extension state (seed 004 §13.4; workspace.md §6).

Tests taking ``backend`` run on every storage backend (jsonl, postgres;
tests/support/backends.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import ExtensionError
from goondan.extensions import load_extensions
from goondan.extensions.state import ExtensionState, MemoryStateStore
from goondan.pipeline.events import EventBus
from goondan.pipeline.registry import PipelineRegistry
from goondan.storage.contract import StorageBackend
from goondan.tools.registry import ToolRegistry
from goondan.workspace import InstanceStore
from tests.support.aio import run
from tests.support.pipeline_harness import EXT_FIXTURES, Binding, ext_binding


def load_counter(store: Any):  # type: ignore[no-untyped-def]
    return run(load_extensions(
        [ext_binding("counter", file="async_register")], pipeline=PipelineRegistry(),
        tools=ToolRegistry(), bus=EventBus(), state_store=store,
    ))


def test_get_set_json_and_copies() -> None:
    """seed 004 §13.4 rule 1: api.state.get()/set(value) manage JSON state."""
    state = ExtensionState("ext")

    async def main() -> None:
        assert await state.get() is None
        await state.set({"selected": ["a"], "n": 1.5, "ok": True, "none": None})
        value = await state.get()
        value["selected"].append("b")  # editing a copy changes nothing
        assert await state.get() == {"selected": ["a"], "n": 1.5, "ok": True, "none": None}
        await state.set([1, "two"])
        assert await state.get() == [1, "two"]

    run(main())


@pytest.mark.parametrize("bad", [{1, 2}, {"f": print}, float("nan"), {1: "int key"}, object()])
def test_non_json_values_are_rejected_at_set(bad: Any) -> None:
    """workspace.md §6 / seed 004 §13.4 rule 1: state MUST NOT hold non-serialisable values."""
    state = ExtensionState("ext")
    with pytest.raises(ExtensionError) as info:
        run(state.set(bad))
    assert info.value.code == "E_EXTENSION_STATE"
    assert not state.dirty


def test_state_is_restored_when_the_instance_starts(backend: StorageBackend) -> None:
    """seed 004 §13.4 rule 4: states are restored from disk at instance start (survive a
    restart) — from the instance's store, on every storage backend."""
    with backend.open_instance("ws", "coder", "user-1") as store:
        first = load_counter(store)
        run(first.flush_state())
    with backend.open_instance("ws", "coder", "user-1") as store:
        second = load_counter(store)
    assert second.get("counter").state.snapshot() == {"loads": 2}  # type: ignore[union-attr]


def test_instances_are_isolated(backend: StorageBackend) -> None:
    """seed 004 §13.4 rule 3 / seed 003: two instances never see each other's state."""
    for _ in range(2):
        with backend.open_instance("ws", "coder", "user-1") as store:
            run(load_counter(store).flush_state())
    with backend.open_instance("ws", "coder", "user-2") as store:
        other = load_counter(store)
    assert other.get("counter").state.snapshot() == {"loads": 1}  # type: ignore[union-attr]


def test_each_extension_identity_restores_and_writes_its_own_state(
    backend: StorageBackend,
) -> None:
    """seed 004 §13.4 rules 2 and 6, on every backend (the twin of the next test, which looks at
    the JSONL files): three extensions named ``counter`` — the bundle's and one from each of
    two packages — keep three states."""
    bindings = [
        Binding(name="counter", entry=EXT_FIXTURES / "async_register.py", package=package)
        for package in (None, "@acme/a", "@acme/b")
    ]
    with backend.open_instance("ws", "coder", "user-1") as store:
        store.load()
        store.save_extension_state("counter", {"loads": 10})
        store.save_extension_state("@acme/a/counter", {"loads": 20})
        loaded = run(load_extensions(bindings, pipeline=PipelineRegistry(), tools=ToolRegistry(),
                                     bus=EventBus(), state_store=store))
        run(loaded.flush_state())
    with backend.open_instance("ws", "coder", "user-1") as store:
        states = {key: store.load_extension_state(key)
                  for key in ("counter", "@acme/a/counter", "@acme/b/counter")}
    assert states == {"counter": {"loads": 11}, "@acme/a/counter": {"loads": 21},
                      "@acme/b/counter": {"loads": 1}}


def test_state_belongs_to_the_extension_identity(tmp_path: Path) -> None:
    """seed 004 §13.4 rules 2 and 6: three extensions all named ``counter`` (the bundle's own and
    one from each of two packages) each restore and write their own state, in
    ``extensions/counter.json`` and ``extensions/<package>/counter.json`` (file-safe: ``@`` →
    ``-``)."""
    bindings = [
        Binding(name="counter", entry=EXT_FIXTURES / "async_register.py", package=package)
        for package in (None, "@acme/a", "@acme/b")
    ]
    with InstanceStore.open(tmp_path, "ws", "coder", "user-1", fsync=False) as store:
        store.load()
        ext_dir = store.paths.extensions_dir
        ext_dir.mkdir(exist_ok=True)
        (ext_dir / "counter.json").write_text('{"loads": 10}')
        (ext_dir / "-acme" / "a").mkdir(parents=True)
        (ext_dir / "-acme" / "a" / "counter.json").write_text('{"loads": 20}')
        loaded = run(load_extensions(bindings, pipeline=PipelineRegistry(), tools=ToolRegistry(),
                                     bus=EventBus(), state_store=store))
        run(loaded.flush_state())
    states = {
        p.relative_to(ext_dir).as_posix(): json.loads(p.read_text())
        for p in ext_dir.rglob("*.json")
    }
    assert states == {"counter.json": {"loads": 11}, "-acme/a/counter.json": {"loads": 21},
                      "-acme/b/counter.json": {"loads": 1}}


def test_only_changed_states_are_written_at_turn_end() -> None:
    """seed 004 §13.4 rule 5 / workspace.md §6: dirty states written; unchanged serialisation
    skipped."""
    store = MemoryStateStore({"counter": {"loads": 4}})
    ext = load_counter(store)
    state = ext.get("counter").state  # type: ignore[union-attr]
    assert ext.dirty == ["counter"] and store.saves == 0  # nothing written before the turn ends
    assert run(ext.flush_state()) == ["counter"]
    assert run(ext.flush_state()) == [] and store.saves == 1
    run(state.set({"loads": 5}))  # same serialisation as stored: not dirty
    assert not state.dirty and run(ext.flush_state()) == []
    run(state.set({"loads": 6}))
    assert run(ext.flush_state()) == ["counter"] and store.saves == 2
    assert store.load_extension_state("counter") == {"loads": 6}


def test_failed_writes_are_reported_and_retried() -> None:
    """seed 004 §13.5 rule 1: state write failures carry a standard code (E_EXTENSION_STATE)."""
    class Flaky(MemoryStateStore):
        fail = True

        def save_extension_state(self, name: str, value: Any) -> None:
            if self.fail:
                raise OSError("disk full")
            super().save_extension_state(name, value)

    store = Flaky()
    ext = load_counter(store)
    with pytest.raises(ExtensionError) as info:
        run(ext.flush_state())
    assert info.value.code == "E_EXTENSION_STATE" and "disk full" in info.value.message
    assert ext.dirty == ["counter"]
    store.fail = False
    assert run(ext.flush_state()) == ["counter"]


def test_async_stores_are_supported() -> None:
    """StateStore docs: load/save may be coroutines (awaited) or plain functions (worker thread)."""
    class AsyncStore:
        def __init__(self) -> None:
            self.data: dict[str, Any] = {"counter": {"loads": 9}}

        async def load_extension_state(self, name: str) -> Any:
            return self.data.get(name)

        async def save_extension_state(self, name: str, value: Any) -> None:
            self.data[name] = value

    store = AsyncStore()
    run(load_counter(store).flush_state())
    assert store.data["counter"] == {"loads": 10}
