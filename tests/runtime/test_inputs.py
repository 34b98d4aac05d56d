"""The user-message text of an event (runtime.md §8) and the ctx.agents stub."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import AgentError
from goondan.runtime import Runtime
from goondan.runtime.inputs import UnavailableAgents, input_text
from goondan.types import AgentEvent
from tests.support.aio import run

DELEGATION = Path(__file__).resolve().parents[2] / "examples" / "delegation"


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


def test_the_header_has_the_reference_shape_and_no_span_ids(state_root: Path) -> None:
    """runtime.md §8: a delegated request reaches the worker as ``[goondan_context]`` +
    ``{"source":{kind,name},"event","instanceKey","properties","metadata"}`` + the text; span ids
    (tracing bookkeeping) never enter the user's text."""
    async def main() -> tuple[str, list[dict[str, Any]]]:
        async with Runtime.from_bundle(DELEGATION, state_root=state_root) as rt:
            events: list[dict[str, Any]] = []
            rt.subscribe(events.append)
            result = await rt.run_turn("coordinator", "What is 17 * 23?", instance_key="k")
            assert result.error is None
            return (await rt.instance("worker", "k")).messages[0].text, events

    text, events = run(main())
    open_tag, body, close_tag, rest = text.split("\n", 3)
    assert (open_tag, close_tag, rest) == (
        "[goondan_context]",
        "[/goondan_context]",
        "Compute 17 * 23.",
    )
    header = json.loads(body)
    assert list(header) == ["source", "event", "instanceKey", "properties", "metadata"]
    assert header["source"] == {"kind": "agent", "name": "coordinator"}
    assert header["event"] == "agent.request" and header["instanceKey"] == "k"
    assert header["properties"] == {"from_agent": "coordinator", "from_instance": "k"}
    span_ids = {str(e[key]) for e in events for key in ("spanId", "parentSpanId") if e.get(key)}
    assert span_ids and not any(span in text for span in span_ids)
    assert "SpanId" not in text and "__goondan" not in text


def test_the_header_always_has_properties_and_metadata() -> None:
    """runtime.md §8: ``properties`` and ``metadata`` are always there (``{}`` when empty)."""
    event = AgentEvent(type="agent.send", input="hi", instance_key="k",
                       source={"kind": "agent", "name": "planner", "instanceKey": "p"},
                       metadata={"parentSpanId": "00f067aa0ba902b7"})
    header = json.loads(input_text(event).split("\n")[1])
    assert header == {"source": {"kind": "agent", "name": "planner"}, "event": "agent.send",
                      "instanceKey": "k", "properties": {"from_agent": "planner"}, "metadata": {}}


def test_recorded_answer_is_the_final_answer_of_that_inputs_turn_only() -> None:
    """A redelivered event whose Turn finished in a process that died before the answer left it
    (a pooled host killed right after the Turn ended) is answered from the conversation."""
    from goondan.conversation.messages import Message
    from goondan.runtime.inputs import INPUT_ID_KEY, recorded_answer
    from goondan.types import ToolCall, ToolCallResult

    def event(input_id: str) -> AgentEvent:
        found = AgentEvent.from_dict({"id": f"evt-{input_id}", "type": "user_message",
                                      "input": "go", "source": {"kind": "agent", "name": "cli"}})
        found.start_marker = {"queue": "inputs/default", "id": input_id}
        return found

    messages = [
        Message.user("first", metadata={INPUT_ID_KEY: "in-1"}),
        Message.assistant("", tool_calls=[ToolCall("c1", "calc__echo", {"text": "x"})]),
        Message.tool_result(ToolCallResult.success("c1", "calc__echo", {"text": "x"})),
        Message.assistant("the first answer"),
        Message.user("second", metadata={INPUT_ID_KEY: "in-2"}),
        Message.assistant("", tool_calls=[ToolCall("c2", "calc__echo", {"text": "y"})]),
    ]
    assert recorded_answer(messages, event("in-1")) == "the first answer"
    assert recorded_answer(messages, event("in-2")) is None  # its Turn gave no answer yet
    assert recorded_answer(messages, event("in-3")) is None  # never started
