"""Following a conversation for the studio's stream (goondan/studio/live.py): what a turn
writes through the real :class:`InstanceStore` — events while it runs, the commit, the next
turn — comes out once each, in order, as pending then committed messages."""

from __future__ import annotations

import threading
from pathlib import Path

from goondan.conversation.messages import Message, MessageEvent
from goondan.studio.data import find_instance
from goondan.studio.live import ConversationFollower, stream
from goondan.workspace.store import InstanceStore

WS = "ws-follow"


def _turn(store: InstanceStore, texts: list[str], turn_id: str, *, commit: bool) -> None:
    state = store.load()
    for text in texts:
        event = MessageEvent.append(Message.user(text))
        state.emit(event)
        store.append_event(event, turn_id)
    if commit:
        store.commit(state)


def _follower(state_root: Path) -> ConversationFollower:
    return ConversationFollower(find_instance(state_root, WS, "agent", "k"))


def test_a_running_turn_shows_pending_messages_then_committed_ones(state_root: Path) -> None:
    with InstanceStore.open(state_root, WS, "agent", "k") as store:
        _turn(store, ["before"], "t0", commit=True)
        follower = _follower(state_root)
        assert follower.poll() == []  # starts from now: "before" is not sent
        _turn(store, ["one", "two"], "t1", commit=False)
        got = follower.poll()
        assert [(n, d["text"], d["pending"]) for n, d in got] == [
            ("message", "one", True), ("message", "two", True)]
        assert follower.poll() == []
        state = store.load()
        store.commit(state)
        got = follower.poll()
        assert [(n, d["text"], d["pending"]) for n, d in got] == [
            ("message", "one", False), ("message", "two", False)]


def test_events_emptied_and_written_again_between_polls_are_read_from_the_start(
    state_root: Path,
) -> None:
    """A commit clears events.jsonl and the next turn appends before the next poll: the new
    events are longer than what was read, but they are a new file's content."""
    with InstanceStore.open(state_root, WS, "agent", "k") as store:
        _turn(store, ["first"], "t0", commit=True)
        follower = _follower(state_root)
        _turn(store, ["a"], "t1", commit=False)
        assert [d["text"] for _, d in follower.poll()] == ["a"]
        store.commit(store.load())
        _turn(store, ["b-is-a-longer-message-than-a", "c"], "t2", commit=False)
        got = [(d["text"], d["pending"]) for _, d in follower.poll()]
        assert got == [("a", False), ("b-is-a-longer-message-than-a", True), ("c", True)]


def test_the_stream_ends_when_the_server_stops_and_pings_while_quiet() -> None:
    stop = threading.Event()
    polls: list[int] = []

    def poll() -> list[tuple[str, dict[str, object]]]:
        polls.append(1)
        if len(polls) == 3:
            stop.set()
        return []

    chunks = list(stream(poll, stop, interval=0.001, ping=0.002))
    assert chunks[0] == b": open\n\n" and b": ping\n\n" in chunks
    assert len(polls) == 3


def test_a_stream_from_the_fetched_cursor_misses_nothing_written_before_it_opened(
    state_root: Path,
) -> None:
    """The page fetched the conversation; a turn ran and committed, and the next one started,
    before its stream opened: the stream from the fetch's cursor delivers all of it."""
    from goondan.studio.data import conversation

    with InstanceStore.open(state_root, WS, "agent", "k") as store:
        _turn(store, ["before"], "t0", commit=True)
        _turn(store, ["pending then"], "t1", commit=False)
        fetched = conversation(state_root, WS, "agent", "k")
        assert [m["text"] for m in fetched["messages"]] == ["before", "pending then"]
        store.commit(store.load())
        _turn(store, ["meanwhile"], "t2", commit=False)
        late = ConversationFollower(find_instance(state_root, WS, "agent", "k"))
        assert late.poll() == []  # from "now": the gap is lost
        follower = ConversationFollower(find_instance(state_root, WS, "agent", "k"),
                                        fetched["cursor"])
        got = [(d["text"], d["pending"]) for _, d in follower.poll()]
    # events.jsonl was emptied and written again since the fetch: read from its start
    assert got == [("pending then", False), ("meanwhile", True)]
