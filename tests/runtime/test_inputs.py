"""The user-message text of an event (runtime.md §8) and the ctx.agents stub."""

from __future__ import annotations

import asyncio
import json

import pytest

from goondan.errors import AgentError
from goondan.runtime.inputs import UnavailableAgents, input_text
from goondan.types import AgentEvent


def test_plain_input_is_just_the_text() -> None:
    assert input_text(AgentEvent(type="message", input="hello")) == "hello"


def test_connector_event_with_properties_gets_a_header() -> None:
    event = AgentEvent(
        type="user_message", input="hi there", instance_key="telegram:42",
        source={"kind": "connector", "name": "telegram"},
        metadata={"properties": {"chat_id": 42}, "__goondanAgentCallStack": ["a@b"], "lang": "ko"},
    )
    lines = input_text(event).split("\n")
    assert lines[0] == "[goondan_context]" and lines[2] == "[/goondan_context]"
    header = json.loads(lines[1])
    assert header == {
        "source": {"kind": "connector", "name": "telegram"},
        "event": "user_message",
        "instanceKey": "telegram:42",
        "properties": {"chat_id": 42},
        "metadata": {"lang": "ko"},
    }
    assert lines[3] == "hi there"


def test_agent_event_names_the_caller_and_omits_empty_text() -> None:
    event = AgentEvent(
        type="agent.request", input=None, source={"kind": "agent", "name": "planner"},
        metadata={"callerInstanceKey": "p-1"},
    )
    text = input_text(event)
    assert text.endswith("[/goondan_context]")
    header = json.loads(text.split("\n")[1])
    assert header["properties"] == {"from_agent": "planner", "from_instance": "p-1"}


def test_unavailable_agents_explains_how_to_enable() -> None:
    agents = UnavailableAgents()
    with pytest.raises(AgentError) as info:
        asyncio.run(agents.request("coder", "hi"))
    assert info.value.code == "E_AGENT_UNAVAILABLE"
    assert "goondan run" in (info.value.suggestion or "")
    with pytest.raises(AgentError):
        asyncio.run(agents.send("coder", "hi"))
