"""The storage contract, durable input queues: enqueue with an id, pending in acceptance order,
each input started exactly once (claim, then confirm), take in order per instance — against
every backend (``backend``: jsonl, postgres)."""

from __future__ import annotations

import subprocess
import sys
import threading

from goondan.storage.contract import InputQueue, StorageBackend
from goondan.workspace.claims import owner_token
from tests.support.backends import open_backend

WS = "proj-0123abcd"
SCOPE = "inputs/main"


def event(ident: str, text: str = "hi") -> dict[str, object]:
    return {"id": ident, "type": "message", "text": text}


def dead_owner() -> str:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    return f"{child.stdout.strip()}:1"  # a pid that ran and exited (start time cannot match)


def test_a_queue_conforms_to_the_contract(backend: StorageBackend) -> None:
    assert isinstance(backend.queue(WS, SCOPE), InputQueue)


def test_pending_inputs_come_back_in_acceptance_order_until_started(
    backend: StorageBackend, store_spec: tuple[str, str],
) -> None:
    queue = backend.queue(WS, SCOPE)
    assert queue.open_entries() == []
    for ident, key in [("e1", "a"), ("e2", "b"), ("e3", "a")]:
        queue.append_entry(event(ident), "planner", key)
    assert queue.seen("e2") and not queue.seen("e9")
    assert queue.claim("planner", "a", "e1") is True  # no owner: final at once
    assert queue.claim("planner", "a", "e1") is False
    queue.close()
    reopened = open_backend(store_spec)
    again = reopened.queue(WS, SCOPE)
    pending = again.open_entries()
    assert [(e.id, e.agent, e.instance_key) for e in pending] == [
        ("e2", "planner", "b"), ("e3", "planner", "a")]
    assert pending[0].event == event("e2") and pending[0].accepted_at
    assert again.seen("e1")  # a started input's id stays known
    again.close()
    reopened.close()


def test_a_live_owners_reservation_blocks_a_dead_owners_is_taken_over(
    backend: StorageBackend,
) -> None:
    queue = backend.queue(WS, SCOPE)
    queue.open_entries()
    queue.append_entry(event("e1"), "planner", "a")
    queue.append_entry(event("e2"), "planner", "a")
    assert queue.claim("planner", "a", "e1", owner=owner_token()) is True
    assert queue.claim("planner", "a", "e1", owner=owner_token()) is False
    assert [e.id for e in queue.open_entries()] == ["e2"]  # e1 runs now
    dead = dead_owner()
    assert queue.claim("planner", "a", "e2", owner=dead) is True
    assert [e.id for e in queue.open_entries()] == ["e2"]  # its runner died: pending again
    assert queue.claim("planner", "a", "e2", owner=owner_token()) is True  # taken over
    queue.confirm("planner", "a", "e1")
    queue.confirm("planner", "a", "e2")
    assert queue.open_entries() == []
    assert queue.claim("planner", "a", "e2", owner=owner_token()) is False


def test_a_dead_owners_reservation_whose_input_was_written_becomes_final(
    backend: StorageBackend,
) -> None:
    queue = backend.queue(WS, SCOPE)
    queue.open_entries()
    queue.append_entry(event("e1"), "planner", "a")
    assert queue.claim("planner", "a", "e1", owner=dead_owner()) is True
    assert queue.claim("planner", "a", "e1", owner=owner_token(), written=True) is False
    assert queue.open_entries() == []
    assert queue.claim("planner", "a", "e1", owner=owner_token()) is False


def test_take_hands_out_each_instances_inputs_in_order(backend: StorageBackend) -> None:
    queue = backend.queue(WS, SCOPE)
    queue.open_entries()
    for ident, key in [("e1", "a"), ("e2", "b"), ("e3", "a")]:
        queue.append_entry(event(ident), "planner", key)
    me = owner_token()
    first = queue.take("planner", "a", owner=me)
    assert first is not None and first.id == "e1" and first.event == event("e1")
    queue.confirm("planner", "a", "e1")
    second = queue.take("planner", "a", owner=me)
    assert second is not None and second.id == "e3"
    assert queue.take("planner", "a", owner=me) is None  # e3 is held by a live owner
    queue.confirm("planner", "a", "e3")
    assert queue.take("planner", "a", owner=me) is None
    taken = queue.take("planner", "b", owner=me)
    assert taken is not None and taken.id == "e2"


def test_concurrent_takers_start_each_input_exactly_once(
    backend: StorageBackend, store_spec: tuple[str, str],
) -> None:
    queue = backend.queue(WS, SCOPE)
    queue.open_entries()
    ids = [f"e{n}" for n in range(30)]
    for ident in ids:
        queue.append_entry(event(ident), "planner", "a")
    got: list[list[str]] = [[] for _ in range(3)]

    def worker(slot: int) -> None:
        mine = open_backend(store_spec)  # its own handle (its own connection)
        taker = mine.queue(WS, SCOPE)
        try:
            while (entry := taker.take("planner", "a", owner=owner_token())) is not None:
                got[slot].append(entry.id)
                taker.confirm("planner", "a", entry.id)
        finally:
            mine.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    taken = [i for slot in got for i in slot]
    assert sorted(taken) == sorted(ids) and len(taken) == len(set(taken))
    for slot in got:  # each taker saw the inputs in acceptance order
        assert slot == sorted(slot, key=ids.index)
    assert queue.open_entries() == []


def test_queues_of_two_scopes_are_separate(backend: StorageBackend) -> None:
    swarm = backend.queue(WS, SCOPE)
    connection = backend.queue(WS, "connections/main/slack")
    swarm.open_entries()
    connection.open_entries()
    swarm.append_entry(event("e1"), "planner", "a")
    assert connection.open_entries() == [] and not connection.seen("e1")
    assert [e.id for e in swarm.open_entries()] == ["e1"]
