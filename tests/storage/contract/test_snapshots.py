"""The storage contract, snapshots: an instance read whole without its lock and written whole
(``snapshot``/``restore``, ``workspaces``, ``ApprovalIndex.restore``) — what ``goondan inspect
--store`` reads and ``goondan store copy`` moves. Same assertions on every backend."""

from __future__ import annotations

import dataclasses
import json

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.errors import GoondanError
from goondan.storage.contract import QueueRecord, StorageBackend

WS = "proj-0123abcd"


def fill(backend: StorageBackend, key: str = "k") -> None:
    """Two committed turns, a turn cut short (its events and journal left), extension state."""
    store = backend.open_instance(WS, "planner", key)
    state = store.load()
    for turn in range(2):
        event = MessageEvent.append(Message.user(f"m{turn}\u0000"))
        state.emit(event)
        store.append_event(event, f"t{turn}")
        state = store.commit(state)
    store.journal.append({"type": "turn.started", "turnId": "t2"})
    store.append_event(MessageEvent.append(Message.user("cut short")), "t2")
    store.save_extension_state("memory", {"facts": ["tea"]})
    store.save_extension_state("@acme/kit/notes", [1, 2])
    store.close()


def test_a_snapshot_holds_messages_events_journal_state_and_metadata(
    backend: StorageBackend,
) -> None:
    assert backend.snapshot(WS, "planner", "k") is None
    assert backend.workspaces() == []
    fill(backend)
    snap = backend.snapshot(WS, "planner", "k")
    assert snap is not None and snap.needs_fold is None
    assert [Message.from_dict(json.loads(m)).text for m in snap.messages] == [
        "m0\u0000", "m1\u0000"]
    assert len(snap.events) == 1 and "cut short" in snap.events[0]
    assert len(snap.journal) == 1 and "turn.started" in snap.journal[0]
    assert set(snap.extensions) == {"memory.json", "-acme/kit/notes.json"}
    assert (snap.metadata["agentName"], snap.metadata["instanceKey"]) == ("planner", "k")
    assert backend.workspaces() == [WS]


def test_a_snapshot_of_an_open_instance_needs_no_lock(backend: StorageBackend) -> None:
    fill(backend)
    with backend.open_instance(WS, "planner", "k"):
        snap = backend.snapshot(WS, "planner", "k")
    assert snap is not None and len(snap.messages) == 2


def test_restore_writes_the_snapshot_exactly_and_the_instance_opens_from_it(
    backend: StorageBackend,
) -> None:
    fill(backend)
    snap = backend.snapshot(WS, "planner", "k")
    assert snap is not None
    copy = dataclasses.replace(snap, instance_key="copy",
                               metadata={**snap.metadata, "instanceKey": "copy"})
    backend.restore("other-ws", copy)
    again = backend.snapshot("other-ws", "planner", "copy")
    assert again is not None and again.content() == copy.content()
    store = backend.open_instance("other-ws", "planner", "copy", create=False)
    try:
        texts = [m.text for m in store.load().next_messages]  # the cut-short turn recovered
        assert texts == ["m0\u0000", "m1\u0000", "cut short"]
        assert store.load_extension_state("@acme/kit/notes") == [1, 2]
    finally:
        store.close()


def test_restore_refuses_an_existing_instance_unless_replace_and_never_an_open_one(
    backend: StorageBackend,
) -> None:
    fill(backend)
    snap = backend.snapshot(WS, "planner", "k")
    assert snap is not None
    smaller = dataclasses.replace(snap, messages=snap.messages[:1], events=[], journal=[],
                                  extensions={})
    with pytest.raises(GoondanError) as info:
        backend.restore(WS, smaller)
    assert info.value.code == "E_STORE_INSTANCE_EXISTS"
    assert backend.snapshot(WS, "planner", "k") == snap  # nothing written
    with backend.open_instance(WS, "planner", "k"), pytest.raises(GoondanError) as locked:
        backend.restore(WS, smaller, replace=True)
    assert locked.value.code == "E_INSTANCE_LOCKED"
    backend.restore(WS, smaller, replace=True)
    replaced = backend.snapshot(WS, "planner", "k")
    assert replaced is not None and replaced.content() == smaller.content()


def test_an_approval_is_restored_as_given_once(backend: StorageBackend) -> None:
    approvals = backend.approvals(WS)
    asked = approvals.request(agent="planner", instance_key="k", turn_id="t1", tool_call_id="c1",
                              tool="files__delete", args={"path": "x"}, timeout_ms=60_000)
    decided, _ = approvals.decide(asked.id, approve=False, by="ann", via="cli", reason="no")
    target = backend.approvals("other-ws")
    assert target.restore(decided.request, decided.decision) is True
    assert target.restore(decided.request, None) is False
    restored = target.get(asked.id)
    assert restored is not None and restored.to_dict() == decided.to_dict()
    assert backend.workspaces() == ["other-ws", WS]


def test_a_queue_lists_its_records_and_restores_them_once_in_order(
    backend: StorageBackend,
) -> None:
    queue = backend.queue(WS, "inputs/main")
    queue.open_entries()
    for number in range(3):
        queue.append_entry({"id": f"in-{number}", "text": f"hello {number}"}, "planner", "k")
    assert queue.claim("planner", "k", "in-0") is True  # final at once: started
    records = queue.records()
    assert [(r.id, r.started) for r in records] == [
        ("in-0", True), ("in-1", False), ("in-2", False)]
    assert records[0] == QueueRecord("in-0", True)  # its text lives in the conversation now
    assert records[1].event == {"id": "in-1", "text": "hello 1"}
    assert (records[1].agent, records[1].instance_key) == ("planner", "k")
    assert backend.queue_scopes(WS) == ["inputs/main"]

    target = backend.queue("other-ws", "connections/main/slack")
    for record in records:
        assert target.restore(record) is True
    assert target.restore(records[1]) is False
    assert target.records() == records
    target.open_entries()
    assert [e.id for e in target.open_entries()] == ["in-1", "in-2"]
    assert target.seen("in-0")  # a repeated id stays refused
    assert backend.queue_scopes("other-ws") == ["connections/main/slack"]
    assert backend.workspaces() == ["other-ws", WS]
