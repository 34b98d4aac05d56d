"""OpenAI Chat Completions request bodies, asserted field by field against the API reference.

POST {endpoint}/chat/completions, ``Authorization: Bearer <key>``; body ``model``, ``messages``
(system / user / assistant with ``tool_calls`` / ``tool`` with ``tool_call_id``), ``tools``
(``{"type": "function", "function": {name, description, parameters}}``), ``temperature``,
``top_p``, ``max_tokens`` (or ``max_completion_tokens``), ``stream`` + ``stream_options``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from goondan.llm.base import ModelRequest
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, RecordedRequest
from tests.support.llm_acceptance import (
    API_KEY,
    CLOCK_SCHEMA,
    QUESTION,
    SYSTEM,
    assistant_with_calls,
    first_request,
    make_model,
    round_trip_request,
    text_of,
    tool_result,
)

pytestmark = pytest.mark.timeout(30)


def _send(fake: FakeProvider, request: ModelRequest, *, stream: bool = False,
          options: dict[str, Any] | None = None) -> RecordedRequest:
    fake.enqueue(FakeReply.reply("ok"))
    run(make_model(fake, "openai", options=options).generate(request, stream=stream))
    return fake.requests[-1]


def test_first_request_body_and_headers(fake_provider: FakeProvider) -> None:
    sent = _send(fake_provider, first_request())
    assert sent.path == "/v1/chat/completions" and sent.method == "POST"
    assert sent.header("Authorization") == f"Bearer {API_KEY}"
    assert (sent.header("Content-Type") or "").startswith("application/json")
    body = sent.json
    assert body["model"] == "gpt-test"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert text_of(body["messages"][0]["content"]) == SYSTEM
    assert text_of(body["messages"][1]["content"]) == QUESTION
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "clock__now",
            "description": "Current time in a time zone.",
            "parameters": CLOCK_SCHEMA,
        },
    }
    assert [t["function"]["name"] for t in body["tools"]] == ["clock__now", "fs__read"]
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert body.get("max_tokens", body.get("max_completion_tokens")) == 256
    assert not body.get("stream")
    assert "stream_options" not in body


def test_streaming_body_asks_for_usage(fake_provider: FakeProvider) -> None:
    body = _send(fake_provider, first_request(), stream=True).json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_no_tools_means_no_tools_field(fake_provider: FakeProvider) -> None:
    body = _send(fake_provider, first_request(tools=False, params={})).json
    assert "tools" not in body or body["tools"] == []
    assert "temperature" not in body and "top_p" not in body


def test_tool_results_go_back_as_tool_messages(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(
        FakeReply.calls(
            ("clock__now", {"tz": "Asia/Seoul"}), ("fs__read", {"path": "a"}), text="Checking."
        ),
        FakeReply.reply("done"),
    )
    model = make_model(fake_provider, "openai")
    first = run(model.generate(first_request()))
    run(model.generate(round_trip_request(first, [{"iso": "21:00"}, "file text"])))
    messages = fake_provider.requests[1].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assistant = messages[2]
    assert text_of(assistant.get("content")) == "Checking."
    calls = assistant["tool_calls"]
    assert [(c["id"], c["type"], c["function"]["name"]) for c in calls] == [
        ("call_fake1_0", "function", "clock__now"), ("call_fake1_1", "function", "fs__read")]
    assert all(isinstance(c["function"]["arguments"], str) for c in calls), (
        "arguments are JSON text"
    )
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"tz": "Asia/Seoul"},
        {"path": "a"},
    ]
    assert messages[3]["tool_call_id"] == "call_fake1_0"
    assert json.loads(text_of(messages[3]["content"])) == {"iso": "21:00"}
    assert messages[4]["tool_call_id"] == "call_fake1_1"
    assert text_of(messages[4]["content"]) == "file text"


def test_assistant_without_text_has_null_or_empty_content(fake_provider: FakeProvider) -> None:
    request = ModelRequest(messages=[
        {"role": "user", "content": QUESTION},
        assistant_with_calls([("c1", "clock__now", {"tz": "UTC"})]),
        tool_result("c1", "clock__now", {"code": "E_TOOL", "message": "boom"}, error=True),
    ])
    messages = _send(fake_provider, request).json["messages"]
    assert messages[1]["content"] in (None, "", [])
    assert messages[2]["role"] == "tool" and messages[2]["tool_call_id"] == "c1"
    assert "boom" in text_of(messages[2]["content"]), "error results still reach the model"


def test_system_messages_in_the_conversation_are_sent(fake_provider: FakeProvider) -> None:
    request = ModelRequest(messages=[
        {"role": "system", "content": "Summary of earlier turns."},
        {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
    ], system=SYSTEM)
    messages = _send(fake_provider, request).json["messages"]
    roles_texts = [(m["role"], text_of(m["content"])) for m in messages]
    assert roles_texts[0] == ("system", SYSTEM)
    assert ("system", "Summary of earlier turns.") in roles_texts
    assert roles_texts[-1] == ("user", QUESTION)


def test_extra_params_and_options_pass_through(fake_provider: FakeProvider) -> None:
    request = first_request(params={"temperature": 0.5, "seed": 7})
    body = _send(fake_provider, request, options={"temperature": 0.1, "user": "u-1"}).json
    assert body["seed"] == 7 and body["user"] == "u-1"
    assert body["temperature"] == 0.5, "agent params win over model options"


def test_openai_compatible_local_server_needs_no_key(fake_provider: FakeProvider) -> None:
    from goondan.llm.base import ModelSpec
    from goondan.llm.registry import create_model

    fake_provider.enqueue(FakeReply.reply("local hello"))
    spec = ModelSpec(
        provider="openai-compatible", model="llama3.2", endpoint=fake_provider.base_url("openai")
    )
    assert run(create_model(spec).generate(first_request())).text == "local hello"
    sent = fake_provider.requests[0]
    assert sent.json["model"] == "llama3.2"
    assert not (sent.header("Authorization") or "").strip().removeprefix("Bearer").strip()
