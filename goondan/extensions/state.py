"""Per-extension, per-instance JSON state: ``api.state.get()`` / ``api.state.set(value)``
(docs/extensions.md "State").

Each extension of each agent instance owns one :class:`ExtensionState`. It is restored from the
instance's state store when the extensions load, ``set`` validates and caches the value and
marks it dirty, and :meth:`goondan.extensions.ExtensionSet.flush_state` writes only the states
whose serialisation changed since the last save (the runtime calls it at turn end). Values are
kept in serialised form, so ``get()`` always returns a fresh copy: editing what ``get()``
returned changes nothing until it is passed to ``set()``.

The store is any object with ``load_extension_state(name)`` and
``save_extension_state(name, value)`` (sync or async); the workspace's ``InstanceStore`` is one,
:class:`MemoryStateStore` keeps states in memory for embedding and tests.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from collections.abc import Coroutine, Generator
from typing import Any, Protocol

from goondan.errors import ExtensionError
from goondan.types import JsonValue

__all__ = [
    "ExtensionState", "MemoryStateStore", "StateStore", "call_store", "check_json", "state_key",
]


class StateStore(Protocol):
    """Where extension states live (``InstanceStore`` implements it)."""

    def load_extension_state(self, name: str) -> Any: ...

    def save_extension_state(self, name: str, value: Any) -> Any: ...


class MemoryStateStore:
    """A state store in a dict; ``saves`` counts writes (handy to check turn-end flushing)."""

    def __init__(self, initial: dict[str, JsonValue] | None = None) -> None:
        self.states: dict[str, str] = {k: json.dumps(v) for k, v in (initial or {}).items()}
        self.saves = 0

    def __repr__(self) -> str:
        return f"<MemoryStateStore states={sorted(self.states)} saves={self.saves}>"

    def load_extension_state(self, name: str) -> JsonValue:
        text = self.states.get(name)
        return None if text is None else json.loads(text)

    def save_extension_state(self, name: str, value: JsonValue) -> None:
        self.states[name] = json.dumps(value)
        self.saves += 1


async def call_store(method: Any, *args: Any) -> Any:
    """Call a sync store method in a worker thread, or await an async one."""
    if inspect.iscoroutinefunction(method):
        return await method(*args)
    result = await asyncio.to_thread(method, *args)
    if inspect.isawaitable(result):
        result = await result
    return result


def check_json(value: Any, path: str = "$") -> str | None:
    """Why ``value`` is not plain JSON (string keys, finite numbers), or ``None``."""
    if value is None or isinstance(value, str | bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{path}: {value!r} is not a finite number"
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = check_json(item, f"{path}[{index}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}: key {key!r} is not a string"
            problem = check_json(item, f"{path}.{key}")
            if problem:
                return problem
        return None
    return f"{path}: {type(value).__name__} is not JSON"


class _Done(Coroutine[Any, Any, None]):
    """An already finished coroutine: awaiting it returns ``None`` at once.

    A real ``async def`` would warn "coroutine was never awaited" when the caller forgets the
    ``await``; this one has nothing left to run, so forgetting it is harmless.
    """

    __slots__ = ()

    def send(self, value: Any) -> Any:
        raise StopIteration(None)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if isinstance(typ, BaseException):
            raise typ
        raise typ if val is None else val

    def close(self) -> None:
        return None

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # pragma: no cover - makes this a generator that finishes at once


def state_key(name: str, package: str | None) -> str:
    """The identity an extension's state is stored under: ``name`` or ``package/name``.

    An Extension of the bundle itself keeps the bare name (``extensions/<name>.json``); one from
    a dependency package is keyed by package and name, so two ``counter`` extensions from two
    packages never share a file (docs/extensions.md, "State").
    """
    return f"{package}/{name}" if package else name


class ExtensionState:
    """``api.state`` of one extension in one instance."""

    def __init__(self, name: str, initial: JsonValue = None) -> None:
        problem = check_json(initial)
        if problem is not None:
            raise ExtensionError(
                f"stored state of extension '{name}' is not JSON ({problem})",
                code="E_EXTENSION_STATE",
            )
        self.name = name
        self._text = json.dumps(initial)
        self._saved = self._text

    def __repr__(self) -> str:
        return f"<ExtensionState {self.name!r} dirty={self.dirty} size={len(self._text)}>"

    @property
    def dirty(self) -> bool:
        """True when the value changed since it was restored or last saved."""
        return self._text != self._saved

    async def get(self) -> JsonValue:
        """The current value (``None`` when never set); a fresh copy every call."""
        return json.loads(self._text)

    def set(self, value: JsonValue) -> Coroutine[Any, Any, None]:
        """Replace the value; rejects anything that is not plain JSON (``E_EXTENSION_STATE``).

        The value is checked and stored *when called*: ``await api.state.set(x)`` is the
        documented form, and a forgotten ``await`` still stores the value instead of silently
        doing nothing (the returned awaitable is already complete).
        """
        problem = check_json(value)
        if problem is not None:
            raise ExtensionError(
                f"extension '{self.name}': state must be JSON ({problem})",
                code="E_EXTENSION_STATE",
                suggestion="Store dicts, lists, strings, finite numbers, booleans or None only.",
            )
        self._text = json.dumps(value)
        return _Done()

    def snapshot(self) -> JsonValue:
        """The current value without awaiting (for the runtime and tests)."""
        return json.loads(self._text)

    def mark_unsaved(self) -> None:
        """Make the current value dirty, so the next flush writes it (state migration)."""
        self._saved = ""

    def mark_saved(self) -> None:
        """Record that the current value is what the store holds."""
        self._saved = self._text
