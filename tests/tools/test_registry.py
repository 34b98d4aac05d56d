"""ToolRegistry and the per-step catalog (seed 002 §2.1, §3, §12, §13)."""

from __future__ import annotations

import logging

import pytest

from goondan.errors import ToolLoadError
from goondan.tools.registry import ToolRegistry
from goondan.types import ToolCatalogItem, ToolSource
from tests.support.pipeline_harness import TOOL_FIXTURES, Binding, Export


def basic_binding(*exports: str, name: str = "basic") -> Binding:
    return Binding(
        name=name,
        entry=TOOL_FIXTURES / "basic.py",
        exports=[
            Export(e, f"{e} description", {"type": "object", "properties": {}}) for e in exports
        ],
        error_message_limit=200,
        timeout_ms=5_000,
    )


def handler(ctx, input):  # type: ignore[no-untyped-def]
    return input


def test_registry_holds_every_export_of_every_binding() -> None:
    """seed 002 §3: the registry has the handlers of every Tool resource's exports."""
    registry = ToolRegistry()
    registry.load_bindings([basic_binding("echo", "aecho"), basic_binding("noop", name="other")])
    assert registry.names() == ["basic__echo", "basic__aecho", "other__noop"]
    tool = registry.get("basic__aecho")
    assert tool is not None and tool.is_async and tool.error_message_limit == 200
    assert tool.timeout_ms == 5_000 and tool.source == ToolSource("config", "basic")
    assert registry.get("basic__echo").is_async is False  # type: ignore[union-attr]


def test_extension_tools_are_in_the_registry() -> None:
    """seed 002 §2.1 rule 4: tools from api.tools.register are part of the registry."""
    registry = ToolRegistry()
    registry.register({"name": "weather__get", "description": "d"}, handler,
                      source=ToolSource("extension", "weather-ext"))
    assert "weather__get" in registry
    assert registry.extension_items()[0].source == ToolSource("extension", "weather-ext")


def test_catalog_starts_from_agent_tools_then_extension_tools() -> None:
    """seed 002 §2.1 rules 1-2 / §12.3 / runtime.md §7.2: config tools first, then extension
    tools."""
    registry = ToolRegistry()
    registry.register({"name": "weather__get"}, handler, source=ToolSource("extension", "w"))
    bindings = [basic_binding("echo", "noop")]
    registry.load_bindings(bindings)
    catalog = registry.catalog(bindings)
    assert [i.name for i in catalog] == ["basic__echo", "basic__noop", "weather__get"]
    assert catalog[0].description == "echo description"
    assert catalog[0].source == ToolSource("config", "basic")


def test_catalog_lists_declared_tools_only() -> None:
    """seed 002 §2.1 rule 2: the catalog comes from the Agent's spec.tools, not from every loaded
    tool."""
    registry = ToolRegistry()
    registry.load_bindings([basic_binding("echo"), basic_binding("noop", name="other")])
    assert [i.name for i in registry.catalog([basic_binding("echo")])] == ["basic__echo"]
    assert [i.name for i in registry.catalog()] == ["basic__echo", "other__noop"]


def test_each_step_gets_fresh_catalog_copies() -> None:
    """seed 000 §3.2 rule 2: editing one step's catalog does not leak into the next step."""
    registry = ToolRegistry()
    bindings = [basic_binding("echo")]
    registry.load_bindings(bindings)
    first = registry.catalog(bindings)
    first[0].description = "edited"
    first[0].parameters["properties"]["x"] = {"type": "string"}
    first.clear()
    second = registry.catalog(bindings)
    assert second[0].description == "echo description"
    assert second[0].parameters == {"type": "object", "properties": {}}


def test_missing_parameters_mean_an_empty_object_schema() -> None:
    """Decision 16: export description and parameters are optional."""
    registry = ToolRegistry()
    binding = Binding(name="basic", entry=TOOL_FIXTURES / "basic.py", exports=[Export("noop")])
    registry.load_bindings([binding])
    item = registry.catalog([binding])[0]
    assert item.parameters == {"type": "object", "properties": {}} and item.description == ""


def test_dedupe_by_name_config_first(caplog: pytest.LogCaptureFixture) -> None:
    """runtime.md §7 step 2: a config tool wins over an extension tool with the same name."""
    registry = ToolRegistry()
    registry.register({"name": "basic__echo", "description": "ext"}, handler,
                      source=ToolSource("extension", "e"))
    with caplog.at_level(logging.WARNING, logger="goondan.tools"):
        registry.load_bindings([basic_binding("echo")])
        registry.register({"name": "basic__echo"}, handler, source=ToolSource("extension", "late"))
    tool = registry.get("basic__echo")
    assert tool is not None and tool.source.type == "config"
    assert [i.name for i in registry.catalog([basic_binding("echo")])] == ["basic__echo"]
    assert "shadow" in caplog.text


def test_duplicate_names_of_the_same_origin_are_errors() -> None:
    """seed 002 §2.7 rule 4 (uniqueness): two tools of one origin with one name are refused."""
    registry = ToolRegistry()
    registry.register({"name": "a__b"}, handler, source=ToolSource("extension", "x"))
    with pytest.raises(ToolLoadError) as info:
        registry.register({"name": "a__b"}, handler, source=ToolSource("extension", "y"))
    assert info.value.code == "E_TOOL_DUPLICATE"


def test_registration_validates_name_schema_and_handler() -> None:
    """seed 004 §13.2.1 rule 6 / seed 002 §6.1: name rules, object schema, callable handler."""
    registry = ToolRegistry()
    cases = [
        ({"name": "nounderscore"}, handler, "E_TOOL_NAME"),
        ({"name": "a__b__c"}, handler, "E_TOOL_NAME"),
        ({"description": "no name"}, handler, "E_TOOL_NAME"),
        ({"name": "a__b", "parameters": {"type": "array"}}, handler, "E_TOOL_SCHEMA"),
        ({"name": "a__b"}, "not callable", "E_TOOL_HANDLER"),
    ]
    for item, fn, code in cases:
        with pytest.raises(ToolLoadError) as info:
            registry.register(item, fn)  # type: ignore[arg-type]
        assert info.value.code == code
    with pytest.raises(ToolLoadError):
        registry.register({"name": "a__b"}, handler, error_message_limit=0)
    assert len(registry) == 0
    registry.register(ToolCatalogItem("a__b"), handler)
    assert registry.get("a__b") is not None


def test_missing_handlers_dict_or_handler_is_a_load_error() -> None:
    """seed 002 §2.7 rule 2 / §15: the entry exports `handlers` with one handler per export."""
    registry = ToolRegistry()
    with pytest.raises(ToolLoadError, match="handlers"):
        registry.load_bindings([Binding("x", TOOL_FIXTURES / "no_handlers.py", [Export("run")])])
    with pytest.raises(ToolLoadError) as info:
        registry.load_bindings([basic_binding("missing-one")])
    assert info.value.code == "E_TOOL_LOAD" and "missing-one" in info.value.message


def test_dict_bindings_are_accepted() -> None:
    """Duck typing across areas: bindings may be the config dataclasses or plain dicts."""
    registry = ToolRegistry()
    registry.load_bindings([{"name": "calc", "entry": TOOL_FIXTURES / "calc.py",
                             "exports": [{"name": "add"}]}])
    assert registry.names() == ["calc__add"]
