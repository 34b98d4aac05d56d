"""Decision 3: every assistant tool call ends up with exactly one tool result."""

from __future__ import annotations

from goondan.conversation import ConversationState, Message, repair_tool_pairs
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
