"""The storage contract, instances: conversation, journal, metadata, extension state — the same
assertions against every backend (``backend`` is parametrised: jsonl, postgres).

Behavioural twins of tests/workspace/test_store.py and test_journal.py tests that look at the
JSONL files themselves (those stay JSONL-only)."""

from __future__ import annotations

import pytest

from goondan.conversation import ConversationState, Message, MessageEvent, fold
from goondan.errors import InstanceLockedError, WorkspaceError
from goondan.storage.contract import InstanceStorage, StorageBackend, TurnLog
from goondan.types import ToolCall

WS = "proj-0123abcd"


def run_turn(store: InstanceStorage, state: ConversationState, events: list[MessageEvent],
             turn_id: str) -> ConversationState:
    for event in events:
        state.emit(event)
        store.append_event(event, turn_id)
    return store.commit(state)


def test_an_open_instance_conforms_to_the_contract(backend: StorageBackend) -> None:
    with_store = backend.open_instance(WS, "planner", "slack:C1")
    try:
        assert isinstance(with_store, InstanceStorage)
        assert isinstance(with_store.journal, TurnLog)
    finally:
        with_store.close()


def test_reopen_returns_the_committed_history(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "k")
    state = store.load()
    for turn in range(3):
        state = run_turn(store, state, [MessageEvent.append(Message.user(f"m{turn}"))], f"t{turn}")
    store.close()
    again = backend.open_instance(WS, "planner", "k")
    assert [m.text for m in again.load().next_messages] == ["m0", "m1", "m2"]
    assert again.recovery_diagnostics == []
    again.close()


def test_commits_of_replaces_removes_and_truncates_equal_the_naive_fold(
    backend: StorageBackend,
) -> None:
    first, second = Message.user("a"), Message.user("b")
    turns = [
        [MessageEvent.append(first), MessageEvent.append(second)],
        [MessageEvent.replace(first.id, Message.user("a2"))],
        [MessageEvent.remove(second.id), MessageEvent.append(Message.user("c"))],
        [],
        [MessageEvent.truncate(), MessageEvent.append(Message.user("d"))],
        [MessageEvent.append(Message.user("e"))],
    ]
    store = backend.open_instance(WS, "planner", "k")
    state = store.load()
    expected: list[Message] = []
    for number, events in enumerate(turns):
        state = run_turn(store, state, events, f"t{number}")
        expected = fold(expected, events)[0]
        assert [m.to_dict() for m in state.next_messages] == [m.to_dict() for m in expected]
        assert store.load().to_llm_messages() == state.to_llm_messages()
    store.close()
    again = backend.open_instance(WS, "planner", "k")
    assert [m.to_dict() for m in again.load().next_messages] == [m.to_dict() for m in expected]
    again.close()


def test_events_of_a_turn_cut_short_are_folded_and_tool_pairs_repaired(
    backend: StorageBackend,
) -> None:
    store = backend.open_instance(WS, "planner", "k")
    state = store.load()
    for event in [MessageEvent.append(Message.user("run it")),
                  MessageEvent.append(Message.assistant("", [ToolCall("c1", "bash")]))]:
        state.emit(event)
        store.append_event(event, "turn-9")
    store.close()  # the process died before the commit
    again = backend.open_instance(WS, "planner", "k")
    state = again.load()
    assert [d.code for d in again.recovery_diagnostics] == [
        "W_WORKSPACE_RECOVERED", "W_WORKSPACE_REPAIRED"]
    assert again.recovery_diagnostics[0].extra["turnIds"] == ["turn-9"]
    assert [m.role for m in state.next_messages] == ["user", "assistant", "tool"]
    output = state.next_messages[2].data["content"][0]["output"]
    assert output["value"]["code"] == "E_TURN_INTERRUPTED"
    again.close()
    third = backend.open_instance(WS, "planner", "k")
    assert [m.role for m in third.load().next_messages] == ["user", "assistant", "tool"]
    assert third.recovery_diagnostics == []  # recovered once, committed
    third.close()


def test_keep_open_calls_leaves_the_last_calls_unanswered(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "k")
    state = store.load()
    for event in [MessageEvent.append(Message.user("old")),
                  MessageEvent.append(Message.assistant("", [ToolCall("c0", "bash")])),
                  MessageEvent.append(Message.user("run it")),
                  MessageEvent.append(Message.assistant("", [ToolCall("c1", "bash")]))]:
        state.emit(event)
        store.append_event(event, "t1")
    store.close()
    again = backend.open_instance(WS, "planner", "k")
    state = again.load(keep_open_calls=True)
    assert [m.role for m in state.next_messages] == [
        "user", "assistant", "tool", "user", "assistant"]
    assert state.next_messages[2].data["content"][0]["toolCallId"] == "c0"
    again.close()
    third = backend.open_instance(WS, "planner", "k")  # not resumed: repaired as before
    roles = [m.role for m in third.load().next_messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "tool"]
    third.close()


def test_a_second_opener_is_refused_until_the_first_closes(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "k")
    store.load()
    with pytest.raises(InstanceLockedError) as info:
        backend.open_instance(WS, "planner", "k")
    assert info.value.code == "E_INSTANCE_LOCKED"
    store.close()
    backend.open_instance(WS, "planner", "k").close()


def test_create_false_on_a_missing_instance(backend: StorageBackend) -> None:
    with pytest.raises(WorkspaceError) as info:
        backend.open_instance(WS, "planner", "nobody", create=False)
    assert info.value.code == "E_WORKSPACE_INSTANCE_NOT_FOUND"


def test_a_closed_store_refuses_writes(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "k")
    store.load()
    store.close()
    store.close()
    assert store.closed
    with pytest.raises(WorkspaceError, match="closed"):
        store.append_event(MessageEvent.truncate(), "t")


def test_metadata_and_a_stale_processing_reset_at_the_next_open(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "slack:C01/x")
    store.load()
    meta = store.metadata
    assert meta["agentName"] == "planner" and meta["instanceKey"] == "slack:C01/x"
    assert meta["status"] == "idle" and meta["createdAt"] == meta["updatedAt"]
    store.set_status("processing")
    assert store.status == "processing"
    with pytest.raises(ValueError):
        store.set_status("busy")  # type: ignore[arg-type]
    store.close()  # died mid-turn
    listed = list(backend.instances(WS))
    assert [(i["agentName"], i["instanceKey"], i["status"]) for i in listed] == [
        ("planner", "slack:C01/x", "processing")]
    again = backend.open_instance(WS, "planner", "slack:C01/x")
    again.load()
    assert again.status == "idle" and again.metadata["createdAt"] == meta["createdAt"]
    again.close()


def test_extension_state_round_trip_and_skip_unchanged(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "k")
    assert store.load_extension_state("memory") is None
    assert store.save_extension_state("memory", {"facts": ["tea", "\u0000nul"]}) is True
    assert store.save_extension_state("memory", {"facts": ["tea", "\u0000nul"]}) is False
    with pytest.raises(WorkspaceError) as info:
        store.save_extension_state("memory", {"bad": object()})  # type: ignore[dict-item]
    assert info.value.code == "E_WORKSPACE_EXTENSION_STATE"
    store.close()
    again = backend.open_instance(WS, "planner", "k")
    assert again.load_extension_state("memory") == {"facts": ["tea", "\u0000nul"]}
    again.close()


def test_messages_with_nul_and_unusual_text_round_trip(backend: StorageBackend) -> None:
    texts = ["nul \u0000 inside", "emoji \U0001f600", "quote \" and \\ backslash", ""]
    store = backend.open_instance(WS, "planner", "k")
    run_turn(store, store.load(), [MessageEvent.append(Message.user(t)) for t in texts], "t")
    store.close()
    again = backend.open_instance(WS, "planner", "k")
    assert [m.text for m in again.load().next_messages] == texts
    again.close()


def test_delete_instance_removes_it_and_refuses_an_open_one(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "k")
    run_turn(store, store.load(), [MessageEvent.append(Message.user("x"))], "t")
    with pytest.raises(InstanceLockedError):
        backend.delete_instance(WS, "planner", "k")
    store.close()
    assert backend.delete_instance(WS, "planner", "k") is True
    assert backend.delete_instance(WS, "planner", "k") is False
    assert list(backend.instances(WS)) == []
    fresh = backend.open_instance(WS, "planner", "k")
    assert fresh.load().next_messages == []
    fresh.close()


# -- the turn journal ------------------------------------------------------------------------------

def started(turn: str = "t1") -> dict[str, object]:
    return {"type": "turn.started", "turnId": turn, "input": {"type": "message", "text": "hi"},
            "at": "2026-01-01T00:00:00Z"}


def test_the_journal_keeps_the_open_turn_until_it_ends(backend: StorageBackend) -> None:
    store = backend.open_instance(WS, "planner", "k")
    store.load()
    journal = store.journal
    assert journal.records() == [] and journal.open_turn() is None
    journal.append(started())
    journal.append({"type": "toolCall.started", "turnId": "t1", "toolCallId": "c1",
                    "toolName": "t__x", "idempotencyKey": "k-c1", "idempotent": False, "at": "x"})
    journal.append({"type": "approval.requested", "turnId": "t1", "approvalId": "apr_1",
                    "toolCallId": "c2", "toolName": "t__x", "args": {}, "reason": None,
                    "expiresAt": None, "at": "x"})
    journal.append({"type": "turn.parked", "turnId": "t1", "reason": "approval_pending",
                    "at": "x"})
    store.close()
    assert backend.interrupted_instances(WS) == []  # parked: nothing to resume
    [(agent, key, parked)] = backend.open_turns(WS)
    assert (agent, key, parked.turn_id, parked.parked) == ("planner", "k", "t1", True)
    assert list(parked.approvals) == ["c2"]
    again = backend.open_instance(WS, "planner", "k")
    turn = again.journal.open_turn()
    assert turn is not None and turn.turn_id == "t1" and turn.parked
    assert list(turn.started_calls) == ["c1"] and list(turn.approvals) == ["c2"]
    assert turn.input == {"type": "message", "text": "hi"}
    again.journal.append({"type": "turn.resumed", "turnId": "t1", "attempt": 1,
                          "cause": "crash", "at": "x"})
    again.close()
    assert backend.interrupted_instances(WS) == [("planner", "k")]
    third = backend.open_instance(WS, "planner", "k")
    turn = third.journal.open_turn()
    assert turn is not None and not turn.parked and turn.crash_resumes == 1
    third.journal.append({"type": "turn.ended", "turnId": "t1", "finishReason": "stop",
                          "at": "x"})
    assert third.journal.open_turn() is None
    third.journal.clear()
    assert third.journal.records() == []
    third.journal.append(started("t2"))
    assert [r["turnId"] for r in third.journal.records()] == ["t2"]
    third.close()


def test_extension_state_keys_name_the_same_state_as_their_file_names_do(
    backend: StorageBackend,
) -> None:
    # JSONL keeps a state in extensions/<extension_file_name(key)>: keys that map to one file
    # are one state, and a key never leaves the instance ("../evil" is "evil").
    store = backend.open_instance(WS, "planner", "k")
    store.save_extension_state("../evil", {"n": 1})
    store.save_extension_state("@acme/a/counter", {"n": 2})
    store.close()
    again = backend.open_instance(WS, "planner", "k")
    assert again.load_extension_state("evil") == {"n": 1}
    assert again.load_extension_state("-acme/a/counter") == {"n": 2}
    assert again.load_extension_state("@acme/b/counter") is None
    again.close()
