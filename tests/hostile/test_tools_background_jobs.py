"""Issue 27 item 5: a tool's background jobs do not outlive the call.

``bash__exec`` runs its command in its own process group; when the command has exited, what it
left running in that group (``sleep 7771 &``), and what left the group with ``setsid`` but
still carries the call's marker, is stopped: SIGTERM, a short grace, SIGKILL — unless the call
opts in with ``keepBackground: true`` (docs/base-package.md), in which case the job lives on
until its agent process stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, load_entry_module
from goondan.tools.processes import AGENT_PROCESS_ENV, stop_group, sweep
from tests.support.aio import run
from tests.support.process_tree import alive

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
handlers = load_entry_module(TOOLS / "bash.py").handlers

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell tool"),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc"),
]


def _gone_soon(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _exec(workdir: Path, args: dict[str, Any]) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir)
    result: dict[str, Any] = run(handlers["exec"](ctx, args))
    return result


def test_a_background_job_of_a_command_that_exits_normally_is_stopped_with_the_call(
    tmp_path: Path,
) -> None:
    result = _exec(tmp_path, {"command": "sleep 7771 >/dev/null 2>&1 & echo $!"})
    assert result["exitCode"] == 0 and not result["timedOut"]
    pid = int(result["stdout"].strip())
    assert _gone_soon(pid), "sleep 7771 & survived the call"


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    result = _exec(
        tmp_path, {"command": "sh -c 'trap \"\" TERM; exec sleep 7772' >/dev/null 2>&1 & echo $!"}
    )
    pid = int(result["stdout"].strip())
    assert _gone_soon(pid), "a SIGTERM-ignoring job survived the call"


def test_a_job_that_left_the_group_with_setsid_is_stopped_through_the_call_marker(
    tmp_path: Path,
) -> None:
    result = _exec(tmp_path, {"command": "setsid sleep 7773 >/dev/null 2>&1 < /dev/null & echo $!"})
    pid = int(result["stdout"].strip())
    assert _gone_soon(pid), "a setsid job survived the call"


def test_keep_background_keeps_the_job_until_its_agent_process_sweeps_it(tmp_path: Path) -> None:
    tag = {"TEST_JOB_TAG": tmp_path.name}  # narrows the sweep to this test's job
    result = _exec(
        tmp_path,
        {"command": "sleep 7774 >/dev/null 2>&1 & echo $!", "keepBackground": True, "env": tag},
    )
    pid = int(result["stdout"].strip())
    try:
        assert alive(pid), "keepBackground did not keep the job"
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"{AGENT_PROCESS_ENV}={os.getpid()}".encode() in environ
        # what an agent process does on its way out (goondan.swarm.agent_process.run_child)
        assert sweep({AGENT_PROCESS_ENV: str(os.getpid()), **tag}) == 1
        assert _gone_soon(pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_marked_process_forked_while_a_sweep_runs_is_killed_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A marked job may fork after a sweep listed ``/proc`` and before it killed the job: the
    child carries the markers too, and the sweep looks again until it finds no new one. The
    fork is placed at that moment through the sweep's listing (its test point)."""
    from goondan.tools import processes

    tag = {"TEST_JOB_TAG": tmp_path.name}  # narrows the sweep to this test's processes
    env = {**os.environ, **tag}

    def job(seconds: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(["sleep", seconds], env=env, start_new_session=True,
                                stdin=subprocess.DEVNULL)

    jobs = [job("7775")]
    listed = processes._proc_pids

    def listing() -> list[int]:
        pids = listed()
        if len(jobs) == 1:  # the job's child, born just after the first listing
            jobs.append(job("7776"))
        return pids

    monkeypatch.setattr(processes, "_proc_pids", listing)
    try:
        assert sweep(tag) == 2
        for proc in jobs:
            assert proc.wait(timeout=5) == -signal.SIGKILL
    finally:
        for proc in jobs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_keep_background_must_be_a_boolean(tmp_path: Path) -> None:
    from goondan.tools import ToolFailure

    with pytest.raises(ToolFailure):
        _exec(tmp_path, {"command": "true", "keepBackground": "yes"})


def test_stop_group_of_an_empty_group_returns_at_once() -> None:
    started = time.monotonic()
    assert stop_group(2**22 + 12345) is False
    assert time.monotonic() - started < 0.05
