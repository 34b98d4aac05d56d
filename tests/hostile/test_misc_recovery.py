"""Provider-invalid histories on disk (orphan and duplicate tool results) heal when loaded."""

from __future__ import annotations

from pathlib import Path

from goondan.conversation import ConversationState, Message
from goondan.conversation.repair import tool_result_ids
from goondan.types import ToolCall, ToolCallResult
from goondan.workspace import InstanceStore


def _result(call_id: str) -> Message:
    return Message.tool_result(ToolCallResult.success(call_id, "t__x", "ok"))


def test_orphan_and_duplicate_results_are_dropped_at_load(tmp_path: Path) -> None:
    call = Message.assistant("", [ToolCall("c1", "t__x")])
    history = [Message.user("hi"), _result("ghost"), call, _result("c1"), _result("c1"),
               Message.assistant("done")]
    with InstanceStore.open(tmp_path, "ws", "a", "k", fsync=False) as store:
        store.load()
        store.commit(ConversationState(history))  # written as-is: commit never repairs
    with InstanceStore.open(tmp_path, "ws", "a", "k", fsync=False) as store:
        state = store.load()
        diagnostics = {d.code: d for d in store.recovery_diagnostics}
    messages = state.next_messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert [tool_result_ids(m) for m in messages if m.role == "tool"] == [["c1"]]
    repaired = diagnostics["W_WORKSPACE_REPAIRED"]
    assert (
        repaired.extra["droppedResults"] == 2
        and "dropped 2 orphan or duplicate" in repaired.message
    )
    # Healed on disk: the next open has nothing to repair.
    with InstanceStore.open(tmp_path, "ws", "a", "k", fsync=False) as store:
        store.load()
        assert not [d for d in store.recovery_diagnostics if d.code == "W_WORKSPACE_REPAIRED"]
