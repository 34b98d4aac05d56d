"""Gemini generateContent: request building, response parsing, generated ids, stream chunks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from goondan.conversation.messages import Message
from goondan.errors import LlmAuthError, LlmBadResponseError, LlmHttpError
from goondan.llm.base import ModelRequest, ModelResponse, ModelSpec, StreamDelta
from goondan.llm.google import GENERATED_ID_PREFIX, GoogleModel
from goondan.llm.registry import create_model
from goondan.llm.sse import SseEvent
from goondan.types import TokenUsage, ToolCatalogItem

TOOL = ToolCatalogItem("clock__now", "Now.", {"type": "object", "additionalProperties": False})


def model(**spec: Any) -> GoogleModel:
    values: dict[str, Any] = {
        "provider": "google",
        "model": "gemini-2.5-flash",
        "api_key": "AIza-wire-test",
    }
    values.update(spec)
    built = create_model(ModelSpec(**values))
    assert isinstance(built, GoogleModel)
    return built


def test_request_body_field_by_field() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "time?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool-call",
                    "toolCallId": "gcall-abc",
                    "toolName": "clock__now",
                    "input": {"tz": "UTC"},
                    "providerOptions": {"google": {"thoughtSignature": "sig=="}},
                },
                {
                    "type": "tool-call",
                    "toolCallId": "server-id",
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
                    "toolCallId": "gcall-abc",
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
                    "toolCallId": "server-id",
                    "toolName": "clock__now",
                    "output": {"type": "error-json", "value": {"code": "E_X"}},
                }
            ],
        },
        {"role": "system", "content": "Mid note."},
    ]
    body = model(options={"topK": 3, "safetySettings": [{"category": "X"}]}).to_wire(ModelRequest(
        messages=messages, tools=[TOOL], system="Be terse.",
        params={"temperature": 0.3, "maxTokens": 50, "topP": 0.7}))
    assert body["systemInstruction"] == {"parts": [{"text": "Be terse.\n\nMid note."}]}
    assert body["generationConfig"] == {
        "topK": 3,
        "temperature": 0.3,
        "maxOutputTokens": 50,
        "topP": 0.7,
    }
    assert body["safetySettings"] == [{"category": "X"}]
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "clock__now", "parametersJsonSchema": TOOL.parameters, "description": "Now."}]}]
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "time?"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "clock__now", "args": {"tz": "UTC"}},
                    "thoughtSignature": "sig==",
                },
                {"functionCall": {"name": "clock__now", "args": {}, "id": "server-id"}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "clock__now", "response": {"output": "12:00"}}},
                {
                    "functionResponse": {
                        "name": "clock__now",
                        "response": {"error": {"code": "E_X"}},
                        "id": "server-id",
                    }
                },
            ],
        },
    ]


def test_urls_and_key_header_never_in_url() -> None:
    m = model(endpoint="http://127.0.0.1:1/v1beta")
    assert m.url(stream=False) == "http://127.0.0.1:1/v1beta/models/gemini-2.5-flash:generateContent"
    assert m.url(stream=True) == "http://127.0.0.1:1/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert m.headers() == {"x-goog-api-key": "AIza-wire-test"}
    assert "AIza" not in m.url(stream=True)


def test_key_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LlmAuthError) as info:
        model(api_key=None).headers()
    assert "GOOGLE_GENERATIVE_AI_API_KEY" in (info.value.suggestion or "")
    assert "GEMINI_API_KEY" in (info.value.suggestion or "")
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-env-key")
    assert model(api_key=None).headers() == {"x-goog-api-key": "AIza-env-key"}


RESPONSE: dict[str, Any] = {
    "candidates": [{"content": {"role": "model", "parts": [
        {"text": "thinking...", "thought": True},
        {"text": "Checking "}, {"text": "now."},
        {"functionCall": {"name": "clock__now", "args": {"tz": "UTC"}}, "thoughtSignature": "sig1"},
        {"functionCall": {"name": "fs__read", "args": {"path": "x"}}},
    ]}, "finishReason": "STOP", "index": 0}],
    "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 10, "thoughtsTokenCount": 5,
                      "totalTokenCount": 55, "cachedContentTokenCount": 32},
    "modelVersion": "gemini-2.5-flash-001", "responseId": "resp-1",
}
REQUEST = ModelRequest(messages=[{"role": "user", "content": "time?"}])


def test_response_parsing_and_generated_ids() -> None:
    m = model()
    response = m.from_wire(RESPONSE, request=REQUEST)
    assert response.text == "Checking now."
    assert [(c.name, c.args) for c in response.tool_calls] == [
        ("clock__now", {"tz": "UTC"}),
        ("fs__read", {"path": "x"}),
    ]
    ids = [c.id for c in response.tool_calls]
    assert all(i.startswith(GENERATED_ID_PREFIX) for i in ids) and len(set(ids)) == 2
    # The same reply again (another turn, even with the same request) never reuses an id.
    assert not set(ids) & {c.id for c in m.from_wire(RESPONSE, request=REQUEST).tool_calls}
    assert response.finish_reason == "tool_calls" and response.raw_finish_reason == "STOP"
    assert response.usage == TokenUsage(40, 15, 55, 32)
    assert response.provider_metadata["google"] == {"thoughtSignatures": {ids[0]: "sig1"}}
    assert response.tool_call_options == {ids[0]: {"google": {"thoughtSignature": "sig1"}}}


def test_thought_signatures_round_trip_through_the_stored_assistant_message() -> None:
    """A signature returned with a functionCall is stored on the tool-call part and sent back."""
    m = model()
    response = m.from_wire(RESPONSE, request=REQUEST)
    stored = Message.assistant(
        response.text, response.tool_calls, call_options=response.tool_call_options
    )
    wire = m.to_wire(ModelRequest(messages=[*REQUEST.messages, stored.data]))
    sent = [
        p
        for c in wire["contents"]
        if c["role"] == "model"
        for p in c["parts"]
        if "functionCall" in p
    ]
    assert [p.get("thoughtSignature") for p in sent] == ["sig1", None]


def test_server_sent_call_ids_are_kept() -> None:
    body = {
        "candidates": [
            {
                "content": {"parts": [{"functionCall": {"id": "fc-9", "name": "t", "args": {}}}]},
                "finishReason": "STOP",
            }
        ]
    }
    assert model().from_wire(body).tool_calls[0].id == "fc-9"


@pytest.mark.parametrize(
    ("raw", "finish"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "error"),
        ("OTHER", "other"),
    ],
)
def test_finish_reasons(raw: str, finish: str) -> None:
    body = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": raw}]}
    assert model().from_wire(body).finish_reason == finish


def test_blocked_prompt_and_bad_shapes() -> None:
    blocked = model().from_wire({"promptFeedback": {"blockReason": "SAFETY"}})
    assert blocked.finish_reason == "content_filter" and blocked.text == ""
    with pytest.raises(LlmBadResponseError):
        model().from_wire({"candidates": []})
    with pytest.raises(LlmHttpError):
        model().from_wire({"error": {"code": 500, "message": "internal", "status": "INTERNAL"}})


def _chunks() -> list[dict[str, Any]]:
    meta = {"modelVersion": "gemini-2.5-flash-001", "responseId": "resp-1"}
    parts = RESPONSE["candidates"][0]["content"]["parts"]
    return [
        {"candidates": [{"content": {"role": "model", "parts": [parts[0]]}}], **meta},
        {"candidates": [{"content": {"role": "model", "parts": [parts[1]]}}], **meta},
        {"candidates": [{"content": {"role": "model", "parts": [parts[2], parts[3]]}}], **meta},
        {
            "candidates": [
                {"content": {"role": "model", "parts": [parts[4]]}, "finishReason": "STOP"}
            ],
            "usageMetadata": RESPONSE["usageMetadata"],
            **meta,
        },
    ]


def _feed(m: GoogleModel, chunks: list[dict[str, Any]]) -> tuple[list[StreamDelta], ModelResponse]:
    stream = m.new_stream(REQUEST)
    deltas: list[StreamDelta] = []
    for chunk in chunks:
        deltas += stream.feed(SseEvent(data=json.dumps(chunk)))
    return deltas, stream.finish()


def _positional_ids(response: ModelResponse) -> str:
    """``repr(response)`` with each generated call id replaced by the call's position."""
    text = repr(response)
    for index, call in enumerate(response.tool_calls):
        assert call.id.startswith(GENERATED_ID_PREFIX)
        text = text.replace(call.id, f"<call {index}>")
    return text


def test_stream_equals_the_non_streamed_response() -> None:
    m = model()
    deltas, response = _feed(m, _chunks())
    # Equal up to the generated ids, which are random (unique in the conversation).
    assert _positional_ids(response) == _positional_ids(m.from_wire(RESPONSE, request=REQUEST))
    assert [d.text for d in deltas if d.kind == "text"] == ["Checking ", "now."]
    calls = [d for d in deltas if d.kind == "tool_call"]
    assert [(d.index, d.tool_call_id, d.tool_name, json.loads(d.args_delta)) for d in calls] == [
        (i, c.id, c.name, c.args) for i, c in enumerate(response.tool_calls)]


def test_stream_without_finish_reason_is_cut() -> None:
    with pytest.raises(LlmBadResponseError):
        _feed(model(), _chunks()[:3])
