"""Property tests of the tool-pair repair over random (often provider-invalid) histories.

Histories mix user and assistant messages, tool calls from a small id pool (so ids repeat across
messages, as with servers that send none), tool messages with
one or more results (orphans, duplicates, results far from their call) and repeated messages.
Whatever the input, the repaired history is provider-valid, the repair is idempotent, and
nothing but invalid results is lost (docs/conversations.md, "Recovery at start").
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.conversation import ConversationState, Message
from goondan.conversation.repair import repair_tool_pairs, tool_result_ids
from goondan.types import JsonObject, ToolCall

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)
CALL_IDS = st.sampled_from(["c1", "c2", "c3", "c4"])


def _tool_message(ids: list[str], text: bool) -> Message:
    parts: list[JsonObject] = [
        {
            "type": "tool-result",
            "toolCallId": i,
            "toolName": "t__x",
            "output": {"type": "text", "value": i},
        }
        for i in ids
    ]
    if text:
        parts.append({"type": "text", "text": "note"})
    return Message.create("tool", parts, source=Message.user("x").source)


def _message() -> st.SearchStrategy[Message]:
    return st.one_of(
        st.builds(lambda t: Message.user(t), st.sampled_from(["hi", "go"])),
        st.builds(lambda ids: Message.assistant("", [ToolCall(i, "t__x") for i in ids]),
                  st.lists(CALL_IDS, min_size=0, max_size=3)),
        st.builds(_tool_message, st.lists(CALL_IDS, min_size=1, max_size=3), st.booleans()),
    )


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    messages = draw(st.lists(_message(), max_size=12))
    if messages and draw(st.booleans()):  # the same record twice (a retried append)
        messages.insert(draw(st.integers(0, len(messages))), draw(st.sampled_from(messages)))
    return messages


def _apply(messages: list[Message]) -> list[Message]:
    state = ConversationState(messages)
    assert state.emit_all(repair_tool_pairs(messages)) == []
    return state.next_messages


def _assert_provider_valid(messages: list[Message]) -> None:
    """Each result answers, once, the nearest earlier message that made a call with its id, and
    every call of every message has a result. Ids may repeat across messages (servers that send
    none), so a call is ``(index of its message, id)``."""
    caller: dict[str, int] = {}
    calls: set[tuple[int, str]] = set()
    answered: set[tuple[int, str]] = set()
    for index, message in enumerate(messages):
        for call_id in tool_result_ids(message):
            assert call_id in caller, f"orphan result {call_id}"
            assert (caller[call_id], call_id) not in answered, f"duplicate result {call_id}"
            answered.add((caller[call_id], call_id))
        caller.update((c.id, index) for c in message.tool_calls)
        calls.update((index, c.id) for c in message.tool_calls)
    assert calls <= answered, f"calls without a result: {calls - answered}"
    assert all(m.role != "tool" or m.data.get("content") for m in messages)


@SETTINGS
@given(histories())
def test_repaired_history_is_provider_valid_and_repair_is_idempotent(
    history: list[Message],
) -> None:
    repaired = _apply(history)
    _assert_provider_valid(repaired)
    assert repair_tool_pairs(repaired) == []


@SETTINGS
@given(histories())
def test_repair_only_drops_invalid_results(history: list[Message]) -> None:
    repaired = _apply(history)
    # Non-tool messages survive in order (ids; a repeated record may collapse to one copy).
    def others(ms: list[Message]) -> list[str]:
        return list(dict.fromkeys(m.id for m in ms if m.role != "tool"))
    assert others(repaired) == others(history)
    # Each first valid result of a call made earlier is kept.
    called: set[str] = set()
    kept: set[str] = set()
    for message in history:
        for call_id in tool_result_ids(message):
            if call_id in called:
                kept.add(call_id)
        called.update(c.id for c in message.tool_calls)
    real = {i for m in repaired if not m.metadata.get("synthetic") for i in tool_result_ids(m)}
    assert kept <= real


def test_orphan_and_duplicate_results_in_the_middle() -> None:
    hi = Message.user("hi")
    call = Message.assistant("", [ToolCall("c1", "t__x")])
    first = _tool_message(["c1"], False)
    again = _tool_message(["c1", "zz"], True)  # duplicate + orphan, plus a text part
    done = Message.assistant("done")
    repaired = _apply([hi, call, first, again, done])
    assert [m.id for m in repaired] == [hi.id, call.id, first.id, again.id, done.id]
    assert tool_result_ids(repaired[3]) == [] and repaired[3].data["content"] == [
        {"type": "text", "text": "note"}
    ]
