"""Acceptance tests shared by the three providers, through the fake provider server.

Plain and streamed replies, tool calls, usage, retries (429 + Retry-After, 5xx backoff), errors
that must not be retried (401, malformed JSON, a stream cut mid-way), timeouts, cancellation and
"the API key never appears in an error". Wire-format details of each provider's request bodies
are asserted in ``test_providers_<provider>.py``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import pytest

from goondan.errors import (
    LlmAuthError,
    LlmBadResponseError,
    LlmError,
    LlmHttpError,
    LlmRateLimitError,
    LlmTimeoutError,
)
from goondan.llm.base import ModelResponse, StreamDelta
from goondan.types import ToolCall
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall, Provider
from tests.support.llm_acceptance import (
    API_KEY,
    PROVIDERS,
    SleepRecorder,
    assert_no_key,
    first_request,
    make_model,
    reassemble,
    round_trip_request,
)

pytestmark = [pytest.mark.parametrize("provider", PROVIDERS), pytest.mark.timeout(30)]

TEXT = "It is 9 pm in Seoul, friend."


def _generate(fake: FakeProvider, provider: Provider, *, stream: bool = False,
              deltas: list[StreamDelta] | None = None, **kwargs: Any) -> ModelResponse:
    model = make_model(fake, provider, **kwargs)
    return run(model.generate(first_request(), stream=stream,
                              on_delta=deltas.append if deltas is not None else None))


def _error(fake: FakeProvider, provider: Provider, *, stream: bool = False,
           **kwargs: Any) -> LlmError:
    with pytest.raises(LlmError) as info:
        _generate(fake, provider, stream=stream, **kwargs)
    error = info.value
    assert_no_key(str(error), repr(error), error.message, error.suggestion or "", error.to_dict())
    return error


def _same(a: ModelResponse, b: ModelResponse, provider: Provider) -> None:
    """Streamed and non-streamed results agree (ids are generated client-side for Gemini)."""
    assert (a.text, a.finish_reason, a.usage) == (b.text, b.finish_reason, b.usage)
    if provider == "google":
        assert [(c.name, c.args) for c in a.tool_calls] == [(c.name, c.args) for c in b.tool_calls]
    else:
        assert a.tool_calls == b.tool_calls


# -- replies ---------------------------------------------------------------------------------------


def test_plain_reply(fake_provider: FakeProvider, provider: Provider) -> None:
    fake_provider.enqueue(FakeReply.reply(TEXT, input_tokens=21, output_tokens=8))
    response = _generate(fake_provider, provider)
    assert response.text == TEXT
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (21, 8, 29)
    assert len(fake_provider.requests) == 1
    assert not fake_provider.requests[0].stream


def test_streamed_reply_delivers_ordered_deltas_and_the_same_result(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    reply = FakeReply.reply(TEXT, input_tokens=21, output_tokens=8, chunks=4)
    fake_provider.enqueue(reply, reply)
    plain = _generate(fake_provider, provider)
    deltas: list[StreamDelta] = []
    streamed = _generate(fake_provider, provider, stream=True, deltas=deltas)
    text_deltas = [d.text for d in deltas if d.kind == "text" and d.text]
    assert len(text_deltas) >= 2, "text should arrive incrementally"
    assert "".join(text_deltas) == TEXT
    _same(streamed, plain, provider)
    assert fake_provider.requests[1].stream


def test_several_tool_calls_in_one_reply(fake_provider: FakeProvider, provider: Provider) -> None:
    reply = FakeReply.calls(
        ("clock__now", {"tz": "Asia/Seoul"}),
        ("fs__read", {"path": "notes/today.md"}),
        ("clock__now", {"tz": "UTC"}),
        text="Let me check.",
    )
    fake_provider.enqueue(reply)
    response = _generate(fake_provider, provider)
    assert response.finish_reason == "tool_calls"
    assert response.text == "Let me check."
    assert [(c.name, c.args) for c in response.tool_calls] == [
        ("clock__now", {"tz": "Asia/Seoul"}), ("fs__read", {"path": "notes/today.md"}),
        ("clock__now", {"tz": "UTC"}),
    ]
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == 3, ids
    if provider != "google":  # Gemini sends no ids; the adapter makes them up
        assert ids == [f"{'call' if provider == 'openai' else 'toolu'}_fake1_{i}" for i in range(3)]


def test_streamed_tool_calls_match_the_non_streamed_ones(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    reply = FakeReply.calls(("clock__now", {"tz": "Asia/Seoul"}), ("fs__read", {"path": "a b.txt"}),
                            text="Checking both.")
    fake_provider.enqueue(reply, reply)
    plain = _generate(fake_provider, provider)
    deltas: list[StreamDelta] = []
    streamed = _generate(fake_provider, provider, stream=True, deltas=deltas)
    _same(streamed, plain, provider)
    text, calls = reassemble(deltas)
    assert text == "Checking both."
    assert [(name, args) for _, name, args in calls] == [
        ("clock__now", {"tz": "Asia/Seoul"}), ("fs__read", {"path": "a b.txt"}),
    ]
    assert [cid for cid, _, _ in calls] == [c.id for c in streamed.tool_calls]


def test_tool_call_round_trip(fake_provider: FakeProvider, provider: Provider) -> None:
    fake_provider.enqueue(FakeReply.calls(("clock__now", {"tz": "Asia/Seoul"})),
                          FakeReply.reply("It is 21:00."))
    model = make_model(fake_provider, provider)
    first = run(model.generate(first_request()))
    second = run(model.generate(round_trip_request(first, [{"iso": "2026-03-04T21:00:00+09:00"}])))
    assert second.text == "It is 21:00." and second.finish_reason == "stop"
    assert len(fake_provider.requests) == 2
    body = json.dumps(fake_provider.requests[1].json)
    assert "2026-03-04T21:00:00+09:00" in body and "clock__now" in body


def test_usage_with_cached_tokens(fake_provider: FakeProvider, provider: Provider) -> None:
    fake_provider.enqueue(
        FakeReply.reply("ok", input_tokens=100, output_tokens=4, cached_tokens=64),
        FakeReply.reply("ok", input_tokens=100, output_tokens=4, cached_tokens=64),
    )
    plain = _generate(fake_provider, provider)
    streamed = _generate(fake_provider, provider, stream=True)
    for usage in (plain.usage, streamed.usage):
        assert usage.output_tokens == 4
        assert usage.cached_tokens == 64
        assert usage.total_tokens >= 104


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_other_finish_reasons(fake_provider: FakeProvider, provider: Provider, finish: str) -> None:
    fake_provider.enqueue(FakeReply.reply("cut", finish=finish))
    assert _generate(fake_provider, provider).finish_reason == finish


def test_streamed_non_ascii_text_survives_chunking(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    text = "서울은 지금 밤 9시입니다 🌙 — ça va?"
    fake_provider.enqueue(FakeReply.reply(text, chunks=7))
    deltas: list[StreamDelta] = []
    assert _generate(fake_provider, provider, stream=True, deltas=deltas).text == text
    assert "".join(d.text for d in deltas) == text


# -- retries ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_429_then_success_honours_retry_after(
    fake_provider: FakeProvider, provider: Provider, stream: bool
) -> None:
    fake_provider.enqueue(FakeReply.error(429, "Rate limit reached", retry_after="2"),
                          FakeReply.reply(TEXT))
    sleeps = SleepRecorder()
    response = _generate(fake_provider, provider, stream=stream, sleeps=sleeps)
    assert response.text == TEXT
    assert len(fake_provider.requests) == 2, "exactly one retry"
    assert sleeps.delays == [2.0], "the Retry-After value is the delay"
    first, second = fake_provider.requests
    assert first.json == second.json, "the retry re-sends the same body"


def test_server_errors_back_off_exponentially(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    fake_provider.enqueue(FakeReply.error(500, "internal"), FakeReply.error(503, "unavailable"),
                          FakeReply.reply(TEXT))
    sleeps = SleepRecorder()
    assert _generate(fake_provider, provider, sleeps=sleeps).text == TEXT
    assert len(fake_provider.requests) == 3
    assert sleeps.delays == pytest.approx([0.01, 0.02])  # base 0.01 * 2**n, jitter pinned to 1.0


def test_rate_limit_gives_up_after_max_retries(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    fake_provider.enqueue(*[FakeReply.error(429, "slow down", retry_after="1")] * 3)
    sleeps = SleepRecorder()
    error = _error(fake_provider, provider, sleeps=sleeps, max_retries=2)
    assert isinstance(error, LlmRateLimitError) and error.code == "E_LLM_RATE_LIMIT"
    assert len(fake_provider.requests) == 3 and sleeps.delays == [1.0, 1.0]


# -- errors that are not retried -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_401_is_not_retried_and_never_shows_the_key(
    fake_provider: FakeProvider, provider: Provider, stream: bool
) -> None:
    # Some providers echo the key they rejected; it must still not reach the error.
    fake_provider.enqueue(FakeReply.error(401, f"Incorrect API key provided: {API_KEY}."),
                          FakeReply.reply("never sent"))
    sleeps = SleepRecorder()
    error = _error(fake_provider, provider, stream=stream, sleeps=sleeps)
    assert isinstance(error, LlmAuthError)
    assert error.code == "E_LLM_AUTH" and error.exit_code == 6
    assert "401" in error.message and "Incorrect API key provided" in error.message
    assert len(fake_provider.requests) == 1 and sleeps.delays == []


@pytest.mark.parametrize("status", [400, 404])
def test_client_errors_are_not_retried(
    fake_provider: FakeProvider, provider: Provider, status: int
) -> None:
    fake_provider.enqueue(
        FakeReply.error(status, "model: unknown model 'x'"), FakeReply.reply("never")
    )
    error = _error(fake_provider, provider)
    assert isinstance(error, LlmHttpError) and error.status == status and error.code == "E_LLM_HTTP"
    assert "unknown model" in error.message, "the provider's message is kept"
    assert len(fake_provider.requests) == 1


def test_malformed_json_is_a_bad_response(fake_provider: FakeProvider, provider: Provider) -> None:
    fake_provider.enqueue(FakeReply.malformed(), FakeReply.reply("never"))
    error = _error(fake_provider, provider)
    assert isinstance(error, LlmBadResponseError) and error.code == "E_LLM_BAD_RESPONSE"
    assert len(fake_provider.requests) == 1


def test_malformed_stream_event_is_a_bad_response(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    separator = "\r\n\r\n" if provider == "google" else "\n\n"
    fake_provider.enqueue(FakeReply(raw_events=[f"data: {{\"candidates\": [{separator}"]))
    error = _error(fake_provider, provider, stream=True)
    assert isinstance(error, LlmBadResponseError)
    assert len(fake_provider.requests) == 1


def test_stream_cut_mid_way_is_an_error_and_not_retried(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    fake_provider.enqueue(
        FakeReply.reply(TEXT, chunks=6, truncate_after=5), FakeReply.reply("never")
    )
    deltas: list[StreamDelta] = []
    sleeps = SleepRecorder()
    with pytest.raises(LlmError) as info:
        _generate(fake_provider, provider, stream=True, deltas=deltas, sleeps=sleeps)
    assert isinstance(info.value, LlmBadResponseError), "a cut stream is not retryable"
    assert_no_key(str(info.value))
    assert len(fake_provider.requests) == 1 and sleeps.delays == [], (
        "no retry after a partial stream"
    )
    partial = "".join(d.text for d in deltas)
    assert partial and TEXT.startswith(partial) and partial != TEXT


def test_stream_ending_without_its_terminal_event_is_an_error(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    # A clean end of the HTTP body, but the provider's "done" marker never came.
    separator = "\r\n\r\n" if provider == "google" else "\n\n"
    events = {
        "openai": ['data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m",'
                   '"choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}]}\n\n'],
        "anthropic": ['event: message_start\ndata: {"type":"message_start","message":{"id":"m",'
                      '"type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,'
                      '"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}\n\n',
                      'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
                      '"content_block":{"type":"text","text":""}}\n\n',
                      'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
                      '"delta":{"type":"text_delta","text":"half"}}\n\n'],
        "google": ['data: {"candidates":[{"content":{"parts":[{"text":"half"}],"role":"model"},'
                   f'"index":0}}]}}{separator}'],
    }[provider]
    fake_provider.enqueue(FakeReply(raw_events=events))
    error = _error(fake_provider, provider, stream=True)
    assert isinstance(error, LlmBadResponseError)
    assert len(fake_provider.requests) == 1


# -- keys, timeouts, cancellation ------------------------------------------------------------------


def test_missing_key_is_an_auth_error_naming_the_variable(provider: Provider) -> None:
    # The provider's public host needs a key; the lookup fails before any request is built.
    from goondan.llm.base import ModelSpec
    from goondan.llm.provider import HttpModel
    from goondan.llm.registry import create_model

    expected = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY",
                "google": "GEMINI_API_KEY"}[provider]
    model = create_model(ModelSpec(provider=provider, model="m", name=f"{provider}-test"))
    assert isinstance(model, HttpModel) and model.is_public_endpoint()
    with pytest.raises(LlmAuthError) as info:
        model.headers()
    assert info.value.code == "E_LLM_AUTH"
    assert expected in (info.value.suggestion or "") + info.value.message


def test_a_self_hosted_endpoint_needs_no_key(
    fake_provider: FakeProvider, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A keyless local server works without a dummy key, and the provider's usual variable is
    # not sent to a host the Model named itself (docs/models.md "Endpoints and API keys").
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, "sk-env-key-must-not-travel")
    fake_provider.enqueue(FakeReply.reply(TEXT))
    assert _generate(fake_provider, provider, api_key=None).text == TEXT
    assert "sk-env-key-must-not-travel" not in fake_provider.requests[0].raw_text


def test_read_timeout_is_e_llm_timeout(fake_provider: FakeProvider, provider: Provider) -> None:
    fake_provider.enqueue(FakeReply.hanging())
    error = _error(fake_provider, provider, timeout_ms=200, max_retries=0)
    assert isinstance(error, LlmTimeoutError) and error.code == "E_LLM_TIMEOUT"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_cancellation_aborts_the_request_promptly(
    fake_provider: FakeProvider, provider: Provider, stream: bool
) -> None:
    reply = FakeReply.reply(TEXT, hang_after=2) if stream else FakeReply.hanging()
    fake_provider.enqueue(reply)
    model = make_model(fake_provider, provider)

    async def scenario() -> float:
        task = asyncio.create_task(model.generate(first_request(), stream=stream))
        await asyncio.to_thread(fake_provider.wait_for_requests, 1)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    assert run(scenario()) < 2.0
    fake_provider.wait_for_disconnects(1)  # the server saw the connection close


def test_a_model_is_reusable_after_an_error(
    fake_provider: FakeProvider, provider: Provider
) -> None:
    fake_provider.enqueue(FakeReply.error(400, "bad"), FakeReply.reply(TEXT))
    model = make_model(fake_provider, provider)
    with pytest.raises(LlmHttpError):
        run(model.generate(first_request()))
    assert run(model.generate(first_request())).text == TEXT


def test_repr_hides_the_key(fake_provider: FakeProvider, provider: Provider) -> None:
    model = make_model(fake_provider, provider)
    assert_no_key(repr(model), str(model), repr(getattr(model, "spec", "")))


def test_canonical_tool_call_type(fake_provider: FakeProvider, provider: Provider) -> None:
    fake_provider.enqueue(FakeReply.calls(FakeToolCall("clock__now", {"tz": "UTC"})))
    call = _generate(fake_provider, provider).tool_calls[0]
    assert isinstance(call, ToolCall) and call.args == {"tz": "UTC"}


def test_retry_really_waits_for_the_server(fake_provider: FakeProvider, provider: Provider) -> None:
    # Real sleeping this once (the default RetryPolicy.sleep); retry-after-ms keeps it short.
    from goondan.llm.base import ModelSpec
    from goondan.llm.http import RetryPolicy
    from goondan.llm.registry import create_model

    fake_provider.enqueue(FakeReply.error(429, "slow down", headers={"retry-after-ms": "150"}),
                          FakeReply.reply(TEXT))
    spec = ModelSpec(
        provider=provider, model="m", api_key=API_KEY, endpoint=fake_provider.base_url(provider)
    )
    model = create_model(spec, retry_policy=RetryPolicy(max_retries=1))
    assert run(model.generate(first_request())).text == TEXT
    first, second = fake_provider.requests
    assert second.timestamp - first.timestamp >= 0.15


def test_forbidden_model_requests_never_leave_the_machine(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    from goondan.llm.base import ModelSpec
    from goondan.llm.registry import create_model
    from goondan.llm.testing import ModelRequestsForbiddenError, forbid_model_requests

    # default endpoint
    model = create_model(ModelSpec(provider=provider, model="m", api_key=API_KEY))
    def no_connection(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the guard must refuse before any connection is attempted")

    # Every outbound connection (urllib3's included) starts with a name lookup.
    monkeypatch.setattr(socket, "getaddrinfo", no_connection)
    with forbid_model_requests(), pytest.raises(ModelRequestsForbiddenError) as info:
        run(model.generate(first_request()))
    assert info.value.code == "E_LLM_REQUESTS_FORBIDDEN"
    assert_no_key(str(info.value))
