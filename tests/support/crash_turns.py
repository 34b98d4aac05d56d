"""Deterministic turns for the workspace crash test (tests/workspace/test_crash.py).

Turn ``t`` is a fixed list of events that depends only on ``t``: a user message, an assistant
tool call, its result and a final answer; every third turn also replaces the previous turn's
answer, every fifth removes an old user message and every twentieth starts with a truncate, so
both commit paths (delta append and atomic rewrite) are exercised and the history stays short.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from goondan.conversation import Message, MessageEvent
from goondan.conversation.messages import MessageSource
from goondan.types import ToolCall, ToolCallResult
from goondan.workspace import InstanceStore

WORKSPACE = "crash-00000000"
AGENT = "agent"
KEY = "crash"
STAMP = "2026-01-01T00:00:00.000Z"


def _stamp(message: Message, turn: int) -> Message:
    message.created_at = STAMP
    message.metadata["t"] = turn
    return message


def turn_events(t: int) -> list[MessageEvent]:
    """The events of turn ``t`` (ids derived from ``t``)."""
    user = _stamp(Message(id=f"u{t}", data={"role": "user", "content": f"turn {t}"},
                          source=MessageSource("user")), t)
    call = _stamp(Message.assistant("", [ToolCall(f"c{t}", "calc", {"n": t})]), t)
    call.id = f"a{t}"
    result = _stamp(Message.tool_result(ToolCallResult.success(f"c{t}", "calc", t * 2)), t)
    result.id = f"r{t}"
    final = _stamp(Message.assistant(f"answer {t}"), t)
    final.id = f"f{t}"
    events = [MessageEvent.append(m) for m in (user, call, result, final)]
    if t % 20 == 19:
        events.insert(0, MessageEvent.truncate())
    if t % 3 == 2:
        replacement = _stamp(Message.assistant(f"answer {t - 1} (edited)"), t)
        replacement.id = f"f{t - 1}x"
        events.append(MessageEvent.replace(f"f{t - 1}", replacement))
    if t % 5 == 4:
        events.append(MessageEvent.remove(f"u{t - 3}"))
    return events


def next_turn(messages: list[Message]) -> int:
    """The next turn number: one more than the highest ``t`` stamped on any message."""
    return max((int(m.metadata.get("t", -1)) for m in messages), default=-1) + 1


def open_instance(state_root: Path, store_url: str | None = None) -> Any:
    """The crash test's instance: in the JSONL state root, or in the PostgreSQL store at
    ``store_url`` (the same test against both backends)."""
    if store_url is None:
        return InstanceStore.open(state_root, WORKSPACE, AGENT, KEY, fsync=False)
    from goondan.storage.postgres.backend import PostgresBackend

    backend = PostgresBackend.open(store_url)
    try:
        return backend.open_instance(WORKSPACE, AGENT, KEY)
    except BaseException:
        # Not left open: the crash test retries while the killed writer's session still holds
        # the lock, and each backend left behind would keep its pool's and lock session's
        # connections until the test's database is dropped — enough of them, under load, and
        # the next writer cannot connect (``too many clients``).
        backend.close()
        raise


def child_loop(state_root: Path, progress_fd: int, store_url: str | None = None) -> None:
    """Run turns forever, writing ``e`` after each durable event and ``c`` after each commit."""
    store = open_instance(state_root, store_url)
    state = store.load()
    t = next_turn(state.next_messages)
    while True:
        for event in turn_events(t):
            state.emit(event)
            store.append_event(event, f"turn-{t}")
            os.write(progress_fd, b"e")
        state = store.commit(state)
        os.write(progress_fd, b"c")
        t += 1
