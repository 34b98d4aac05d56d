"""Acceptance: SIGKILL a writer at >= 200 random moments; every reopen is exact.

A forked child runs deterministic turns (tests/support/crash_turns.py), reporting each durable
event and each returned commit through a pipe. The parent kills it after a random number of
reports (the child keeps running meanwhile, so the kill lands at an arbitrary instruction), then
reopens the instance and checks that the recovered conversation equals the intended history up
to some point: every turn whose commit returned, plus a prefix of the next turn with repaired
tool pairs. Also: no duplicate ids, no corrupt file, every tool call answered exactly once.

Run against both storage backends: the JSONL state root (``KILLS`` kills) and PostgreSQL
(``trials(PG_QUICK, KILLS)`` kills: a reopen there also waits for the server to end the killed
child's session, which holds the instance lock).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation import ConversationState, Message, fold, repair_tool_pairs
from goondan.conversation.repair import tool_result_ids
from goondan.errors import InstanceLockedError
from tests.support.crash_turns import child_loop, next_turn, open_instance, turn_events
from tests.support.soak import trials

KILLS = 300
PG_QUICK = 25


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


class Writer:
    """A writer process running turns until killed, and the pipe of its progress reports."""

    def __init__(self, pid: int, progress_fd: int, process: BaseProcess | None = None) -> None:
        self.pid, self.progress_fd, self._process = pid, progress_fd, process

    def kill(self) -> int | None:
        """SIGKILL it; the signal that ended it (None: it exited on its own first)."""
        os.kill(self.pid, signal.SIGKILL)
        if self._process is None:
            _, status = os.waitpid(self.pid, 0)
            signalled = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        else:
            self._process.join()
            code = self._process.exitcode
            signalled = -code if code is not None and code < 0 else None
        os.close(self.progress_fd)
        return signalled


# The PostgreSQL writer is forked from a fork server (a fresh interpreter without threads), not
# from pytest's process: a fork of a process with threads (xdist's, psycopg pools') inherits any
# lock another thread held at that instant, and the writer's own pool threads then hung (its
# first connection: "couldn't get a connection after 10 s", twice in `make test` under load).
# The JSONL writer uses no thread and no library lock: a plain fork, ~3x cheaper per kill.
_FORK_SERVER = multiprocessing.get_context("forkserver")
_FORK_SERVER.set_forkserver_preload(["tests.support.crash_turns"])


def _writer(state_root: Path, progress: Connection, store_url: str | None) -> None:
    try:
        child_loop(state_root, progress.fileno(), store_url)
    except BaseException:
        traceback.print_exc()  # in the test's captured stderr: why the writer stopped
        os._exit(1)


def spawn(state_root: Path, store_url: str | None) -> Writer:
    if store_url is not None:
        reader, writer = _FORK_SERVER.Pipe(duplex=False)
        process = _FORK_SERVER.Process(target=_writer, args=(state_root, writer, store_url),
                                       daemon=True)
        process.start()
        writer.close()
        assert process.pid is not None
        return Writer(process.pid, os.dup(reader.fileno()), process)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 0
        try:
            os.close(read_fd)
            child_loop(state_root, write_fd, store_url)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return Writer(pid, read_fd)


def read_reports(fd: int, wanted: int) -> bytes:
    got = b""
    while len(got) < wanted:
        chunk = os.read(fd, wanted - len(got))
        if not chunk:
            break
        got += chunk
    return got


def reopen(state_root: Path, store_url: str | None) -> Any:
    deadline = time.monotonic() + 10
    while True:  # PostgreSQL: the server ends the killed child's session (and its lock) soon
        try:
            return open_instance(state_root, store_url)
        except InstanceLockedError:
            if store_url is None or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


@pytest.mark.parametrize(
    "backend_kind", ["jsonl", pytest.param("postgres", marks=[pytest.mark.soak, pytest.mark.slow])]
)
def test_sigkill_at_random_moments_never_loses_or_duplicates(
    state_root: Path, backend_kind: str, request: pytest.FixtureRequest
) -> None:
    store_url: str | None = None
    kills = KILLS
    if backend_kind == "postgres":
        store_url = str(request.getfixturevalue("postgres_url"))
        kills = trials(PG_QUICK, KILLS)
    rng = random.Random(1234)
    expected: list[Message] = []  # the history recovered after the previous kill
    total_commits = 0
    for _ in range(kills):
        writer = spawn(state_root, store_url)
        reports = read_reports(writer.progress_fd, rng.randint(1, 14))
        ended_by = writer.kill()
        assert ended_by == signal.SIGKILL, "the writer stopped on its own (it must run till killed)"
        committed = reports.count(b"c")
        total_commits += committed

        store = reopen(state_root, store_url)
        try:
            got = store.load().next_messages
        finally:
            store.close()
            if store_url is not None:
                store.db.close()
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
    assert total_commits > kills // 2  # the test really ran turns, not just start-ups
