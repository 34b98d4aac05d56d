"""The turn journal (turn.jsonl): records, the open turn, torn lines, and load() leaving an open
turn's calls.

The tests of the store's load() with an open turn run against every storage backend
(``backend``: jsonl, postgres); those of the file itself (torn lines, one JSON line per record)
are JSONL-only — their behavioural twin is tests/storage/contract/test_instances.py
::test_the_journal_keeps_the_open_turn_until_it_ends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.errors import WorkspaceCorruptError
from goondan.storage.contract import StorageBackend
from goondan.types import ToolCall, ToolCallResult
from goondan.workspace.journal import TurnJournal, idempotency_key, journal_bytes

WS = "proj-0123abcd"


def started(turn: str = "t1") -> dict[str, object]:
    return {"type": "turn.started", "turnId": turn, "input": {"type": "message", "text": "hi"},
            "at": "2026-01-01T00:00:00Z"}


def call_started(call: str, turn: str = "t1") -> dict[str, object]:
    return {"type": "toolCall.started", "turnId": turn, "toolCallId": call, "toolName": "t__x",
            "idempotencyKey": f"k-{call}", "idempotent": False, "at": "2026-01-01T00:00:01Z"}


def test_an_empty_journal_has_no_open_turn(tmp_path: Path) -> None:
    with TurnJournal.open(tmp_path) as journal:
        assert journal.records() == [] and journal.open_turn() is None
        assert (tmp_path / "turn.jsonl").exists()


def test_the_open_turn_collects_its_started_calls_approvals_and_resumes(tmp_path: Path) -> None:
    with TurnJournal.open(tmp_path) as journal:
        journal.append(started())
        journal.append(call_started("c1"))
        journal.append(call_started("c2"))
        journal.append({"type": "approval.requested", "turnId": "t1", "approvalId": "apr_1",
                        "toolCallId": "c3", "toolName": "t__x", "args": {}, "reason": None,
                        "expiresAt": None, "at": "x"})
        journal.append(
            {"type": "turn.parked", "turnId": "t1", "reason": "approval_pending", "at": "x"}
        )
        turn = journal.open_turn()
        assert turn is not None and turn.turn_id == "t1" and turn.parked
        assert turn.input == {"type": "message", "text": "hi"}
        assert sorted(turn.started_calls) == ["c1", "c2"]
        assert turn.started_calls["c1"]["idempotencyKey"] == "k-c1"
        assert list(turn.approvals) == ["c3"] and turn.crash_resumes == 0
        journal.append(
            {"type": "turn.resumed", "turnId": "t1", "attempt": 1, "cause": "decision", "at": "x"}
        )
        journal.append(
            {"type": "turn.resumed", "turnId": "t1", "attempt": 2, "cause": "crash", "at": "x"}
        )
        journal.append(
            {"type": "turn.resumed", "turnId": "t1", "attempt": 3, "cause": "crash", "at": "x"}
        )
        turn = journal.open_turn()
        assert (
            turn is not None and not turn.parked and turn.crash_resumes == 2 and turn.resumes == 3
        )


def test_an_ended_turn_is_not_open_and_clear_empties_the_file(tmp_path: Path) -> None:
    with TurnJournal.open(tmp_path) as journal:
        journal.append(started())
        journal.append(
            {"type": "turn.ended", "turnId": "t1", "finishReason": "text_response", "at": "x"}
        )
        assert journal.open_turn() is None
        journal.clear()
        assert journal.path.read_bytes() == b""
        journal.append(started("t2"))
        turn = journal.open_turn()
        assert turn is not None and turn.turn_id == "t2"
        assert [r["turnId"] for r in journal.records()] == ["t2"]


def test_a_torn_last_record_is_dropped_on_read_and_cut_at_open(tmp_path: Path) -> None:
    path = tmp_path / "turn.jsonl"
    whole = journal_bytes([started(), call_started("c1")])
    path.write_bytes(whole + journal_bytes([call_started("c2")])[:25])
    with TurnJournal.open(tmp_path) as journal:
        assert path.read_bytes() == whole
        turn = journal.open_turn()
        assert turn is not None and list(turn.started_calls) == ["c1"]
        journal.append(call_started("c3"))
        assert [r.get("toolCallId") for r in journal.records()] == [None, "c1", "c3"]


def test_a_corrupt_middle_record_is_an_error_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "turn.jsonl").write_bytes(journal_bytes([started()]) + b"{oops\n"
                                          + journal_bytes([call_started("c1")]))
    with TurnJournal.open(tmp_path) as journal, pytest.raises(WorkspaceCorruptError) as info:
        journal.records()
    assert "turn.jsonl:2" in str(info.value)


def test_each_record_is_one_json_line(tmp_path: Path) -> None:
    with TurnJournal.open(tmp_path) as journal:
        journal.append(started())
        journal.append(call_started("c1"))
    lines = (tmp_path / "turn.jsonl").read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == ["turn.started", "toolCall.started"]


def test_the_idempotency_key_is_stable_and_distinct_per_call() -> None:
    key = idempotency_key("agent", "k", "turn-1", "call-1")
    assert key == idempotency_key("agent", "k", "turn-1", "call-1")
    assert key.startswith("gdn_") and len(key) == 44
    others = {
        idempotency_key("agent", "k", "turn-1", "call-2"),
        idempotency_key("agent", "k", "turn-2", "call-1"),
        idempotency_key("agent", "k2", "turn-1", "call-1"),
        idempotency_key("other", "k", "turn-1", "call-1"),
    }
    assert key not in others and len(others) == 4


def _interrupted_turn(backend: StorageBackend) -> None:
    """A turn that wrote its user message, a step with two calls and one result, then died."""
    with backend.open_instance(WS, "planner", "k") as store:
        state = store.load()
        store.journal.append(started())
        events = [
            MessageEvent.append(Message.user("run it")),
            MessageEvent.append(
                Message.assistant("", [ToolCall("c1", "bash"), ToolCall("c2", "bash")])
            ),
            MessageEvent.append(Message.tool_result(ToolCallResult.success("c1", "bash", "done"))),
        ]
        for event in events:
            state.emit(event)
            store.append_event(event, "t1")


def test_store_exposes_its_journal_and_load_can_leave_the_open_calls_unanswered(
    backend: StorageBackend,
) -> None:
    _interrupted_turn(backend)
    with backend.open_instance(WS, "planner", "k") as store:
        turn = store.journal.open_turn()
        assert turn is not None and turn.turn_id == "t1"
        state = store.load(keep_open_calls=True)
        assert [m.role for m in state.next_messages] == ["user", "assistant", "tool"]
        assert [d.code for d in store.recovery_diagnostics] == ["W_WORKSPACE_RECOVERED"]
    # Reopened without resuming (the crash-loop guard, resume_interrupted=False): repaired as
    # before.
    with backend.open_instance(WS, "planner", "k") as store:
        state = store.load()
        assert [m.role for m in state.next_messages] == ["user", "assistant", "tool", "tool"]
        output = state.next_messages[3].data["content"][0]["output"]
        assert output["value"]["code"] == "E_TURN_INTERRUPTED"
        assert state.next_messages[3].data["content"][0]["toolCallId"] == "c2"


def test_keep_open_calls_still_repairs_earlier_turns(backend: StorageBackend) -> None:
    with backend.open_instance(WS, "planner", "k") as store:
        state = store.load()
        events = [MessageEvent.append(Message.user("old")),
                  MessageEvent.append(Message.assistant("", [ToolCall("c0", "bash")])),
                  MessageEvent.append(Message.user("run it")),
                  MessageEvent.append(Message.assistant("", [ToolCall("c1", "bash")]))]
        for event in events:
            state.emit(event)
            store.append_event(event, "t1")
    with backend.open_instance(WS, "planner", "k") as store:
        state = store.load(keep_open_calls=True)
        roles = [m.role for m in state.next_messages]
        assert roles == ["user", "assistant", "tool", "user", "assistant"]
        assert state.next_messages[2].data["content"][0]["toolCallId"] == "c0"
