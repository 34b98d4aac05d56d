"""Tool providers behind the registry: entry modules, and a provider whose tools change."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from goondan.errors import ToolLoadError
from goondan.tools import EntryModuleProvider, ToolContext, ToolExecutor, ToolRegistry
from goondan.tools.context import CURRENT_TURN
from goondan.tools.providers import ChangeListener, run_handler
from goondan.tools.registry import RegisteredTool, build_tool
from goondan.types import JsonObject, JsonValue, ToolCall, ToolSource
from tests.support.aio import run
from tests.support.pipeline_harness import TOOL_FIXTURES, Binding, Export


class RemoteProvider:
    """A stand-in for an MCP client: tools come and go, calls are forwarded, close is seen."""

    def __init__(self, name: str, *tools: str) -> None:
        self.name = name
        self.offered = list(tools)
        self.calls: list[tuple[str, JsonObject]] = []
        self.closed = 0
        self.notify: ChangeListener | None = None
        self.listed_in: list[str | None] = []  # CURRENT_TURN at each list_tools

    async def open(self, on_change: ChangeListener) -> None:
        self.notify = on_change

    def change(self, *tools: str) -> None:
        """The server's ``notifications/tools/list_changed``."""
        self.offered = list(tools)
        assert self.notify is not None
        self.notify(self)

    async def list_tools(self) -> list[RegisteredTool]:
        self.listed_in.append(CURRENT_TURN.get())
        tools = []
        for name in self.offered:
            async def handler(ctx: ToolContext, args: JsonObject, _n: str = name) -> JsonValue:
                return await self.call(_n, ctx, args)

            tools.append(build_tool({"name": name, "description": f"remote {name}"}, handler,
                                    source=ToolSource("mcp", self.name, {"server": self.name})))
        return tools

    async def call(self, name: str, context: ToolContext, args: JsonObject) -> JsonValue:
        self.calls.append((name, args))
        return {"tool": name, "args": args}

    async def aclose(self) -> None:
        self.closed += 1


def context(tmp_path: Path) -> ToolContext:
    return ToolContext(agent_name="a", instance_key="k", turn_id="t", trace_id="x" * 32,
                       tool_call_id="c1", message=None, workdir=tmp_path)  # type: ignore[arg-type]


def test_an_entry_module_provider_serves_the_declared_exports(tmp_path: Path) -> None:
    binding = Binding("basic", TOOL_FIXTURES / "basic.py", [Export("echo"), Export("aecho")])
    provider = EntryModuleProvider(binding)

    async def main() -> None:
        await provider.open(lambda p: None)
        tools = await provider.list_tools()
        assert [t.name for t in tools] == ["basic__echo", "basic__aecho"]
        assert tools[0].source == ToolSource("config", "basic")
        assert await provider.call("basic__aecho", context(tmp_path), {"x": 1}) == {
            "echo": {"x": 1}
        }
        assert await run_handler(tools[0], context(tmp_path), {"y": 2}) == {
            "echo": {"y": 2}, "thread": True}
        await provider.aclose()

    run(main())


def test_an_entry_module_without_the_export_fails_to_open() -> None:
    provider = EntryModuleProvider(Binding("basic", TOOL_FIXTURES / "basic.py", [Export("nope")]))
    with pytest.raises(ToolLoadError) as info:
        run(provider.open(lambda p: None))
    assert info.value.code == "E_TOOL_LOAD"


def test_a_provider_s_tools_reach_the_catalog_and_run_through_the_executor(tmp_path: Path) -> None:
    bindings = [Binding("basic", TOOL_FIXTURES / "basic.py", [Export("echo")])]
    registry = ToolRegistry()
    registry.load_bindings(bindings)
    remote = RemoteProvider("search", "search__query")

    async def main() -> None:
        await registry.add_provider(remote)
        catalog = await registry.step_catalog(bindings)
        assert [i.name for i in catalog] == ["basic__echo", "search__query"]
        assert catalog[1].source == ToolSource("mcp", "search", {"server": "search"})
        result = await ToolExecutor(registry).execute(
            ToolCall("c1", "search__query", {"q": "x"}), catalog=catalog, context=context(tmp_path))
        assert result.ok and result.output == {"tool": "search__query", "args": {"q": "x"}}
        assert remote.calls == [("search__query", {"q": "x"})]

    run(main())


def test_tools_appearing_and_disappearing_show_in_the_next_step_catalog() -> None:
    registry = ToolRegistry()
    remote = RemoteProvider("search", "search__query", "search__fetch")

    async def main() -> None:
        await registry.add_provider(remote)
        assert [i.name for i in await registry.step_catalog()] == ["search__query", "search__fetch"]
        remote.change("search__fetch", "search__summarise")
        assert [i.name for i in registry.catalog()] == ["search__query", "search__fetch"]  # not yet
        assert [i.name for i in await registry.step_catalog()] == [
            "search__fetch", "search__summarise"]
        assert "search__query" not in registry

    run(main())


def test_providers_are_listed_with_the_step_s_turn_as_current_turn() -> None:
    registry = ToolRegistry()
    remote = RemoteProvider("search", "search__query")

    async def main() -> None:
        await registry.add_provider(remote)
        remote.change("search__fetch")
        await registry.step_catalog(turn_id="turn_7")
        remote.change("search__query")
        await registry.step_catalog()
        assert CURRENT_TURN.get() is None  # only while the providers are listed

    run(main())
    assert remote.listed_in == [None, "turn_7", None]


def test_a_changed_provider_never_takes_a_config_tool_s_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bindings = [Binding("basic", TOOL_FIXTURES / "basic.py", [Export("echo")])]
    registry = ToolRegistry()
    registry.load_bindings(bindings)
    remote = RemoteProvider("basic")

    async def main() -> None:
        await registry.add_provider(remote)
        with caplog.at_level(logging.WARNING, logger="goondan.tools"):
            remote.change("basic__echo", "basic__more")
            names = [i.name for i in await registry.step_catalog(bindings)]
        assert names == ["basic__echo", "basic__more"]
        tool = registry.get("basic__echo")
        assert tool is not None and tool.source.type == "config"
        assert "shadowed" in caplog.text
        remote.change()
        assert [i.name for i in await registry.step_catalog(bindings)] == ["basic__echo"]
        assert registry.get("basic__echo") is tool  # removing the remote copy kept the config one

    run(main())


def test_providers_are_closed_with_the_registry_last_first() -> None:
    registry = ToolRegistry()
    order: list[str] = []
    first, second = RemoteProvider("one", "one__a"), RemoteProvider("two", "two__a")

    async def closing(provider: RemoteProvider) -> None:
        order.append(provider.name)

    async def main() -> None:
        await registry.add_provider(first)
        await registry.add_provider(second)
        for provider in (first, second):
            provider.aclose = lambda p=provider: closing(p)  # type: ignore[method-assign]
        await registry.aclose()
        await registry.aclose()  # idempotent

    run(main())
    assert order == ["two", "one"]
