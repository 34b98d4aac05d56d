"""Tool-call ids that repeat across turns never cost a tool result (issue 27 item 2).

An OpenAI-compatible server that sends no tool-call ids used to get ``call_0``, ``call_1``... per
step, so every turn reused ``call_0``. Each reload's repair then took the later result for a
duplicate of the earlier one and dropped it (``W_WORKSPACE_REPAIRED: dropped 1 ...``), leaving a
call without a result that providers reject. Generated ids are now unique per conversation, and
the repair pairs a result with the assistant message it follows, so histories already written
with repeated ids keep every result too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation import ConversationState, Message
from goondan.conversation.repair import repair_tool_pairs, tool_result_ids
from goondan.runtime import Runtime
from goondan.types import ToolCall, ToolCallResult
from goondan.workspace import InstanceStore
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.hostile import openai_factory
from tests.support.llm_acceptance import PROVIDERS, first_request, make_model
from tests.support.runtime_harness import BASIC, base_records


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


def _calls_and_results(records: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    calls: list[str] = []
    results: list[str] = []
    for record in records:
        content = record["data"]["content"]
        for part in content if isinstance(content, list) else []:
            if part["type"] == "tool-call":
                calls.append(part["toolCallId"])
            elif part["type"] == "tool-result":
                results.append(part["toolCallId"])
    return calls, results


def _turn(text: str) -> list[FakeReply]:
    return [FakeReply.calls(FakeToolCall("calc__echo", {"text": text}), call_ids=False),
            FakeReply.reply(f"said {text}")]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_results_survive_reloads_when_the_server_sends_no_call_ids(
    state_root: Path, server: FakeProvider, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    server.enqueue(*_turn("one"), *_turn("two"), FakeReply.reply("three"))

    async def turns(*inputs: str) -> list[dict[str, Any]]:
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, model_factory=openai_factory(server), stream=stream
        ) as rt:
            for text in inputs:
                result = await rt.run_turn("plain", text)
                assert result.finish_reason == "text_response", result.error
            return base_records(await rt.instance("plain"))

    run(turns("first", "second"))
    records = run(turns("third"))  # a reload, then a turn whose request holds both earlier turns

    calls, results = _calls_and_results(records)
    assert len(calls) == 2 and len(set(calls)) == 2, calls
    assert results == calls
    assert "W_WORKSPACE_REPAIRED" not in caplog.text
    last = server.requests[-1].json["messages"]
    sent_calls = [
        c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []
    ]
    sent_results = [m["tool_call_id"] for m in last if m["role"] == "tool"]
    assert sent_results == sent_calls == calls
    assert all(r.json.get("stream", False) is stream for r in server.requests)
    server.assert_all_used()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_adapter_generates_ids_that_never_repeat(server: FakeProvider, provider: Any) -> None:
    """The same id-less reply, four times (streamed and whole): eight distinct call ids."""
    reply = FakeReply.calls(
        ("calc__echo", {"text": "a"}), ("calc__echo", {"text": "b"}), call_ids=False
    )
    model = make_model(server, provider)

    async def ids() -> list[str]:
        out: list[str] = []
        for stream in (True, False, True, False):
            server.enqueue(reply)
            response = await model.generate(first_request(), stream=stream)
            out += [call.id for call in response.tool_calls]
        return out

    generated = run(ids())
    assert len(generated) == 8 and len(set(generated)) == 8 and all(generated)


def _echo_turn(call_id: str, text: str) -> list[Message]:
    return [
        Message.user(text),
        Message.assistant("", [ToolCall(call_id, "calc__echo", {"text": text})]),
        Message.tool_result(ToolCallResult.success(call_id, "calc__echo", text)),
        Message.assistant(f"said {text}"),
    ]


def test_a_history_already_written_with_repeated_ids_keeps_every_result(tmp_path: Path) -> None:
    """Conversations saved before the fix hold ``call_0`` once per turn: nothing is dropped."""
    history = [
        *_echo_turn("call_0", "one"),
        *_echo_turn("call_0", "two"),
        *_echo_turn("call_0", "three"),
    ]
    assert repair_tool_pairs(history) == []
    with InstanceStore.open(tmp_path, "ws", "a", "k", fsync=False) as store:
        store.load()
        store.commit(ConversationState(history))
    with InstanceStore.open(tmp_path, "ws", "a", "k", fsync=False) as store:
        state = store.load()
        codes = [d.code for d in store.recovery_diagnostics]
    assert "W_WORKSPACE_REPAIRED" not in codes
    assert [tool_result_ids(m) for m in state.next_messages if m.role == "tool"] == [["call_0"]] * 3


def test_a_repeated_id_still_loses_its_true_duplicate_and_gets_a_missing_result() -> None:
    """Pairing is per assistant message: a second result right after the same message is a
    duplicate, and a later call with the same id but no result gets a synthetic one."""
    first = _echo_turn("call_0", "one")
    duplicate = Message.tool_result(ToolCallResult.success("call_0", "calc__echo", "again"))
    unanswered = Message.assistant("", [ToolCall("call_0", "calc__echo", {"text": "two"})])
    history = [*first[:3], duplicate, first[3], Message.user("two"), unanswered]
    state = ConversationState(history)
    state.emit_all(repair_tool_pairs(history))
    messages = state.next_messages
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    tools = [m for m in messages if m.role == "tool"]
    assert tools[0].id == first[2].id
    assert tools[1].metadata.get("synthetic") is True and tool_result_ids(tools[1]) == ["call_0"]
