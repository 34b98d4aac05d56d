"""ExtensionApi parts (seed 004 §13.2; seed 002 §12; Decision 6)."""

from __future__ import annotations

import copy
import json
import logging

import pytest

from goondan.errors import PipelineError
from goondan.extensions.api import ExtensionApi, FrozenDict, freeze
from goondan.extensions.state import ExtensionState
from goondan.pipeline.events import EventBus
from goondan.pipeline.registry import PipelineRegistry
from goondan.tools.registry import ToolRegistry
from goondan.types import ToolCatalogItem, ToolSource


def make_api(name: str = "weather-ext", config: dict[str, object] | None = None) -> ExtensionApi:
    return ExtensionApi(
        name=name, pipeline=PipelineRegistry(), tools=ToolRegistry(), bus=EventBus(),
        state=ExtensionState(name), config=config, agent_name="coder", instance_key="u1",
    )


async def mw(ctx):  # type: ignore[no-untyped-def]
    return await ctx.next()


def test_pipeline_register_tags_the_owner_and_keeps_the_rules() -> None:
    """seed 000 §2 rule 9 / seed 004 §13.2.1: api.pipeline.register(type, fn) with priority
    option."""
    api = make_api()
    api.pipeline.register("step", mw, priority=3)
    entry = api.pipeline._registry.entries("step")[0]
    assert entry.owner == "weather-ext" and entry.priority == 3
    with pytest.raises(PipelineError) as info:
        api.pipeline.register("llm", mw)
    assert info.value.code == "E_PIPELINE_TYPE"
    assert not hasattr(api.pipeline, "mutate") and not hasattr(api.pipeline, "wrap")


def test_tools_register_sets_extension_source() -> None:
    """seed 002 §12.1 / §13.1: dynamic tools get source {type: extension, name: <extension>}."""
    api = make_api()
    tool = api.tools.register(
        {
            "name": "weather__get",
            "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        lambda ctx, input: {},
    )
    assert tool.item.source == ToolSource("extension", "weather-ext")
    assert api.tools.registered == ["weather__get"]
    mcp = api.tools.register(
        ToolCatalogItem("github__create_issue", source=ToolSource("mcp", "mcp-github",
                                                                  {"extensionName": "mcp-github"})),
        lambda ctx, input: {},
    )
    assert mcp.item.source is not None and mcp.item.source.type == "mcp"


def test_events_on_returns_unsubscribe_and_close_drops_subscriptions() -> None:
    """seed 004 §13.2.1 rule 4: api.events.on returns an unsubscribe function."""
    api = make_api()
    got: list[object] = []
    off = api.events.on("turn.completed", got.append)
    api.events.emit("turn.completed", {"n": 1})
    off()
    api.events.emit("turn.completed", {"n": 2})
    api.events.on("x", got.append)
    api.events.close()
    api.events.emit("x", 3)
    assert got == [{"n": 1}]


def test_logger_is_tagged_with_the_extension_name() -> None:
    """seed 004 §13.2 logger (Python adaptation: logging.Logger named goondan.extension.<name>)."""
    api = make_api("skills")
    assert isinstance(api.logger, logging.Logger)
    assert api.logger.name == "goondan.extension.skills"


def test_config_is_read_only_but_json_friendly() -> None:
    """Decision 6: api.config is the merged config, read-only."""
    api = make_api(config={"maxMessages": 50, "nested": {"list": [1, {"a": 2}]}})
    assert api.config["maxMessages"] == 50
    with pytest.raises(TypeError):
        api.config["maxMessages"] = 1
    with pytest.raises(TypeError):
        api.config["nested"]["x"] = 1
    with pytest.raises(TypeError):
        api.config.update({"a": 1})
    assert json.loads(json.dumps(api.config)) == {
        "maxMessages": 50,
        "nested": {"list": [1, {"a": 2}]},
    }
    thawed = copy.deepcopy(api.config)
    thawed["x"] = 1  # a deep copy is an ordinary dict again
    assert isinstance(freeze({"a": {}})["a"], FrozenDict)
    assert make_api().config == {}


def test_identity_attributes() -> None:
    """seed 003 'Agent-specific loading': the api knows its extension, agent and instance."""
    api = make_api()
    assert (api.name, api.agent_name, api.instance_key) == ("weather-ext", "coder", "u1")
    assert "weather-ext" in repr(api)
