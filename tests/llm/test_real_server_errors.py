"""Messages and retry decisions against servers that misbehave (docs/models.md).

Connection errors name the host and the operating system's reason; the server's message is
logged once before retrying; a silent server gets a non-streamed request at most twice;
``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` stand in for ``spec.endpoint``.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest

from goondan.errors import (
    LlmBadResponseError,
    LlmConnectionError,
    LlmContextLengthError,
    LlmHttpError,
    LlmTimeoutError,
)
from goondan.llm.base import ModelRequest, ModelSpec
from goondan.llm.http import RetryPolicy
from goondan.llm.registry import create_model
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.llm_acceptance import SleepRecorder

pytestmark = pytest.mark.timeout(30)
REQUEST = ModelRequest(messages=[{"role": "user", "content": "hi"}])


def _model(endpoint: str | None, provider: str = "openai-compatible", **spec: Any) -> Any:
    policy = RetryPolicy(max_retries=3, base_delay=0.01, sleep=SleepRecorder(), random=lambda: 1.0)
    return create_model(
        ModelSpec(provider=provider, model="m", endpoint=endpoint, name="t", **spec),
        retry_policy=policy,
    )


def test_connection_refused_names_the_host_and_the_os_reason() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = _model(f"http://127.0.0.1:{port}/v1")
    with pytest.raises(LlmConnectionError) as info:
        run(model.generate(REQUEST))
    message = info.value.message
    assert f"127.0.0.1:{port}" in message and "Connection refused" in message
    assert (
        "Connection(" not in message
        and "object at" not in message
        and "Failed to establish" not in message
    )


def test_the_servers_message_is_shown_once_before_retrying(
    fake_provider: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    fake_provider.enqueue(FakeReply.error(503, "model is loading\n  please wait"),
                          FakeReply.error(503, "model is loading\n  please wait"), "ready")
    with caplog.at_level(logging.INFO, logger="goondan.llm"):
        assert run(_model(fake_provider.base_url("openai")).generate(REQUEST)).text == "ready"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "model is loading please wait" in warnings[0]


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_are_not_retried(fake_provider: FakeProvider, status: int) -> None:
    fake_provider.enqueue(FakeReply.error(status, "no"), "never")
    with pytest.raises(LlmHttpError):
        run(_model(fake_provider.base_url("openai")).generate(REQUEST))
    assert len(fake_provider.requests) == 1


def test_a_silent_server_gets_a_non_streamed_request_at_most_twice(
    fake_provider: FakeProvider,
) -> None:
    fake_provider.enqueue(FakeReply.hanging(), FakeReply.hanging(), "never")
    model = _model(fake_provider.base_url("openai"), timeout_ms=200)
    with pytest.raises(LlmTimeoutError):
        run(model.generate(REQUEST))
    assert model.transport.attempts == 2  # not 4: the server is probably still generating


@pytest.mark.parametrize("flavour", ["openai", "anthropic", "llama.cpp"])
def test_context_length_shapes(fake_provider: FakeProvider, flavour: Any) -> None:
    provider = "anthropic" if flavour == "anthropic" else "openai-compatible"
    fake_provider.enqueue(FakeReply.context_length_exceeded(flavour))
    wire = "anthropic" if flavour == "anthropic" else "openai"
    with pytest.raises(LlmContextLengthError) as info:
        run(_model(fake_provider.base_url(wire), provider, api_key="k").generate(REQUEST))
    assert info.value.code == "E_LLM_CONTEXT_LENGTH" and not info.value.retryable
    assert len(fake_provider.requests) == 1


@pytest.mark.parametrize(("provider", "variable", "key_variable", "header"), [
    ("openai", "OPENAI_BASE_URL", "OPENAI_API_KEY", "authorization"),
    ("anthropic", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "x-api-key"),
])
def test_base_url_variables_stand_in_for_the_endpoint(
    fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch,
    provider: str, variable: str, key_variable: str, header: str,
) -> None:
    wire = "anthropic" if provider == "anthropic" else "openai"
    monkeypatch.setenv(variable, fake_provider.base_url(wire))
    monkeypatch.setenv(key_variable, "sk-paired-with-the-base-url")
    fake_provider.enqueue("via the variable")
    assert run(_model(None, provider).generate(REQUEST)).text == "via the variable"
    # The key goes with the base URL the same environment named, as the official SDKs do.
    assert "sk-paired-with-the-base-url" in (fake_provider.requests[0].header(header) or "")
    explicit = _model("http://127.0.0.1:9/v1", provider)
    assert explicit.endpoint == "http://127.0.0.1:9/v1"  # spec.endpoint wins


def test_a_cut_stream_is_reported_in_a_sentence(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeReply.reply("a long answer that is cut", chunks=5, truncate_after=2))
    with pytest.raises(LlmBadResponseError) as info:
        run(_model(fake_provider.base_url("openai")).generate(REQUEST, stream=True))
    message = info.value.message
    assert message.endswith("the connection closed before the reply was complete.")
    assert "IncompleteRead" not in message and "('" not in message
