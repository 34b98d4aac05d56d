"""``ToolRegistry``: every executable tool of one agent instance (docs/tools.md).

The registry sits in front of the instance's tool providers (``goondan/tools/providers.py``):
one :class:`~goondan.tools.providers.EntryModuleProvider` per Tool binding of the agent
(:meth:`ToolRegistry.load_bindings`), any provider added with :meth:`ToolRegistry.add_provider`
(an MCP client), plus the tools extensions register at start-up (``api.tools.register`` →
:meth:`ToolRegistry.register`). It is not what the LLM sees: that is the per-step catalog
(:meth:`ToolRegistry.step_catalog`, then step middleware). When a config tool and an extension
tool share a name, the config tool wins (docs/tools.md "Registry and catalog") and a warning is
logged; two tools of the same origin with one name are an error (``E_TOOL_DUPLICATE``) while
the instance starts, and a warning when a provider's list changes later.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from goondan.errors import ToolLoadError
from goondan.tools.catalog import binding_items, empty_parameters, merge_catalog
from goondan.tools.context import CURRENT_TURN, ToolContext
from goondan.tools.naming import check_tool_name, parse_tool_name
from goondan.types import JsonObject, JsonValue, ToolCatalogItem, ToolSource

if TYPE_CHECKING:
    from goondan.tools.providers import ToolProvider

__all__ = [
    "DEFAULT_ERROR_MESSAGE_LIMIT",
    "DEFAULT_TIMEOUT_MS",
    "RegisteredTool",
    "ToolHandler",
    "ToolRegistry",
    "build_tool",
]

DEFAULT_ERROR_MESSAGE_LIMIT = 1000
DEFAULT_TIMEOUT_MS = 120_000

ToolHandler = Callable[[ToolContext, JsonObject], "JsonValue | Awaitable[JsonValue]"]
_log = logging.getLogger("goondan.tools")


def _is_async(fn: object) -> bool:
    import inspect

    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004
    return call is not None and not inspect.isfunction(fn) and inspect.iscoroutinefunction(call)


@dataclass(frozen=True)
class RegisteredTool:
    """A tool the executor can run: catalog item, handler and per-tool limits."""

    item: ToolCatalogItem
    handler: Callable[..., Any]
    is_async: bool
    error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT
    timeout_ms: float = DEFAULT_TIMEOUT_MS
    # The export may run again after a crash left its outcome unknown (docs/tools.md "Idempotency").
    idempotent: bool = False

    @property
    def name(self) -> str:
        return self.item.name

    @property
    def source(self) -> ToolSource:
        assert self.item.source is not None
        return self.item.source


def _positive(value: Any, label: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ToolLoadError(
            f"tool {name!r}: {label} must be a positive number, got {value!r}",
            code="E_TOOL_SCHEMA",
        )
    return value


def build_tool(
    item: ToolCatalogItem | dict[str, Any],
    handler: Callable[..., Any],
    *,
    error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
    timeout_ms: float = DEFAULT_TIMEOUT_MS,
    source: ToolSource | None = None,
    idempotent: bool = False,
) -> RegisteredTool:
    """A checked :class:`RegisteredTool` (the checks of :meth:`ToolRegistry.register`)."""
    try:
        coerced = ToolCatalogItem.coerce(item)
    except TypeError as exc:
        raise ToolLoadError(str(exc), code="E_TOOL_NAME") from exc
    name = check_tool_name(coerced.name)
    parameters = coerced.parameters if coerced.parameters is not None else empty_parameters()
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise ToolLoadError(
            f"tool {name!r}: parameters must be a JSON Schema with type 'object'",
            code="E_TOOL_SCHEMA",
            suggestion="Use {'type': 'object', 'properties': {...}, 'required': [...]}.",
        )
    if not callable(handler):
        raise ToolLoadError(
            f"tool {name!r}: handler must be callable, got {type(handler).__name__}",
            code="E_TOOL_HANDLER",
            suggestion="Pass a function `def handler(ctx, input)` (sync or async).",
        )
    limit = int(_positive(error_message_limit, "errorMessageLimit", name))
    timeout = _positive(timeout_ms, "timeoutMs", name)
    if source is None:
        parsed = parse_tool_name(name)
        source = coerced.source or ToolSource("config", parsed[0] if parsed else name)
    stored = ToolCatalogItem(name, coerced.description, parameters, source)
    return RegisteredTool(stored, handler, _is_async(handler), limit, timeout, idempotent is True)


class ToolRegistry:
    """Name → :class:`RegisteredTool` for one agent instance."""

    def __init__(self, *, logger: logging.Logger | None = None) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._log = logger or _log
        self._loaded: set[tuple[str, str | None]] = set()
        self._providers: list[ToolProvider] = []
        self._provided: dict[ToolProvider, list[RegisteredTool]] = {}
        self._stale: set[ToolProvider] = set()

    def __repr__(self) -> str:
        return f"<ToolRegistry tools={len(self._tools)}>"

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[RegisteredTool]:
        return iter(list(self._tools.values()))

    def get(self, name: str) -> RegisteredTool | None:
        """The tool registered under ``name``, if any."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Registered names in registration order."""
        return list(self._tools)

    def register(
        self,
        item: ToolCatalogItem | dict[str, Any],
        handler: Callable[..., Any],
        *,
        error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
        timeout_ms: float = DEFAULT_TIMEOUT_MS,
        source: ToolSource | None = None,
        idempotent: bool = False,
    ) -> RegisteredTool:
        """Add a tool; ``handler(ctx, input)`` may be sync or ``async``.

        Raises :class:`ToolLoadError`: ``E_TOOL_NAME`` (name rules), ``E_TOOL_SCHEMA``
        (parameters not an object schema, bad limits), ``E_TOOL_HANDLER`` (not callable),
        ``E_TOOL_DUPLICATE`` (same name registered twice by the same kind of source).
        """
        tool = build_tool(item, handler, error_message_limit=error_message_limit,
                          timeout_ms=timeout_ms, source=source, idempotent=idempotent)
        return self._add(tool, strict=True)

    def _add(self, tool: RegisteredTool, *, strict: bool) -> RegisteredTool:
        """Index ``tool`` under its name; a same-origin clash raises only when ``strict``."""
        name, source = tool.name, tool.source
        existing = self._tools.get(name)
        if existing is not None:
            new_is_config, old_is_config = source.type == "config", existing.source.type == "config"
            if old_is_config and not new_is_config:
                self._log.warning(
                    "tool %r from %s %r is shadowed by the config tool of the same name",
                    name, source.type, source.name,
                )
                return existing
            if not (new_is_config and not old_is_config):
                message = (
                    f"tool {name!r} is registered twice ({existing.source.type} "
                    f"{existing.source.name!r} and {source.type} {source.name!r})"
                )
                if not strict:
                    self._log.warning("%s; the first one is kept", message)
                    return existing
                raise ToolLoadError(
                    message,
                    code="E_TOOL_DUPLICATE",
                    suggestion="Rename one of the tools or remove one of the Tool references.",
                )
            self._log.warning(
                "config tool %r shadows the %s tool registered by %r",
                name, existing.source.type, existing.source.name,
            )
        self._tools[name] = tool
        return tool

    def load_bindings(self, bindings: Iterable[Any]) -> None:
        """Load the entry module of every ``ToolBinding`` and register each export's handler.

        Each binding becomes an :class:`~goondan.tools.providers.EntryModuleProvider`, loaded
        here in one go. Blocking (imports run module code): call it through
        ``asyncio.to_thread`` from async code. Raises :class:`ToolLoadError` ``E_TOOL_LOAD``
        when an entry cannot be loaded, has no ``handlers`` mapping or lacks a handler for a
        declared export.
        """
        from goondan.tools.providers import EntryModuleProvider  # providers import this module

        for binding in bindings:
            provider = EntryModuleProvider(binding)
            if provider.key in self._loaded:
                continue
            self._install(provider, provider.load(), strict=True)
            self._loaded.add(provider.key)

    async def add_provider(self, provider: ToolProvider) -> None:
        """Open ``provider`` and index its tools; it is closed by :meth:`aclose`.

        A provider with a true ``lazy`` attribute (an MCP server) is not listed now: it is
        marked changed, so the first :meth:`step_catalog` lists it (and starts it).
        """
        await provider.open(self._changed)
        if getattr(provider, "lazy", False):
            self._install(provider, (), strict=False)
            self._stale.add(provider)
            return
        try:
            self._install(provider, await provider.list_tools(), strict=True)
        except BaseException:
            await provider.aclose()
            raise

    def _install(self, provider: ToolProvider, tools: Iterable[RegisteredTool], *,
                 strict: bool) -> None:
        if provider not in self._provided:
            self._providers.append(provider)
        # Only the tools that won their name: a shadowed one is not the provider's to remove.
        self._provided[provider] = [
            tool for tool in tools if self._add(tool, strict=strict) is tool
        ]

    def _changed(self, provider: ToolProvider) -> None:
        self._stale.add(provider)

    async def refresh(self) -> None:
        """List the tools of every provider that announced a change again, and re-index them."""
        # One pass over the providers stale now: a provider that announces a change while it
        # is listed (an MCP server that failed to start) is listed again at the next step.
        stale, self._stale = self._stale, set()
        for provider in stale:
            tools = await provider.list_tools()
            for old in self._provided.get(provider, ()):
                if self._tools.get(old.name) is old:
                    del self._tools[old.name]
            self._install(provider, tools, strict=False)

    async def step_catalog(self, bindings: Iterable[Any] | None = None, *,
                           turn_id: str | None = None) -> list[ToolCatalogItem]:
        """:meth:`catalog` after picking up the providers' changes: one step's fresh catalog.

        ``turn_id`` is the turn the step belongs to; providers read it as
        :data:`~goondan.tools.context.CURRENT_TURN` while they are listed.
        """
        if self._stale:
            token = CURRENT_TURN.set(turn_id) if turn_id is not None else None
            try:
                await self.refresh()
            finally:
                if token is not None:
                    CURRENT_TURN.reset(token)
        return self.catalog(bindings)

    async def aclose(self) -> None:
        """Close every provider, last added first; a provider's failure is logged, not raised."""
        providers, self._providers = self._providers, []
        self._provided.clear()
        self._stale.clear()
        for provider in reversed(providers):
            try:
                await provider.aclose()
            except Exception:
                self._log.exception("tool provider %r failed to close", provider.name)

    def providers(self) -> list[ToolProvider]:
        """The providers added with :meth:`add_provider`, in order."""
        return list(self._providers)

    def extension_items(self) -> list[ToolCatalogItem]:
        """Items of the tools registered by extensions (and MCP bridges), in order."""
        return [t.item for t in self._tools.values() if t.source.type != "config"]

    def catalog(self, bindings: Iterable[Any] | None = None) -> list[ToolCatalogItem]:
        """A fresh step catalog: config tools of ``bindings`` then extension tools, deduped.

        Without ``bindings`` every registered config tool is used. Items are copies.
        """
        if bindings is None:
            config = [t.item for t in self._tools.values() if t.source.type == "config"]
        else:
            config = []
            for binding in bindings:
                for item in binding_items(binding):
                    registered = self._tools.get(item.name)
                    config.append(registered.item if registered is not None else item)
        return merge_catalog(config, self.extension_items())
