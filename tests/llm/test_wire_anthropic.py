"""Anthropic Messages API: request building, response parsing, stream events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goondan.conversation.messages import Message
from goondan.errors import LlmAuthError, LlmBadResponseError, LlmError, LlmRateLimitError
from goondan.llm.anthropic import AnthropicModel
from goondan.llm.base import ModelRequest, ModelResponse, ModelSpec, StreamDelta
from goondan.llm.registry import create_model
from goondan.llm.sse import SseEvent
from goondan.types import TokenUsage, ToolCall, ToolCallResult, ToolCatalogItem

TOOL = ToolCatalogItem("clock__now", "", {"type": "object", "properties": {}})


def model(**spec: Any) -> AnthropicModel:
    values: dict[str, Any] = {
        "provider": "anthropic",
        "model": "claude-x",
        "api_key": "sk-ant-wire-test",
    }
    values.update(spec)
    built = create_model(ModelSpec(**values))
    assert isinstance(built, AnthropicModel)
    return built


def test_request_body_field_by_field() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Earlier note."},
        {"role": "user", "content": "time?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": ""},
                {
                    "type": "tool-call",
                    "toolCallId": "toolu_1",
                    "toolName": "clock__now",
                    "input": {"tz": "UTC"},
                },
                {
                    "type": "tool-call",
                    "toolCallId": "toolu_2",
                    "toolName": "clock__now",
                    "input": {},
                },
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "toolu_1",
                    "toolName": "clock__now",
                    "output": {"type": "json", "value": {"time": "12:00"}},
                }
            ],
        },
        {
            "role": "tool",
            "content": [
                {
                    "type": "tool-result",
                    "toolCallId": "toolu_2",
                    "toolName": "clock__now",
                    "output": {"type": "error-text", "value": "no tz"},
                }
            ],
        },
        {"role": "user", "content": "thanks"},
        {"role": "system", "content": "Late note."},
    ]
    body = model(options={"top_k": 5}).to_wire(
        ModelRequest(
            messages=messages,
            tools=[TOOL],
            system="Be terse.",
            params={"temperature": 0.1, "topP": 0.8},
        )
    )
    assert body["model"] == "claude-x" and body["max_tokens"] == 4096
    assert (body["temperature"], body["top_p"], body["top_k"]) == (0.1, 0.8, 5)
    assert body["system"] == "Be terse.\n\nEarlier note.\n\nLate note."
    assert body["tools"] == [
        {"name": "clock__now", "input_schema": {"type": "object", "properties": {}}}
    ]
    assert "stream" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "time?"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "clock__now", "input": {"tz": "UTC"}},
            {"type": "tool_use", "id": "toolu_2", "name": "clock__now", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"time": "12:00"}'},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no tz", "is_error": True},
            {"type": "text", "text": "thanks"},
        ]},
    ]


def test_max_tokens_param_and_stream_flag() -> None:
    body = model().to_wire(ModelRequest(messages=[], params={"maxTokens": 99}), stream=True)
    assert body["max_tokens"] == 99 and body["stream"] is True and "system" not in body


def test_url_and_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    m = model(endpoint="http://127.0.0.1:9/v1/")
    assert m.url(stream=True) == "http://127.0.0.1:9/v1/messages"
    assert m.headers() == {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-wire-test"}
    with pytest.raises(LlmAuthError) as info:
        model(api_key=None).headers()
    assert "ANTHROPIC_API_KEY" in (info.value.suggestion or "")


MESSAGE: dict[str, Any] = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x-2025",
    "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "clock__now", "input": {"tz": "UTC"}},
        {"type": "tool_use", "id": "toolu_2", "name": "fs__read", "input": {"path": "x"}},
    ],
    "stop_reason": "tool_use", "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 20, "cache_creation_input_tokens": 5,
              "cache_read_input_tokens": 100},
}


def test_response_parsing() -> None:
    response = model().from_wire(MESSAGE)
    assert response.text == "Checking."
    assert response.tool_calls == [ToolCall("toolu_1", "clock__now", {"tz": "UTC"}),
                                   ToolCall("toolu_2", "fs__read", {"path": "x"})]
    assert response.finish_reason == "tool_calls"
    assert response.usage == TokenUsage(
        input_tokens=115, output_tokens=20, total_tokens=135, cached_tokens=100
    )
    assert response.model == "claude-x-2025"
    assert response.reasoning == [
        {"type": "reasoning", "text": "hmm", "providerOptions": {"anthropic": {"signature": "s"}}}
    ]


def test_signed_thinking_is_replayed_with_the_tool_use_turn() -> None:
    """Extended thinking + tool use: Claude needs the signed thinking blocks back verbatim,
    first in the assistant turn; redacted blocks travel as data; unsigned reasoning is dropped."""
    m = model()
    response = m.from_wire(MESSAGE)
    stored = Message.assistant(
        response.text,
        response.tool_calls,
        reasoning=[
            *response.reasoning,
            {
                "type": "reasoning",
                "text": "",
                "providerOptions": {"anthropic": {"redactedData": "enc=="}},
            },
            {"type": "reasoning", "text": "from another provider"},
        ],
    )
    results = [
        Message.tool_result(ToolCallResult.success(c.id, c.name, "ok")).data
        for c in response.tool_calls
    ]
    body = m.to_wire(
        ModelRequest(messages=[{"role": "user", "content": "time?"}, stored.data, *results])
    )
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant"
    assert [b["type"] for b in assistant["content"]] == [
        "thinking", "redacted_thinking", "text", "tool_use", "tool_use"]
    assert assistant["content"][0] == {"type": "thinking", "thinking": "hmm", "signature": "s"}
    assert assistant["content"][1] == {"type": "redacted_thinking", "data": "enc=="}
    assert stored.text == "Checking."  # reasoning never becomes answer text


@pytest.mark.parametrize(
    ("raw", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "other"),
    ],
)
def test_finish_reasons(raw: str, finish: str) -> None:
    assert model().from_wire({"content": [], "stop_reason": raw}).finish_reason == finish


def test_bad_shape() -> None:
    with pytest.raises(LlmBadResponseError):
        model().from_wire({"id": "x"})


def _events() -> list[SseEvent]:
    raw: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-x-2025",
                    "content": [],
                    "stop_reason": None,
                    "usage": {
                        "input_tokens": 10,
                        "output_tokens": 1,
                        "cache_creation_input_tokens": 5,
                        "cache_read_input_tokens": 100,
                    },
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "thinking_delta", "thinking": "hmm"},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "s"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "Check"},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "text_delta", "text": "ing."},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "clock__now",
                    "input": {},
                },
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"tz": '},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '"UTC"}'},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 2}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 3,
                "content_block": {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "fs__read",
                    "input": {},
                },
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 3,
                "delta": {"type": "input_json_delta", "partial_json": '{"path": "x"}'},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 3}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [SseEvent(data=json.dumps(d), event=e) for e, d in raw]


def _feed(m: AnthropicModel, events: list[SseEvent]) -> tuple[list[StreamDelta], ModelResponse]:
    stream = m.new_stream()
    deltas: list[StreamDelta] = []
    for event in events:
        deltas += stream.feed(event)
    return deltas, stream.finish()


def test_stream_equals_the_non_streamed_response() -> None:
    m = model()
    deltas, response = _feed(m, _events())
    assert response == m.from_wire(MESSAGE)
    assert [d.text for d in deltas if d.kind == "text"] == ["Check", "ing."]
    assert [
        (d.index, d.tool_call_id, d.tool_name, d.args_delta)
        for d in deltas
        if d.kind == "tool_call"
    ] == [
        (0, "toolu_1", "clock__now", ""),
        (0, None, None, '{"tz": '),
        (0, None, None, '"UTC"}'),
        (1, "toolu_2", "fs__read", ""),
        (1, None, None, '{"path": "x"}'),
    ]


def test_stream_cut_before_message_stop() -> None:
    with pytest.raises(LlmBadResponseError):
        _feed(model(), _events()[:8])


@pytest.mark.parametrize(
    ("kind", "cls"), [("overloaded_error", LlmError), ("rate_limit_error", LlmRateLimitError)]
)
def test_stream_error_event(kind: str, cls: type[LlmError]) -> None:
    stream = model().new_stream()
    stream.feed(_events()[0])
    with pytest.raises(cls) as info:
        stream.feed(
            SseEvent(
                data=json.dumps(
                    {"type": "error", "error": {"type": kind, "message": "Overloaded"}}
                ),
                event="error",
            )
        )
    assert "Overloaded" in info.value.message
