"""Load an agent's extensions: ``await load_extensions(bindings, ...)`` (docs/extensions.md).

Extensions load one after the other in ``Agent.spec.extensions`` order. For each one the entry
module is executed (fresh per instance, see :mod:`goondan.tools.loader`), its state is restored
from the store, and ``register(api)`` is called and awaited when it returns an awaitable, before
the next extension starts. So registration order — and therefore middleware order — is the
declaration order (docs/extensions.md "Middleware: the onion"). Each extension's state is stored
under its identity (:func:`goondan.extensions.state.state_key`: the bare name for the bundle's own
extensions, ``package/name`` for a dependency's). Any failure (missing file, import error, no
``register``, an exception inside ``register``) aborts with :class:`ExtensionError`
``E_EXTENSION_INIT`` naming the extension and the cause; the subscriptions already made are
removed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from goondan.errors import ExtensionError, GoondanError
from goondan.extensions.api import ExtensionApi
from goondan.extensions.state import (
    ExtensionState,
    MemoryStateStore,
    StateStore,
    call_store,
    state_key,
)
from goondan.pipeline.events import EventBus
from goondan.pipeline.registry import PipelineRegistry
from goondan.secrets import mask
from goondan.tools.catalog import attr
from goondan.tools.loader import load_entry_module
from goondan.tools.registry import ToolRegistry

__all__ = ["ExtensionSet", "LoadedExtension", "load_extensions"]

_log = logging.getLogger("goondan.extensions")


@dataclass
class LoadedExtension:
    """One initialised extension: its binding, module, api and state."""

    name: str
    binding: Any
    module: ModuleType
    api: ExtensionApi
    key: str = ""  # state identity: ``name`` or ``package/name`` (see state_key)

    def __post_init__(self) -> None:
        self.key = self.key or self.name

    @property
    def state(self) -> ExtensionState:
        return self.api.state


class ExtensionSet:
    """The extensions of one agent instance, in load order."""

    def __init__(self, store: StateStore, logger: logging.Logger | None = None) -> None:
        self.extensions: list[LoadedExtension] = []
        self._store = store
        self._log = logger or _log

    def __repr__(self) -> str:
        return f"<ExtensionSet {self.names}>"

    def __iter__(self) -> Iterator[LoadedExtension]:
        return iter(self.extensions)

    def __len__(self) -> int:
        return len(self.extensions)

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.extensions]

    def get(self, name: str) -> LoadedExtension | None:
        """The loaded extension called ``name``, if any."""
        return next((e for e in self.extensions if e.name == name), None)

    @property
    def dirty(self) -> list[str]:
        """Names of extensions whose state changed since the last flush."""
        return [e.name for e in self.extensions if e.state.dirty]

    async def flush_state(self) -> list[str]:
        """Write every changed state to the store (turn end); return the names written.

        Every dirty state is attempted; if any write fails the others are still written and
        :class:`ExtensionError` ``E_EXTENSION_STATE`` is raised afterwards (failed states stay
        dirty and are retried at the next flush).
        """
        written: list[str] = []
        failures: list[str] = []
        for ext in self.extensions:
            state = ext.state
            if not state.dirty:
                continue
            try:
                await call_store(self._store.save_extension_state, ext.key, state.snapshot())
            except Exception as exc:
                self._log.debug("saving state of extension %r failed: %s", ext.key, exc)
                failures.append(f"{ext.key}: {mask(str(exc))}")
                continue
            state.mark_saved()
            written.append(ext.name)
        if failures:
            raise ExtensionError(
                "could not save extension state (" + "; ".join(failures) + ")",
                code="E_EXTENSION_STATE",
                suggestion="Check that the instance directory is writable.",
            )
        return written

    def close(self) -> None:
        """Drop every event subscription the extensions made (instance shutdown)."""
        for ext in self.extensions:
            ext.api.events.close()


def _init_error(name: str, entry: Any, exc: BaseException) -> ExtensionError:
    if isinstance(exc, GoondanError):
        cause = f"{exc.code}: {exc.message}"
        suggestion = exc.suggestion
    else:
        cause = f"{type(exc).__name__}: {exc}"
        suggestion = None
    return ExtensionError(
        f"Extension '{name}' failed to initialise: {mask(cause)}",
        code="E_EXTENSION_INIT",
        suggestion=suggestion or f"Fix the extension's entry module ({entry}) or remove it from "
        "the Agent's spec.extensions.",
        location=str(entry) if entry is not None else None,
    )


async def _restore_state(store: StateStore, name: str, key: str, *, legacy: bool,
                         log: logging.Logger) -> ExtensionState:
    """The saved state under ``key``; for a package extension, else its pre-identity file.

    Before states were keyed by identity, a package extension's state lived under its bare
    name. When nothing is stored under the new key and no bundle-local extension of this agent
    owns the bare name, that old state is adopted and marked dirty, so the next turn end saves it
    under the new key (the old file is left in place; docs/extensions.md, "State").
    """
    initial = await call_store(store.load_extension_state, key)
    if initial is not None or key == name or not legacy:
        return ExtensionState(name, initial)
    old = await call_store(store.load_extension_state, name)
    state = ExtensionState(name, old)
    if old is not None:
        log.info("extension %r: adopting state saved under its bare name before identity keys", key)
        state.mark_unsaved()
    return state


async def load_extensions(
    bindings: Iterable[Any],
    *,
    pipeline: PipelineRegistry,
    tools: ToolRegistry,
    bus: EventBus,
    state_store: StateStore | None = None,
    logger: logging.Logger | None = None,
    agent_name: str = "",
    instance_key: str = "",
) -> ExtensionSet:
    """Load ``bindings`` (``ExtensionBinding`` objects or dicts) in order and call
    ``register(api)``.

    ``state_store`` defaults to a :class:`MemoryStateStore` (nothing persisted).
    """
    log = logger or _log
    store: StateStore = state_store if state_store is not None else MemoryStateStore()
    result = ExtensionSet(store, log)
    seen: set[tuple[str, Any]] = set()
    bindings = list(bindings)
    # A bare-name state file from before identity keys is adopted only when unambiguous.
    name_counts = Counter(str(attr(b, "name")) for b in bindings)
    try:
        for binding in bindings:
            name = str(attr(binding, "name"))
            package = attr(binding, "package", None)
            key = (name, package)
            if key in seen:
                log.warning("extension %r is listed twice; loading it once", name)
                continue
            seen.add(key)
            entry = attr(binding, "entry")
            state_id = state_key(name, str(package) if package else None)
            try:
                module = await asyncio.to_thread(
                    load_entry_module, Path(entry), kind="extension", cache=False
                )
                register = getattr(module, "register", None)
                if not callable(register):
                    raise ExtensionError(
                        f"entry {Path(entry).name} does not define register(api)",
                        code="E_EXTENSION_INIT",
                        suggestion="Define `def register(api): "
                        "...` (or `async def`) at module level.",
                    )
                state = await _restore_state(
                    store, name, state_id, legacy=name_counts[name] == 1, log=log
                )
                api = ExtensionApi(
                    name=name, pipeline=pipeline, tools=tools, bus=bus,
                    state=state, config=attr(binding, "config", None),
                    agent_name=agent_name, instance_key=instance_key, owner=state_id,
                )
                loaded = LoadedExtension(name, binding, module, api, state_id)
                result.extensions.append(loaded)
                outcome = register(api)
                if inspect.isawaitable(outcome):
                    await outcome
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                raise _init_error(name, entry, exc) from exc
            log.debug("extension %r registered", name)
    except BaseException:
        result.close()
        raise
    return result
