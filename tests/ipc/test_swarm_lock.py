"""The swarm lock and process identity of :mod:`goondan.swarm.state` (issue 27 item 4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.swarm.state import ActiveRuntime, SwarmLock, pid_start_time, same_process


def test_only_one_holder_per_swarm_until_it_releases(tmp_path: Path) -> None:
    first, second, other = (
        SwarmLock(tmp_path, "k.ws"),
        SwarmLock(tmp_path, "k.ws"),
        SwarmLock(tmp_path, "j.ws"),
    )
    assert first.acquire()
    assert not second.acquire()  # another open file description: refused, even in this process
    assert other.acquire()  # another swarm
    assert first.holder() == os.getpid()
    first.release()
    assert second.acquire()
    second.release()
    other.release()


def test_lock_is_released_when_its_holder_dies(tmp_path: Path) -> None:
    lock = SwarmLock(tmp_path, "k.ws")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from goondan.swarm.state import SwarmLock; "
            f"assert SwarmLock(Path({str(tmp_path)!r}), 'k.ws').acquire(); "
            "print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert not lock.acquire()
        holder.kill()
        holder.wait(timeout=30)
        assert lock.acquire()
    finally:
        holder.kill()
        lock.release()


def test_adopt_accepts_only_a_descriptor_of_this_lock(tmp_path: Path) -> None:
    parent = SwarmLock(tmp_path, "k.ws")
    assert parent.acquire() and parent.fd is not None
    child = SwarmLock(tmp_path, "k.ws")
    inherited = os.dup(parent.fd)  # what pass_fds gives the detached orchestrator
    assert child.adopt(inherited)
    parent.release()
    assert not SwarmLock(tmp_path, "k.ws").acquire()  # still held through the adopted descriptor
    child.release()
    stray = os.open(tmp_path / "unrelated", os.O_RDWR | os.O_CREAT)
    try:
        assert not SwarmLock(tmp_path, "k.ws").adopt(stray)
    finally:
        os.close(stray)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="start times come from /proc")
def test_a_reused_pid_is_not_the_recorded_process() -> None:
    start = pid_start_time(os.getpid())
    assert start is not None and same_process(os.getpid(), start)
    assert not same_process(os.getpid(), start - 1)  # the pid now names another process
    record = ActiveRuntime("k", "b", "s", pid=os.getpid(), started_at="", pid_start=start - 1)
    assert not record.alive
    assert ActiveRuntime.from_dict(record.to_dict()).pid_start == start - 1
    # old record: pid only
    assert ActiveRuntime.from_dict({"instanceKey": "k", "pid": os.getpid()}).alive
