"""The turn loop end-to-end through the real OpenAI adapter and the fake provider HTTP server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.llm import create_model
from goondan.llm.base import LanguageModel, ModelSpec
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import BASIC, base_records, shape


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def openai_factory(server: FakeProvider) -> Any:
    def factory(spec: ModelSpec) -> LanguageModel:
        return create_model(ModelSpec(
            provider="openai", model="gpt-test", api_key="sk-fake-runtime-key",
            endpoint=server.base_url("openai"), name=spec.name,
        ))

    return factory


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def test_three_tool_steps_through_http(state_root: Path, fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(
        FakeReply.calls(FakeToolCall("calc__add", {"a": 1, "b": 2}), text="adding"),
        FakeReply.calls(FakeToolCall("calc__echo", {"text": "hi"})),
        FakeReply.calls(FakeToolCall("calc__add", {"a": 2, "b": 2})),
        FakeReply.reply("all done"),
    )

    async def main() -> list[dict[str, Any]]:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, model_factory=openai_factory(fake_provider)
        ) as rt:
            result = await rt.run_turn("plain", "go")
            assert result.finish_reason == "text_response" and result.text == "all done"
            return base_records(await rt.instance("plain"))

    records = run(main())
    assert shape(records) == [
        ("user", "user", "go"),
        ("assistant", "assistant", "adding|call:calc__add"),
        ("tool", "tool", "result:calc__add:json"),
        ("assistant", "assistant", "call:calc__echo"),
        ("tool", "tool", "result:calc__echo:text"),
        ("assistant", "assistant", "call:calc__add"),
        ("tool", "tool", "result:calc__add:json"),
        ("assistant", "assistant", "all done"),
    ]
    fake_provider.assert_all_used()
    bodies = [r.json for r in fake_provider.requests]
    assert bodies[0]["messages"][0] == {"role": "system", "content": "You are a test agent."}
    assert [m["role"] for m in bodies[3]["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool",
    ]
    assert bodies[0]["stream"] is True


def test_catalog_edit_and_args_edit_through_http(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    fake_provider.enqueue(FakeReply.calls(FakeToolCall("calc__add", {"a": 4, "b": 1})), "ok")

    async def main() -> list[dict[str, Any]]:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, model_factory=openai_factory(fake_provider)
        ) as rt:
            await rt.run_turn("editor", "go")
            return base_records(await rt.instance("editor"))

    records = run(main())
    assert tool_names(fake_provider.requests[0].json) == ["calc__add", "calc__wait"]
    assert records[2]["data"]["content"][0]["output"]["value"] == {"sum": 9}


def test_provider_failure_mid_turn_then_next_turn_succeeds(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    fake_provider.enqueue(
        FakeReply.calls(FakeToolCall("calc__add", {"a": 1, "b": 1})),
        FakeReply.error(400, "bad request from the fake"),
        "back again",
    )

    async def main() -> None:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, model_factory=openai_factory(fake_provider)
        ) as rt:
            failed = await rt.run_turn("plain", "one")
            assert failed.finish_reason == "error"
            assert failed.error is not None and failed.error["code"].startswith("E_LLM")
            assert "sk-fake-runtime-key" not in str(failed.error)
            ok = await rt.run_turn("plain", "two")
            assert ok.text == "back again"

    run(main())
    last = fake_provider.requests[-1].json["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "user"]
    assert last[3]["tool_call_id"] == last[2]["tool_calls"][0]["id"]


def test_onion_order_through_http(state_root: Path, fake_provider: FakeProvider) -> None:
    """Issue 6: two extensions' pre/post order across turn, step and toolCall (real adapter)."""
    fake_provider.enqueue(FakeReply.calls(FakeToolCall("calc__add", {"a": 1, "b": 1})), "ok")

    async def main() -> list[str]:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, model_factory=openai_factory(fake_provider)
        ) as rt:
            instance = await rt.instance("onion")
            seen: list[str] = []
            instance.bus.on("onion", seen.append)
            result = await rt.run_turn("onion", "hi")
            assert result.text == "ok"
            return seen

    assert run(main()) == [
        "outer:turn:pre", "inner:turn:pre",
        "outer:step:pre", "inner:step:pre",
        "outer:toolCall:pre", "inner:toolCall:pre",
        "inner:toolCall:post", "outer:toolCall:post",
        "inner:step:post", "outer:step:post",
        "outer:step:pre", "inner:step:pre",
        "inner:step:post", "outer:step:post",
        "inner:turn:post", "outer:turn:post",
    ]
    fake_provider.assert_all_used()


def test_max_steps_and_required_tools_through_http(
    state_root: Path, fake_provider: FakeProvider
) -> None:
    """Issue 6: maxStepsPerTurn (Swarm policy 4) and requiredTools, over real HTTP requests."""
    fake_provider.enqueue(*[FakeReply.calls(FakeToolCall("calc__echo", {"text": "again"}))] * 4)
    fake_provider.enqueue(
        "I can answer without tools",
        FakeReply.calls(FakeToolCall("calc__add", {"a": 2, "b": 2})),
        "4",
    )

    async def main() -> tuple[Any, Any]:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, model_factory=openai_factory(fake_provider)
        ) as rt:
            looping = await rt.run_turn("plain", "loop forever")
            strict = await rt.run_turn("strict", "2+2?")
            return looping, strict

    looping, strict = run(main())
    assert looping.finish_reason == "max_steps" and "limit of 4 steps" in looping.text
    assert (strict.finish_reason, strict.text) == ("text_response", "4")
    fake_provider.assert_all_used()
    requests = [r.json for r in fake_provider.requests]
    assert len(requests) == 7  # 4 steps of the looping turn, 3 of the strict one
    reminder = requests[5]["messages"][-1]
    assert reminder["role"] == "user" and "calc__add" in reminder["content"]
