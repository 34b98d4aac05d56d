"""Following a conversation through the storage contract (goondan/studio/store.py, the studio's
live follow on a PostgreSQL store): polled by ``version``, on both backends — what a turn
writes (events, the commit, the next turn, a rewrite) comes out once each, in order."""

from __future__ import annotations

from typing import Any

from goondan.conversation.messages import Message, MessageEvent
from goondan.storage.contract import StorageBackend
from goondan.studio.store import StoreFollower, conversation
from tests.support.backends import backend, backend_name, store_spec

__all__ = ["backend", "backend_name", "store_spec"]

WS = "ws-follow"


def _turn(store: Any, events: list[MessageEvent], turn_id: str, *, commit: bool) -> None:
    state = store.load()
    for event in events:
        state.emit(event)
        store.append_event(event, turn_id)
    if commit:
        store.commit(state)


def _say(*texts: str) -> list[MessageEvent]:
    return [MessageEvent.append(Message.user(t)) for t in texts]


def _texts(got: list[tuple[str, Any]]) -> list[tuple[str, Any, Any]]:
    return [(n, d.get("text"), d.get("pending")) for n, d in got]


def test_pending_then_committed_then_the_next_turn_then_a_rewrite_resets(
    backend: StorageBackend,
) -> None:
    store = backend.open_instance(WS, "agent", "k")
    try:
        _turn(store, _say("before"), "t0", commit=True)
        follower = StoreFollower(backend, WS, "agent", "k")
        assert follower.poll() == []  # from now: "before" is not sent
        _turn(store, _say("one", "two"), "t1", commit=False)
        assert _texts(follower.poll()) == [("message", "one", True), ("message", "two", True)]
        assert follower.poll() == []
        store.commit(store.load())
        _turn(store, _say("three-is-longer"), "t2", commit=False)  # before the next poll
        assert _texts(follower.poll()) == [
            ("message", "one", False), ("message", "two", False),
            ("message", "three-is-longer", True)]
        store.commit(store.load())
        assert _texts(follower.poll()) == [("message", "three-is-longer", False)]
        first = conversation(backend, WS, "agent", "k")["messages"][0]["id"]
        _turn(store, [MessageEvent.remove(first)], "t3", commit=True)  # rewrites the list
        assert [n for n, _ in follower.poll()] == ["reset"]
    finally:
        store.close()


def test_a_stream_from_the_fetched_cursor_misses_nothing_written_before_it_opened(
    backend: StorageBackend,
) -> None:
    store = backend.open_instance(WS, "agent", "k")
    try:
        _turn(store, _say("before"), "t0", commit=True)
        _turn(store, _say("pending then"), "t1", commit=False)
        fetched = conversation(backend, WS, "agent", "k")
        assert [m["text"] for m in fetched["messages"]] == ["before", "pending then"]
        store.commit(store.load())
        _turn(store, _say("meanwhile"), "t2", commit=False)
        assert StoreFollower(backend, WS, "agent", "k").poll() == []  # from now: lost
        follower = StoreFollower(backend, WS, "agent", "k", fetched["cursor"])
        assert _texts(follower.poll()) == [("message", "pending then", False),
                                           ("message", "meanwhile", True)]
    finally:
        store.close()
