"""Gemini generateContent request bodies, asserted field by field against the API reference.

POST {endpoint}/models/{model}:generateContent (``:streamGenerateContent?alt=sse`` streamed),
key in ``x-goog-api-key``; body ``contents`` (roles ``user`` / ``model``; ``functionCall`` parts
in model turns, ``functionResponse`` parts with an object ``response`` after them),
``systemInstruction``, ``tools: [{functionDeclarations: [...]}]`` and ``generationConfig``
(``temperature``, ``topP``, ``maxOutputTokens``).
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
    lower_types,
    make_model,
    round_trip_request,
    tool_result,
)

pytestmark = pytest.mark.timeout(30)


def _send(fake: FakeProvider, request: ModelRequest, *, stream: bool = False,
          options: dict[str, Any] | None = None) -> RecordedRequest:
    fake.enqueue(FakeReply.reply("ok"))
    run(make_model(fake, "google", options=options).generate(request, stream=stream))
    return fake.requests[-1]


def _texts(content: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in content.get("parts", []))


def test_first_request_body_and_headers(fake_provider: FakeProvider) -> None:
    sent = _send(fake_provider, first_request())
    assert sent.path == "/v1beta/models/gemini-test:generateContent"
    assert sent.header("x-goog-api-key") == API_KEY or sent.query.get("key") == API_KEY
    assert sent.header("Authorization") is None
    body = sent.json
    assert body["contents"] == [{"role": "user", "parts": [{"text": QUESTION}]}]
    assert _texts(body["systemInstruction"]) == SYSTEM
    declarations = body["tools"][0]["functionDeclarations"]
    assert len(body["tools"]) == 1 and [d["name"] for d in declarations] == [
        "clock__now",
        "fs__read",
    ]
    assert declarations[0]["description"] == "Current time in a time zone."
    # parametersJsonSchema takes full JSON Schema; parameters takes the OpenAPI subset.
    schema = declarations[0].get("parametersJsonSchema", declarations[0].get("parameters"))
    assert lower_types(schema) == CLOCK_SCHEMA
    config = body["generationConfig"]
    assert (
        config["temperature"] == 0.2 and config["topP"] == 0.9 and config["maxOutputTokens"] == 256
    )
    assert "model" not in body, "the model is in the path"


def test_streaming_uses_the_sse_endpoint(fake_provider: FakeProvider) -> None:
    sent = _send(fake_provider, first_request(), stream=True)
    assert sent.path == "/v1beta/models/gemini-test:streamGenerateContent"
    assert sent.query.get("alt") == "sse"


def test_function_responses_follow_the_model_turn(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(
        FakeReply.calls(
            ("clock__now", {"tz": "Asia/Seoul"}), ("fs__read", {"path": "a"}), text="Checking."
        ),
        FakeReply.reply("done"),
    )
    model = make_model(fake_provider, "google")
    first = run(model.generate(first_request()))
    run(model.generate(round_trip_request(first, [{"iso": "21:00"}, "file text"])))
    contents = fake_provider.requests[1].json["contents"]
    assert [c["role"] for c in contents][:2] == ["user", "model"]
    model_parts = contents[1]["parts"]
    assert {"text": "Checking."} in model_parts
    calls = [p["functionCall"] for p in model_parts if "functionCall" in p]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("clock__now", {"tz": "Asia/Seoul"}),
        ("fs__read", {"path": "a"}),
    ]
    # Every functionResponse comes after the model turn, in a user (or legacy "function") turn.
    rest = contents[2:]
    assert rest and all(c["role"] in ("user", "function") for c in rest)
    responses = [p["functionResponse"] for c in rest for p in c["parts"] if "functionResponse" in p]
    assert [r["name"] for r in responses] == ["clock__now", "fs__read"]
    assert all(isinstance(r["response"], dict) for r in responses), "response must be a JSON object"
    assert "21:00" in json.dumps(responses[0]["response"])
    assert "file text" in json.dumps(responses[1]["response"])


def test_error_results_reach_the_model(fake_provider: FakeProvider) -> None:
    request = ModelRequest(messages=[
        {"role": "user", "content": QUESTION},
        assistant_with_calls([("c1", "clock__now", {"tz": "UTC"})]),
        tool_result("c1", "clock__now", {"code": "E_TOOL", "message": "boom"}, error=True),
    ])
    contents = _send(fake_provider, request).json["contents"]
    response = next(
        p["functionResponse"] for c in contents for p in c["parts"] if "functionResponse" in p
    )
    assert response["name"] == "clock__now" and "boom" in json.dumps(response["response"])


def test_system_messages_join_the_system_instruction(fake_provider: FakeProvider) -> None:
    request = ModelRequest(messages=[
        {"role": "system", "content": "Summary of earlier turns."},
        {"role": "user", "content": QUESTION},
    ], system=SYSTEM)
    body = _send(fake_provider, request).json
    system = _texts(body["systemInstruction"])
    assert SYSTEM in system and "Summary of earlier turns." in system
    assert [c["role"] for c in body["contents"]] == ["user"]


def test_no_tools_and_no_params(fake_provider: FakeProvider) -> None:
    body = _send(fake_provider, first_request(tools=False, params={})).json
    assert not body.get("tools")
    assert "temperature" not in body.get("generationConfig", {})


def test_function_call_ids_from_the_server_are_kept(fake_provider: FakeProvider) -> None:
    from tests.support.fake_provider import FakeToolCall

    fake_provider.enqueue(FakeReply.calls(FakeToolCall("clock__now", {"tz": "UTC"}, id="fc-1")),
                          FakeReply.reply("done"))
    model = make_model(fake_provider, "google")
    first = run(model.generate(first_request()))
    assert [c.id for c in first.tool_calls] == ["fc-1"]
    run(model.generate(round_trip_request(first, ["12:00"])))
    contents = fake_provider.requests[1].json["contents"]
    response = next(
        p["functionResponse"] for c in contents for p in c["parts"] if "functionResponse" in p
    )
    assert response.get("id", "fc-1") == "fc-1"
