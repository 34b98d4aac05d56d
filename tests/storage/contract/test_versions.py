"""The storage contract, ``version``: a cheap token a reader polls before it reads an
instance's snapshot again (the studio's live follow on any store). Same assertions on every
backend."""

from __future__ import annotations

from goondan.conversation import Message, MessageEvent
from goondan.storage.contract import StorageBackend

WS = "proj-0123abcd"


def test_the_version_changes_with_every_event_commit_and_status_and_only_then(
    backend: StorageBackend,
) -> None:
    assert backend.version(WS, "planner", "k") is None
    store = backend.open_instance(WS, "planner", "k")
    state = store.load()
    seen = [backend.version(WS, "planner", "k")]
    assert seen[0] is not None
    assert backend.version(WS, "planner", "k") == seen[0]  # nothing changed: the same token
    event = MessageEvent.append(Message.user("hello"))
    state.emit(event)
    store.append_event(event, "t0")
    seen.append(backend.version(WS, "planner", "k"))
    store.commit(state)
    seen.append(backend.version(WS, "planner", "k"))
    store.set_status("processing")
    seen.append(backend.version(WS, "planner", "k"))
    store.close()
    assert len(set(seen)) == len(seen), seen
    assert backend.version(WS, "planner", "other") is None
