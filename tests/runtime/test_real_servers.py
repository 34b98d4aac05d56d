"""What real model servers do outside the providers' own APIs, through the fake provider.

Each test makes the fake server behave like a server that was observed (llama-cpp-python,
llama.cpp's server, OpenAI and Anthropic error shapes) and runs real turns through the real
adapters: docs/models.md "Local and compatible servers", docs/conversations.md "When a turn
fails".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from goondan.llm import create_model
from goondan.llm.base import LanguageModel, ModelSpec
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import BASIC, base_records, shape

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def factory(server: FakeProvider, provider: str = "openai-compatible", **extra: Any) -> Any:
    wire: Literal["openai", "anthropic"] = "anthropic" if provider == "anthropic" else "openai"

    def build(spec: ModelSpec) -> LanguageModel:
        from goondan.llm.http import RetryPolicy

        async def no_wait(_: float) -> None:
            return None

        return create_model(
            ModelSpec(provider=provider, model="local-test", endpoint=server.base_url(wire),
                      name=spec.name, **extra),
            retry_policy=RetryPolicy(sleep=no_wait),
        )

    return build


def contents(body: dict[str, Any]) -> list[Any]:
    return [m.get("content") for m in body["messages"]]


def user_texts(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


# -- 1. llama-cpp-python: "content": null is a 500 ----------------------------------------------


def test_tool_round_trip_on_a_llama_cpp_like_endpoint(state_root: Path) -> None:
    with FakeProvider(behaviour="llama-cpp") as server:
        server.enqueue(
            FakeReply.calls(FakeToolCall("calc__add", {"a": 2, "b": 3})), FakeReply.reply("5")
        )

        async def main() -> Any:
            async with Runtime.from_bundle(
                BASIC, state_root=state_root, model_factory=factory(server)
            ) as rt:
                return await rt.run_turn("plain", "2+3?")

        result = run(main())
        assert (result.finish_reason, result.text) == ("text_response", "5"), result.error
        server.assert_all_used()
        second = server.requests[1].json
    assistant = second["messages"][2]
    assert (
        assistant["role"] == "assistant" and assistant["content"] == "" and assistant["tool_calls"]
    )
    assert second["messages"][3]["role"] == "tool"


def test_validation_500_is_not_retried_and_says_so(state_root: Path) -> None:
    with FakeProvider() as server:
        server.enqueue(FakeReply.validation_error(), "never reached")

        async def main() -> Any:
            async with Runtime.from_bundle(
                BASIC, state_root=state_root, model_factory=factory(server)
            ) as rt:
                return await rt.run_turn("plain", "hi")

        result = run(main())
        assert len(server.requests) == 1  # a validation report is not transient
    assert result.error["code"] == "E_LLM_HTTP"
    assert "Input should be a valid string" in result.error["message"]
    assert (
        "\n" not in result.error["message"] and "try again later" not in result.error["suggestion"]
    )


# -- 2. empty streamed reply, capabilities.streaming -----------------------------------------------


def test_empty_streamed_reply_says_the_server_ended_the_stream(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    fake_provider.enqueue(FakeReply.empty_stream(), FakeReply.reply("whole answer"))

    async def main() -> tuple[Any, Any]:
        async with Runtime.from_bundle(BASIC, state_root=state_root,
                                       model_factory=factory(fake_provider)) as rt:
            failed = await rt.run_turn("plain", "hi")
            records = base_records(await rt.instance("plain"))
            return failed, records

    failed, records = run(main())
    assert failed.error["code"] == "E_LLM_EMPTY_STREAM"
    assert "ended the stream without sending a reply" in failed.error["message"]
    assert "streaming: false" in failed.error["suggestion"]
    assert [r for r in records if r["data"]["role"] == "assistant"] == []  # no placeholder answer


def test_capabilities_streaming_false_is_honoured(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    fake_provider.enqueue(FakeReply.reply("whole answer"))

    async def main() -> Any:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, stream=True,
            model_factory=factory(fake_provider, capabilities={"streaming": False}),
        ) as rt:
            return await rt.run_turn("plain", "hi")

    assert run(main()).text == "whole answer"
    body = fake_provider.requests[0].json
    assert "stream" not in body and "stream_options" not in body


# -- 3. failed turns and context-length errors -----------------------------------------------------


@pytest.mark.parametrize("flavour", ["openai", "anthropic", "llama.cpp"])
def test_context_length_error_is_clear_and_the_next_turn_works(
    state_root: Path,
    fake_provider: FakeProvider,
    flavour: Literal["openai", "anthropic", "llama.cpp"],
) -> None:
    provider = "anthropic" if flavour == "anthropic" else "openai-compatible"
    fake_provider.enqueue(
        FakeReply.reply("short answer"),
        FakeReply.context_length_exceeded(flavour),
        FakeReply.reply("fits again"),
    )

    async def main() -> tuple[Any, Any, list[Any]]:
        async with Runtime.from_bundle(BASIC, state_root=state_root,
                                       model_factory=factory(fake_provider, provider)) as rt:
            await rt.run_turn("plain", "first")
            failed = await rt.run_turn("plain", "an enormous paste " * 50)
            ok = await rt.run_turn("plain", "small question")
            return failed, ok, base_records(await rt.instance("plain"))

    failed, ok, records = run(main())
    assert len(fake_provider.requests) == 3  # never retried
    assert failed.error["code"] == "E_LLM_CONTEXT_LENGTH"
    for fix in ("/clear", "message-window", "message-compaction"):
        assert fix in failed.error["suggestion"]
    assert ok.text == "fits again"
    last = fake_provider.requests[-1].json
    joined = " ".join(str(c) for c in contents(last))
    assert "enormous paste" not in joined and "small question" in joined
    assert shape(records) == [
        ("user", "user", "first"), ("assistant", "assistant", "short answer"),
        ("user", "user", "small question"), ("assistant", "assistant", "fits again"),
    ]


def test_a_retried_input_after_a_failed_turn_is_sent_once(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    # Six failures in a row used to send seven copies of the same question.
    fake_provider.enqueue(*[FakeReply.error(503, "overloaded")] * 9, FakeReply.reply("answered"))

    async def main() -> Any:
        async with Runtime.from_bundle(BASIC, state_root=state_root,
                                       model_factory=factory(fake_provider)) as rt:
            for _ in range(3):
                failed = await rt.run_turn("plain", "what time is it?")
                assert failed.error["code"] == "E_LLM_HTTP"
            return await rt.run_turn("plain", "what time is it?")

    assert run(main()).text == "answered"
    assert user_texts(fake_provider.requests[-1].json) == ["what time is it?"]


def test_after_a_failed_turn_a_new_input_keeps_the_earlier_one_once(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    fake_provider.enqueue(FakeReply.error(400, "rejected once"), FakeReply.reply("both seen"))

    async def main() -> list[Any]:
        async with Runtime.from_bundle(BASIC, state_root=state_root,
                                       model_factory=factory(fake_provider)) as rt:
            await rt.run_turn("plain", "remember the number 7")
            await rt.run_turn("plain", "what number?")
            return base_records(await rt.instance("plain"))

    records = run(main())
    assert user_texts(fake_provider.requests[-1].json) == ["remember the number 7", "what number?"]
    assert records[0]["metadata"]["goondan.failedTurn"] == "E_LLM_HTTP"
    assert "goondan.failedTurn" not in records[1]["metadata"]


# -- 2 (runtime side). empty replies and malformed tool arguments ----------------------------------


def test_an_empty_reply_is_asked_again_once_and_never_stored(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    fake_provider.enqueue(FakeReply.reply("  "), FakeReply.reply("real answer"), "", "", )

    async def main() -> tuple[Any, Any, list[Any]]:
        async with Runtime.from_bundle(BASIC, state_root=state_root, stream=False,
                                       model_factory=factory(fake_provider)) as rt:
            ok = await rt.run_turn("plain", "hi")
            failed = await rt.run_turn("plain", "again")
            return ok, failed, base_records(await rt.instance("plain"))

    ok, failed, records = run(main())
    assert ok.text == "real answer"
    nudge = fake_provider.requests[1].json["messages"][-1]
    assert nudge["role"] == "user" and "previous reply was empty" in nudge["content"]
    assert failed.error["code"] == "E_LLM_EMPTY_RESPONSE"
    assert len(fake_provider.requests) == 4  # one re-ask per turn, no more
    stored = " ".join(str(r["data"]["content"]) for r in records)
    assert "previous reply was empty" not in stored and "empty response" not in stored


def test_malformed_tool_arguments_are_a_tool_error_the_model_can_fix(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    broken = {"id": "chatcmpl-bad", "object": "chat.completion", "model": "local-test",
              "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                  "role": "assistant", "content": None, "tool_calls": [{
                      "id": "call_bad", "type": "function",
                      "function": {"name": "calc__add", "arguments": "{a: 2, b: 3"}}]}}]}
    import json

    fake_provider.enqueue(
        FakeReply.malformed(json.dumps(broken).encode()),
        FakeReply.calls(FakeToolCall("calc__add", {"a": 2, "b": 3})),
        FakeReply.reply("5"),
    )

    async def main() -> Any:
        async with Runtime.from_bundle(BASIC, state_root=state_root, stream=False,
                                       model_factory=factory(fake_provider)) as rt:
            return await rt.run_turn("plain", "2+3?")

    assert run(main()).text == "5"
    second = fake_provider.requests[1].json["messages"]
    assert second[2]["tool_calls"][0]["function"]["arguments"] == "{}"
    error = json.loads(second[3]["content"])
    assert error["code"] == "E_TOOL_INVALID_ARGS" and "{a: 2, b: 3" in error["message"]


# -- 5. usage a stream never reported --------------------------------------------------------------


def test_a_stream_without_usage_is_unknown_not_zero(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    fake_provider.enqueue(FakeReply.reply("no usage here", usage=False), FakeReply.reply("counted"))

    async def main() -> tuple[Any, Any, Any]:
        async with Runtime.from_bundle(BASIC, state_root=state_root,
                                       model_factory=factory(fake_provider)) as rt:
            first = await rt.run_turn("plain", "hi")
            second = await rt.run_turn("plain", "again")
            return first, second, (await rt.instance("plain")).usage

    first, second, total = run(main())
    assert fake_provider.requests[0].json["stream_options"] == {"include_usage": True}
    assert first.metadata["tokenUsage"] == {
        "prompt": 0,
        "completion": 0,
        "total": 0,
        "unknownCalls": 1,
    }
    assert (
        second.metadata["tokenUsage"]["total"] == 18
        and "unknownCalls" not in second.metadata["tokenUsage"]
    )
    assert (total.total_tokens, total.unknown_calls) == (18, 1)
