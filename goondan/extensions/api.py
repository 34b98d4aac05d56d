"""``ExtensionApi``: what ``register(api)`` receives (docs/extensions.md "The api object").

Five doors into the runtime plus identity and configuration:

* ``api.pipeline.register(type, fn, {"priority": 0})`` (or ``priority=0``) — turn / step /
  toolCall middleware; ``raise api.pipeline.RetryStep(...)`` in step middleware retries the step;
* ``api.tools.register(item, handler)`` — a dynamic tool (``{resource}__{export}`` name rules
  enforced; ``source.type`` is ``"extension"``, or ``"mcp"`` when the item says so);
* ``api.state.get()`` / ``await api.state.set(value)`` — JSON state of this extension in this
  instance (see :mod:`goondan.extensions.state`);
* ``api.events.on(name, fn)`` → unsubscribe, ``api.events.emit(name, *args)`` — the instance's
  event bus (runtime events such as ``turn.completed`` arrive here too);
* ``api.logger`` — ``logging.getLogger("goondan.extension.<name>")``;
* ``api.config`` — ``Extension.spec.config`` deep-merged with the Agent's ref-level config
  (docs/configuration.md "Extension"), read-only; ``api.name``, ``api.agent_name``,
  ``api.instance_key``.

Every part always exists, whatever the runtime wires behind it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from goondan.extensions.state import ExtensionState
from goondan.pipeline.events import EventBus
from goondan.pipeline.registry import PipelineRegistry
from goondan.pipeline.retry import RetryStep
from goondan.tools.registry import RegisteredTool, ToolRegistry
from goondan.types import ToolCatalogItem, ToolSource

__all__ = [
    "ExtensionApi",
    "ExtensionEvents",
    "ExtensionPipeline",
    "ExtensionTools",
    "FrozenDict",
    "freeze",
]


class FrozenDict(dict[str, Any]):
    """A dict that refuses every change (still a ``dict`` for ``json.dumps`` and ``isinstance``)."""

    def _readonly(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("extension config is read-only; copy it first (dict(api.config))")

    __setitem__ = __delitem__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly
    __ior__ = _readonly

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        import copy

        return {k: copy.deepcopy(v, memo) for k, v in self.items()}


def freeze(value: Any) -> Any:
    """Deep read-only view: dicts → :class:`FrozenDict`, lists → tuples."""
    if isinstance(value, Mapping):
        frozen = FrozenDict()
        for key, item in value.items():
            dict.__setitem__(frozen, str(key), freeze(item))
        return frozen
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


class ExtensionPipeline:
    """``api.pipeline``: registers middleware tagged with the extension's name."""

    def __init__(self, registry: PipelineRegistry, owner: str) -> None:
        self._registry = registry
        self._owner = owner

    def __repr__(self) -> str:
        return f"<ExtensionPipeline of {self._owner!r}>"

    #: Raise from step middleware to run the step again (see :mod:`goondan.pipeline.retry`).
    RetryStep = RetryStep

    def register(
        self,
        type: str,
        fn: Callable[[Any], Awaitable[Any]],
        options: Mapping[str, Any] | None = None,
        *,
        priority: float | None = None,
    ) -> None:
        """Register ``async def fn(ctx)`` as ``"turn"``, ``"step"`` or ``"toolCall"`` middleware.

        The priority (lower is outer, default 0) is ``{"priority": 5}`` as in the reference API,
        or ``priority=5``.
        """
        self._registry.register(type, fn, options, priority=priority, owner=self._owner)


class ExtensionTools:
    """``api.tools``: dynamic tool registration (docs/extensions.md "Tools from extensions")."""

    def __init__(self, registry: ToolRegistry, owner: str) -> None:
        self._registry = registry
        self._owner = owner
        self.registered: list[str] = []

    def __repr__(self) -> str:
        return f"<ExtensionTools of {self._owner!r} registered={self.registered}>"

    def register(
        self,
        item: ToolCatalogItem | dict[str, Any],
        handler: Callable[..., Any],
        *,
        error_message_limit: int = 1000,
        timeout_ms: float = 120_000,
        idempotent: bool = False,
    ) -> RegisteredTool:
        """Add a tool named ``{resource}__{export}`` whose ``handler(ctx, input)`` may be async;
        ``idempotent``: safe to run again after a crash (docs/tools.md "Idempotency")."""
        coerced = ToolCatalogItem.coerce(item)
        if coerced.source is not None and coerced.source.type == "mcp":
            source = coerced.source
        else:
            source = ToolSource("extension", self._owner)
        tool = self._registry.register(
            coerced, handler, error_message_limit=error_message_limit,
            timeout_ms=timeout_ms, source=source, idempotent=idempotent,
        )
        self.registered.append(tool.name)
        return tool


class ExtensionEvents:
    """``api.events``: the instance bus; subscriptions are dropped when the extension closes."""

    def __init__(self, bus: EventBus, owner: str) -> None:
        self._bus = bus
        self._owner = owner
        self._unsubscribers: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<ExtensionEvents of {self._owner!r} subscriptions={len(self._unsubscribers)}>"

    def on(self, name: str, fn: Callable[..., Any]) -> Callable[[], None]:
        """Subscribe; returns a callable that unsubscribes (docs/extensions.md "Events")."""
        unsubscribe = self._bus.on(name, fn)
        self._unsubscribers.append(unsubscribe)
        return unsubscribe

    def emit(self, name: str, *args: Any) -> None:
        """Publish ``name`` to every listener of the instance, in subscription order."""
        self._bus.emit(name, *args)

    def close(self) -> None:
        """Remove every subscription this extension made."""
        for unsubscribe in self._unsubscribers:
            unsubscribe()
        self._unsubscribers.clear()


class ExtensionApi:
    """The object passed to an extension's ``register(api)``."""

    def __init__(
        self,
        *,
        name: str,
        pipeline: PipelineRegistry,
        tools: ToolRegistry,
        bus: EventBus,
        state: ExtensionState,
        config: Mapping[str, Any] | None = None,
        agent_name: str = "",
        instance_key: str = "",
        logger: logging.Logger | None = None,
        owner: str | None = None,
    ) -> None:
        self.name = name
        self.agent_name = agent_name
        self.instance_key = instance_key
        # Middleware errors name the extension's identity (``package/name`` for a dependency's).
        self.pipeline = ExtensionPipeline(pipeline, owner or name)
        self.tools = ExtensionTools(tools, name)
        self.events = ExtensionEvents(bus, name)
        self.state = state
        self.config: FrozenDict = freeze(dict(config or {}))
        self.logger = logger or logging.getLogger(f"goondan.extension.{name}")

    def __repr__(self) -> str:
        return (
            f"<ExtensionApi {self.name!r} agent={self.agent_name!r} "
            f"instance={self.instance_key!r}>"
        )
