"""Acceptance: SIGKILL a writer at >= 200 random moments; every reopen is exact.

A forked child runs deterministic turns (tests/support/crash_turns.py), reporting each durable
event and each returned commit through a pipe. The parent kills it after a random number of
reports (the child keeps running meanwhile, so the kill lands at an arbitrary instruction), then
reopens the instance and checks that the recovered conversation equals the intended history up
to some point: every turn whose commit returned, plus a prefix of the next turn with repaired
tool pairs. Also: no duplicate ids, no corrupt file, every tool call answered exactly once.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

from goondan.conversation import ConversationState, Message, fold, repair_tool_pairs
from goondan.conversation.repair import tool_result_ids
from goondan.workspace import InstanceStore
from tests.support.crash_turns import AGENT, KEY, WORKSPACE, child_loop, next_turn, turn_events

KILLS = 300


def project(messages: list[Message]) -> list[tuple[object, ...]]:
    """Comparable form; synthetic results get fresh random ids, so compare them by call id."""
    return [
        ("SYN" if m.metadata.get("synthetic") else m.id, m.role, m.text, tuple(tool_result_ids(m)))
        for m in messages
    ]


def recover(messages: list[Message]) -> list[Message]:
    state = ConversationState(messages)
    state.emit_all(repair_tool_pairs(messages))
    return state.next_messages


def spawn(state_root: Path) -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(read_fd)
            child_loop(state_root, write_fd)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def read_reports(fd: int, wanted: int) -> bytes:
    got = b""
    while len(got) < wanted:
        chunk = os.read(fd, wanted - len(got))
        if not chunk:
            break
        got += chunk
    return got


def test_sigkill_at_random_moments_never_loses_or_duplicates(state_root: Path) -> None:
    rng = random.Random(1234)
    expected: list[Message] = []  # the history recovered after the previous kill
    total_commits = 0
    for _ in range(KILLS):
        pid, fd = spawn(state_root)
        reports = read_reports(fd, rng.randint(1, 14))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        assert os.WIFSIGNALED(status), "child stopped on its own (it must run until killed)"
        committed = reports.count(b"c")
        total_commits += committed

        with InstanceStore.open(state_root, WORKSPACE, AGENT, KEY, fsync=False) as store:
            got = store.load().next_messages
        assert not any(d.is_error for d in store.recovery_diagnostics)
        ids = [m.id for m in got if not m.metadata.get("synthetic")]
        assert len(ids) == len(set(ids)), "duplicate message ids after recovery"
        assert repair_tool_pairs(got) == [], "a tool call without exactly one result"
        calls = [c.id for m in got for c in m.tool_calls]
        results = [i for m in got if m.role == "tool" for i in tool_result_ids(m)]
        assert sorted(calls) == sorted(results)

        # Find the point of the intended history the recovered state corresponds to.
        target = project(got)
        full = list(expected)
        t = next_turn(full)
        matched = False
        for turn_index in range(committed + 60):
            events = turn_events(t + turn_index)
            if turn_index >= committed:  # every turn whose commit returned must be included
                for cut in range(len(events) + 1):
                    candidate = fold(full, events[:cut])[0]
                    if abs(len(candidate) - len(got)) > 2:  # repair adds at most one message
                        continue
                    if project(recover(candidate)) == target:
                        matched = True
                        break
            if matched:
                break
            full = fold(full, events)[0]
        assert matched, f"recovered state is not a prefix of the intended history ({len(got)} msgs)"
        expected = got
    assert total_commits > KILLS // 2  # the test really ran turns, not just start-ups
