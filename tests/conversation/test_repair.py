"""Decision 3: every assistant tool call ends up with exactly one tool result."""

from __future__ import annotations

from goondan.conversation import ConversationState, Message, MessageEvent, repair_tool_pairs
from goondan.conversation.repair import tool_result_ids
from goondan.types import ToolCall, ToolCallResult


def result(call_id: str, name: str = "bash") -> Message:
    return Message.tool_result(ToolCallResult.success(call_id, name, "ok"))


def apply(messages: list[Message]) -> list[Message]:
    state = ConversationState(messages)
    assert state.emit_all(repair_tool_pairs(messages)) == []
    return state.next_messages


def test_complete_history_needs_no_repair() -> None:
    history = [Message.user("hi"), Message.assistant("", [ToolCall("c1", "bash")]), result("c1"),
               Message.assistant("done")]
    assert repair_tool_pairs(history) == []


def test_missing_results_at_the_end_are_appended() -> None:
    history = [Message.user("hi"),
               Message.assistant("", [ToolCall("c1", "bash"), ToolCall("c2", "grep", {"q": 1})]),
               result("c1")]
    events = repair_tool_pairs(history)
    assert [e.type for e in events] == ["append"]
    repaired = apply(history)
    synthetic = repaired[-1]
    part = synthetic.data["content"][0]
    assert synthetic.role == "tool" and synthetic.metadata == {"synthetic": True}
    assert part["toolCallId"] == "c2" and part["toolName"] == "grep"
    assert part["output"]["type"] == "error-json"
    assert part["output"]["value"]["code"] == "E_TURN_INTERRUPTED"
    assert repair_tool_pairs(repaired) == []


def test_missing_result_in_the_middle_goes_right_after_existing_results() -> None:
    user2 = Message.user("next")
    history = [Message.assistant("", [ToolCall("c1", "a"), ToolCall("c2", "b")]), result("c1", "a"),
               user2, Message.assistant("ok")]
    repaired = apply(history)
    assert [m.role for m in repaired] == ["assistant", "tool", "tool", "user", "assistant"]
    assert tool_result_ids(repaired[2]) == ["c2"]
    assert repaired[3] is user2  # the same message (same id), moved behind the synthetic result
    assert repair_tool_pairs(repaired) == []


def test_duplicate_ids_fall_back_to_truncate_and_rebuild() -> None:
    twin = Message.user("x")
    history = [twin, Message.assistant("", [ToolCall("c1", "a")]), twin]
    events = repair_tool_pairs(history)
    assert events[0].type == "truncate"
    repaired = apply(history)
    assert [m.role for m in repaired] == ["user", "assistant", "tool", "user"]


def test_several_calls_with_partial_results_in_the_wrong_order() -> None:
    history = [
        Message.assistant("", [ToolCall("c1", "a"), ToolCall("c2", "b"), ToolCall("c3", "c")]),
        result("c3", "c"),
        result("c1", "a"),
    ]
    repaired = apply(history)
    assert [tool_result_ids(m) for m in repaired[1:]] == [["c3"], ["c1"], ["c2"]]
    assert repaired[-1].metadata == {"synthetic": True}
    assert repair_tool_pairs(repaired) == []


def test_orphan_results_are_dropped() -> None:
    # A result whose call is gone (e.g. a hand-edited file) is rejected by every provider, so
    # the repair removes it (docs/conversations.md, "Recovery"); the messages around it stay.
    hi, ok = Message.user("hi"), Message.assistant("ok")
    history = [hi, result("gone"), ok]
    repaired = apply(history)
    assert repaired == [hi, ok]
    assert repair_tool_pairs(repaired) == []


def test_a_replaced_assistant_message_gets_results_for_its_own_calls() -> None:
    old = Message.assistant("", [ToolCall("c1", "a")])
    history = [Message.user("hi"), old, result("c1", "a")]
    state = ConversationState(history)
    state.emit(MessageEvent.replace(old.id, Message.assistant("", [ToolCall("c9", "z")])))
    repaired = apply(state.next_messages)
    # c1's call was replaced away, so its result is an orphan now and is dropped.
    assert [tool_result_ids(m) for m in repaired if m.role == "tool"] == [["c9"]]


def test_a_call_id_repeated_in_one_message_gets_one_result() -> None:
    history = [Message.assistant("", [ToolCall("c1", "a"), ToolCall("c1", "a")])]
    repaired = apply(history)
    assert [tool_result_ids(m) for m in repaired[1:]] == [["c1"]]


def test_malformed_tool_call_parts_do_not_raise() -> None:
    # Wrong JSON types in a record read from disk: no traceback, still repaired.
    bad = Message.assistant("", [ToolCall("c1", "a")])
    bad.data["content"][0]["input"] = "not an object"
    bad.data["content"].append({"type": "tool-call", "toolCallId": "c2", "toolName": "b",
                                "input": [1, 2]})
    bad.data["content"].append("a bare string part")
    assert [c.id for c in bad.tool_calls] == ["c1", "c2"]
    repaired = apply([bad])
    assert sorted(i for m in repaired[1:] for i in tool_result_ids(m)) == ["c1", "c2"]


def test_tool_call_groups_keep_calls_with_their_results() -> None:
    """Windowing/compaction unit: an assistant tool-call message and every result answering it
    form one group; a tool message answering two assistant messages merges their groups."""
    from goondan.conversation.repair import tool_call_groups
    from goondan.types import ToolCall, ToolCallResult

    user = Message.user("go")
    first = Message.assistant("", [ToolCall("a", "t__x"), ToolCall("b", "t__x")])
    result_a = Message.tool_result(ToolCallResult.success("a", "t__x", 1))
    second = Message.assistant("", [ToolCall("c", "t__x")])
    result_b = Message.tool_result(ToolCallResult.success("b", "t__x", 2))
    result_c = Message.tool_result(ToolCallResult.success("c", "t__x", 3))
    answer = Message.assistant("done")
    groups = tool_call_groups([user, first, result_a, second, result_b, result_c, answer])
    assert groups == [[0], [1, 2, 4], [3, 5], [6]]
    both = Message.create(
        "tool",
        [
            {
                "type": "tool-result",
                "toolCallId": "a",
                "toolName": "t__x",
                "output": {"type": "json", "value": 1},
            },
            {
                "type": "tool-result",
                "toolCallId": "c",
                "toolName": "t__x",
                "output": {"type": "json", "value": 3},
            },
        ],
        source=result_a.source,
    )
    assert tool_call_groups([first, second, both]) == [[0, 1, 2]]
