"""Anthropic Messages request bodies, asserted field by field against the API reference.

POST {endpoint}/messages with ``x-api-key`` and ``anthropic-version``; body ``model``,
top-level ``system``, ``messages`` (user / assistant only; ``tool_use`` blocks in the assistant
turn, ``tool_result`` blocks with ``tool_use_id`` in the following user turn), ``tools``
(``{name, description, input_schema}``), ``max_tokens`` (required), ``temperature``, ``top_p``.
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
    run(make_model(fake, "anthropic", options=options).generate(request, stream=stream))
    return fake.requests[-1]


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def test_first_request_body_and_headers(fake_provider: FakeProvider) -> None:
    sent = _send(fake_provider, first_request())
    assert sent.path == "/v1/messages"
    assert sent.header("x-api-key") == API_KEY
    assert sent.header("anthropic-version") == "2023-06-01"
    assert sent.header("Authorization") is None, "Anthropic authenticates with x-api-key only"
    assert (sent.header("Content-Type") or "").startswith("application/json")
    body = sent.json
    assert body["model"] == "claude-test"
    assert text_of(body["system"]) == SYSTEM
    assert body["messages"] == [{"role": "user", "content": body["messages"][0]["content"]}]
    assert text_of(body["messages"][0]["content"]) == QUESTION
    assert body["tools"][0] == {"name": "clock__now", "description": "Current time in a time zone.",
                                "input_schema": CLOCK_SCHEMA}
    assert [t["name"] for t in body["tools"]] == ["clock__now", "fs__read"]
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert not body.get("stream")


def test_max_tokens_has_a_default(fake_provider: FakeProvider) -> None:
    body = _send(fake_provider, first_request(params={})).json
    assert isinstance(body["max_tokens"], int) and body["max_tokens"] > 0
    assert "temperature" not in body


def test_streaming_body(fake_provider: FakeProvider) -> None:
    assert _send(fake_provider, first_request(), stream=True).json["stream"] is True


def test_tool_results_go_back_as_tool_result_blocks_in_one_user_turn(
    fake_provider: FakeProvider,
) -> None:
    fake_provider.enqueue(
        FakeReply.calls(
            ("clock__now", {"tz": "Asia/Seoul"}), ("fs__read", {"path": "a"}), text="Checking."
        ),
        FakeReply.reply("done"),
    )
    model = make_model(fake_provider, "anthropic")
    first = run(model.generate(first_request()))
    run(model.generate(round_trip_request(first, [{"iso": "21:00"}, "file text"])))
    messages = fake_provider.requests[1].json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assistant = _blocks(messages[1]["content"])
    assert {"type": "text", "text": "Checking."} in assistant
    uses = [b for b in assistant if b["type"] == "tool_use"]
    assert uses == [
        {
            "type": "tool_use",
            "id": "toolu_fake1_0",
            "name": "clock__now",
            "input": {"tz": "Asia/Seoul"},
        },
        {"type": "tool_use", "id": "toolu_fake1_1", "name": "fs__read", "input": {"path": "a"}},
    ]
    results = _blocks(messages[2]["content"])
    assert [b["type"] for b in results] == ["tool_result", "tool_result"]
    assert [b["tool_use_id"] for b in results] == ["toolu_fake1_0", "toolu_fake1_1"]
    assert json.loads(text_of(results[0]["content"])) == {"iso": "21:00"}
    assert text_of(results[1]["content"]) == "file text"
    assert not any(b.get("is_error") for b in results)


def test_error_results_are_flagged(fake_provider: FakeProvider) -> None:
    request = ModelRequest(messages=[
        {"role": "user", "content": QUESTION},
        assistant_with_calls([("toolu_1", "clock__now", {"tz": "UTC"})]),
        tool_result("toolu_1", "clock__now", {"code": "E_TOOL", "message": "boom"}, error=True),
    ])
    messages = _send(fake_provider, request).json["messages"]
    block = _blocks(messages[2]["content"])[0]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "toolu_1"
    assert block["is_error"] is True and "boom" in text_of(block["content"])


def test_system_messages_join_the_top_level_system(fake_provider: FakeProvider) -> None:
    request = ModelRequest(messages=[
        {"role": "system", "content": "Summary of earlier turns."},
        {"role": "user", "content": QUESTION},
    ], system=SYSTEM)
    body = _send(fake_provider, request).json
    system = text_of(body["system"])
    assert SYSTEM in system and "Summary of earlier turns." in system
    assert [m["role"] for m in body["messages"]] == ["user"], "no system role inside messages"


def test_extra_params_and_options_pass_through(fake_provider: FakeProvider) -> None:
    body = _send(
        fake_provider, first_request(params={"top_k": 5}), options={"metadata": {"user_id": "u1"}}
    ).json
    assert body["top_k"] == 5 and body["metadata"] == {"user_id": "u1"}


def test_error_event_mid_stream_is_an_error_without_retry(fake_provider: FakeProvider) -> None:
    from goondan.errors import LlmError

    fake_provider.enqueue(
        FakeReply(
            raw_events=[
                "event: message_start\ndata: "
                '{"type":"message_start","message":{"id":"msg_1","type":"message",'
                '"role":"assistant","content":[],"model":"claude-test","stop_reason":null,"stop_sequence":null,'
                '"usage":{"input_tokens":5,"output_tokens":1}}}\n\n',
                "event: error\ndata: "
                '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n',
            ]
        ),
        FakeReply.reply("never"),
    )
    with pytest.raises(LlmError, match="Overloaded"):
        run(make_model(fake_provider, "anthropic").generate(first_request(), stream=True))
    assert len(fake_provider.requests) == 1
