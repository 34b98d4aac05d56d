"""OpenAI Chat Completions: request building (to_wire) and response parsing (from_wire, streams)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goondan.errors import ConfigError, LlmAuthError, LlmBadResponseError
from goondan.llm.base import ModelRequest, ModelResponse, ModelSpec, StreamDelta
from goondan.llm.openai import OpenAIModel
from goondan.llm.registry import create_model
from goondan.llm.sse import SseEvent
from goondan.types import TokenUsage, ToolCall, ToolCatalogItem

TOOL = ToolCatalogItem(
    "clock__now", "Current time.", {"type": "object", "properties": {"tz": {"type": "string"}}}
)


def model(**spec: Any) -> OpenAIModel:
    values: dict[str, Any] = {
        "provider": "openai",
        "model": "gpt-4o",
        "api_key": "sk-openai-wire-test",
    }
    values.update(spec)
    built = create_model(ModelSpec(**values))
    assert isinstance(built, OpenAIModel)
    return built


CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "time?"},
    {"role": "system", "content": "Be brief."},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool-call",
                "toolCallId": "call_1",
                "toolName": "clock__now",
                "input": {"tz": "UTC"},
            },
            {
                "type": "tool-call",
                "toolCallId": "call_2",
                "toolName": "clock__now",
                "args": {"tz": "KST"},
            },
        ],
    },
    {
        "role": "tool",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "call_1",
                "toolName": "clock__now",
                "output": {"type": "text", "value": "12:00"},
            }
        ],
    },
    {
        "role": "tool",
        "content": [
            {
                "type": "tool-result",
                "toolCallId": "call_2",
                "toolName": "clock__now",
                "output": {"type": "error-json", "value": {"code": "E_X", "message": "boom"}},
            }
        ],
    },
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
]


def test_request_body_field_by_field() -> None:
    m = model(options={"seed": 7, "temperature": 0.9})
    request = ModelRequest(
        messages=CONVERSATION,
        tools=[TOOL],
        system="You are terse.",
        params={"temperature": 0.2, "maxTokens": 100, "topP": 0.5, "presence_penalty": 1},
    )
    body = m.to_wire(request)
    assert body["model"] == "gpt-4o"
    assert (body["temperature"], body["max_completion_tokens"], body["top_p"]) == (0.2, 100, 0.5)
    assert body["seed"] == 7 and body["presence_penalty"] == 1
    assert "stream" not in body and "max_tokens" not in body
    assert body["tools"] == [{"type": "function", "function": {
        "name": "clock__now", "parameters": TOOL.parameters, "description": "Current time."}}]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "time?"},
        {"role": "system", "content": "Be brief."},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "clock__now", "arguments": '{"tz": "UTC"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "clock__now", "arguments": '{"tz": "KST"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
        {"role": "tool", "tool_call_id": "call_2", "content": '{"code": "E_X", "message": "boom"}'},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]


def test_assistant_with_only_tool_calls_has_null_content() -> None:
    body = model().to_wire(ModelRequest(messages=[{"role": "assistant", "content": [
        {"type": "tool-call", "toolCallId": "c", "toolName": "t", "input": {}}]}]))
    assert body["messages"][0]["content"] is None


def test_stream_body_and_compatible_max_tokens() -> None:
    body = model(endpoint="http://localhost:11434/v1").to_wire(
        ModelRequest(messages=[{"role": "user", "content": "hi"}], params={"maxTokens": 5}),
        stream=True,
    )
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 5 and "max_completion_tokens" not in body
    forced = model(options={"maxTokensField": "max_tokens"}).to_wire(
        ModelRequest(messages=[], params={"maxTokens": 3})
    )
    assert forced["max_tokens"] == 3 and "maxTokensField" not in forced


def test_url_and_headers() -> None:
    m = model()
    assert m.url(stream=False) == "https://api.openai.com/v1/chat/completions"
    assert m.headers() == {"Authorization": "Bearer sk-openai-wire-test"}
    assert "sk-openai" not in repr(m)


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LlmAuthError) as info:
        model(api_key=None, api_key_env="MY_OPENAI_KEY").headers()
    assert "MY_OPENAI_KEY" in (info.value.suggestion or "") and "OPENAI_API_KEY" in (
        info.value.suggestion or ""
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-1234")
    assert model(api_key=None).headers() == {"Authorization": "Bearer sk-from-env-1234"}


def test_openai_compatible_needs_an_endpoint_and_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as info:
        create_model(ModelSpec(provider="openai-compatible", model="llama3"))
    assert info.value.code == "E_LLM_ENDPOINT_REQUIRED"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-travel")
    local = model(provider="openai-compatible", api_key=None, endpoint="http://127.0.0.1:8080/v1/")
    assert local.headers() == {} and local.url(stream=True) == "http://127.0.0.1:8080/v1/chat/completions"


def test_unknown_provider_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        create_model(ModelSpec(provider="nope", model="x"))
    assert info.value.code == "E_LLM_UNKNOWN_PROVIDER"


COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "gpt-4o-2024",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "clock__now", "arguments": '{"tz":"UTC"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "fs__read", "arguments": '{"path":"x"}'},
                    },
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 30,
        "completion_tokens": 12,
        "total_tokens": 42,
        "prompt_tokens_details": {"cached_tokens": 16},
    },
}


def test_response_parsing() -> None:
    response = model().from_wire(COMPLETION)
    assert response.text == "Let me check."
    assert response.tool_calls == [ToolCall("call_a", "clock__now", {"tz": "UTC"}),
                                   ToolCall("call_b", "fs__read", {"path": "x"})]
    assert response.finish_reason == "tool_calls" and response.raw_finish_reason == "tool_calls"
    assert response.usage == TokenUsage(30, 12, 42, 16)
    assert response.model == "gpt-4o-2024"


@pytest.mark.parametrize(
    ("raw", "finish"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("weird", "other"),
    ],
)
def test_finish_reasons(raw: str, finish: str) -> None:
    body = {"choices": [{"message": {"content": "x"}, "finish_reason": raw}]}
    assert model().from_wire(body).finish_reason == finish


@pytest.mark.parametrize("body", [{}, {"choices": []}, {"choices": [{"finish_reason": "stop"}]}])
def test_bad_shapes(body: dict[str, Any]) -> None:
    with pytest.raises(LlmBadResponseError):
        model().from_wire(body)


def test_malformed_tool_arguments_become_an_invalid_call() -> None:
    # The model's mistake, not the server's: the call is kept with its raw text, so the
    # executor can answer it with E_TOOL_INVALID_ARGS and the model can correct itself.
    body = {
        "choices": [
            {
                "message": {
                    "tool_calls": [{"id": "c", "function": {"name": "t", "arguments": "{bad"}}]
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    call = model().from_wire(body).tool_calls[0]
    assert (call.id, call.name, call.args, call.invalid_args) == ("c", "t", {}, "{bad")
    listed = {
        "choices": [
            {
                "message": {
                    "tool_calls": [{"id": "c", "function": {"name": "t", "arguments": "[1]"}}]
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    assert model().from_wire(listed).tool_calls[0].invalid_args == "[1]"


def _chunks() -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-2024"}
    deltas: list[dict[str, Any]] = [
        {"role": "assistant", "content": ""},
        {"content": "Let me "},
        {"content": "check."},
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "clock__now", "arguments": ""},
                }
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"tz":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"UTC"}'}}]},
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "fs__read", "arguments": '{"path":"x"}'},
                }
            ]
        },
    ]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    chunks.append({**base, "choices": [], "usage": COMPLETION["usage"]})
    return chunks


def _feed(m: OpenAIModel, datas: list[str]) -> tuple[list[StreamDelta], ModelResponse]:
    stream = m.new_stream()
    deltas: list[StreamDelta] = []
    for data in datas:
        deltas += stream.feed(SseEvent(data=data))
    return deltas, stream.finish()


def test_stream_equals_the_non_streamed_response() -> None:
    m = model()
    deltas, response = _feed(m, [json.dumps(c) for c in _chunks()] + ["[DONE]"])
    expected = m.from_wire(COMPLETION)
    expected.provider_metadata = response.provider_metadata
    assert response == expected
    assert [d.text for d in deltas if d.kind == "text"] == ["Let me ", "check."]
    tool = [
        (d.index, d.tool_call_id, d.tool_name, d.args_delta)
        for d in deltas
        if d.kind == "tool_call"
    ]
    assert tool == [
        (0, "call_a", "clock__now", ""),
        (0, None, None, '{"tz":'),
        (0, None, None, '"UTC"}'),
        (1, "call_b", "fs__read", '{"path":"x"}'),
    ]


def test_stream_cut_before_finish_is_a_bad_response() -> None:
    with pytest.raises(LlmBadResponseError):
        _feed(model(), [json.dumps(c) for c in _chunks()[:4]])


def test_stream_error_chunk_and_garbage() -> None:
    m = model()
    with pytest.raises(LlmBadResponseError):
        m.new_stream().feed(SseEvent(data="{not json"))
    with pytest.raises(Exception) as info:
        m.new_stream().feed(SseEvent(data=json.dumps({"error": {"message": "overloaded"}})))
    assert "overloaded" in str(info.value)
