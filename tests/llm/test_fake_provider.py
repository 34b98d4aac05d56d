"""The fake provider server itself, spoken to with the stdlib client (no adapter involved)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from tests.support.fake_provider import FakeProvider, FakeReply

pytestmark = pytest.mark.timeout(30)


def _post(fake: FakeProvider, path: str, body: dict[str, Any],
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _events(raw: bytes) -> list[str]:
    return [e for e in raw.decode().replace("\r\n", "\n").split("\n\n") if e]


def test_requests_are_recorded_with_headers_query_and_json(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue("hi")
    status, _, _ = _post(fake_provider, "/v1beta/models/g-1:streamGenerateContent?alt=sse",
                         {"contents": []}, {"x-goog-api-key": "k"})
    assert status == 200
    (sent,) = fake_provider.requests
    assert (sent.provider, sent.path, sent.query, sent.stream) == (
        "google", "/v1beta/models/g-1:streamGenerateContent", {"alt": "sse"}, True)
    assert sent.header("X-Goog-Api-Key") == "k" and sent.json == {"contents": []}
    fake_provider.assert_all_used()


def test_an_empty_queue_answers_418_so_nothing_retries(fake_provider: FakeProvider) -> None:
    status, _, body = _post(fake_provider, "/v1/chat/completions", {"model": "m"})
    assert status == 418 and b"no scripted reply" in body


def test_openai_stream_ends_with_usage_chunk_then_done(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeReply.calls(("a__b", {"x": 1}), text="hey"))
    _, headers, raw = _post(
        fake_provider,
        "/v1/chat/completions",
        {"model": "m", "stream": True, "stream_options": {"include_usage": True}},
    )
    assert headers["content-type"].startswith("text/event-stream")
    events = _events(raw)
    assert events[-1] == "data: [DONE]"
    usage_chunk = json.loads(events[-2].removeprefix("data: "))
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["total_tokens"] == 18
    finish = json.loads(events[-3].removeprefix("data: "))
    assert finish["choices"][0]["finish_reason"] == "tool_calls"


def test_anthropic_event_names_match_their_type(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeReply.calls(("a__b", {"x": 1}), text="hey"))
    _, _, raw = _post(fake_provider, "/v1/messages", {"model": "m", "stream": True})
    names = []
    for event in _events(raw):
        name_line, data_line = event.split("\n")
        name = name_line.removeprefix("event: ")
        assert json.loads(data_line.removeprefix("data: "))["type"] == name
        names.append(name)
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert "ping" in names and names.count("content_block_start") == 2


def test_errors_use_each_providers_shape(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(*[FakeReply.error(429, "slow", retry_after="3")] * 3)
    _, headers, raw = _post(fake_provider, "/v1/chat/completions", {"model": "m"})
    assert headers["retry-after"] == "3"
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"
    _, _, raw = _post(fake_provider, "/v1/messages", {"model": "m"})
    assert json.loads(raw)["error"] == {"type": "rate_limit_error", "message": "slow"}
    _, _, raw = _post(fake_provider, "/v1beta/models/g:generateContent", {})
    assert json.loads(raw)["error"] == {
        "code": 429,
        "message": "slow",
        "status": "RESOURCE_EXHAUSTED",
    }


def test_a_truncated_stream_is_a_protocol_error_for_the_client(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeReply.reply("abcdef", truncate_after=2))
    with pytest.raises(http.client.IncompleteRead):
        _post(fake_provider, "/v1/chat/completions", {"model": "m", "stream": True})


def test_a_client_hanging_up_on_a_hung_reply_is_counted(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeReply.hanging())
    conn = http.client.HTTPConnection("127.0.0.1", fake_provider.port, timeout=5)
    conn.request("POST", "/v1/messages", body="{}")
    fake_provider.wait_for_requests(1)
    conn.close()
    fake_provider.wait_for_disconnects(1)
