"""``goondan run`` / ``logs`` / ``restart`` end to end on examples/delegation (scripted models)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.swarm.service import send_control
from goondan.swarm.state import list_live_processes, pid_alive, read_active

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "delegation"


def goondan(
    *args: str, state_root: Path, timeout: float = 60, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, **kwargs,
    )


def _worker_of(row: Any) -> tuple[int | None, str | None]:
    """A worker's identity: its pid and start time (with pooled isolation, a replaced instance
    keeps its host's pid and gets a new start time)."""
    return row.pid, row.started_at


def _worker(state_root: Path, process: str) -> tuple[int | None, str | None]:
    return _worker_of({x.process: x for x in list_live_processes(state_root)}[process])


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _child_pids(state_root: Path) -> list[int]:
    return [r.pid for r in list_live_processes(state_root) if r.pid and r.process != "orchestrator"]


def test_run_input_one_shot_delegates_and_leaves_no_process(state_root: Path) -> None:
    result = goondan(
        "run", "--bundle", str(EXAMPLE), "--input", "What is 17 * 23?", state_root=state_root
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The worker says: 17 * 23 = 391"
    # runtime files are keyed by instanceKey and workspace: delegation.<workspace id>
    (status_file,) = (state_root / "runtime" / "status").glob("delegation.*.json")
    status = json.loads(status_file.read_text())
    procs = {p["process"]: p for p in status["processes"]}
    assert set(procs) == {"coordinator.delegation", "worker.delegation"}
    assert all(p["status"] == "terminated" for p in procs.values())
    assert read_active(state_root) is None  # cleared at exit
    logs = goondan(
        "logs",
        "--instance-key",
        "delegation",
        "--process",
        "worker.delegation",
        state_root=state_root,
    )
    # pretty: time process LEVEL message
    assert logs.returncode == 0 and " worker.delegation INFO " in logs.stdout
    # the worker's conversation was committed by its own process
    bases = list((state_root / "workspaces").glob("*/instances/*/messages/base.jsonl"))
    assert len(bases) == 2 and any("391" in p.read_text() for p in bases)


def test_run_reads_piped_lines_and_env_files(state_root: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle)
    (bundle / ".env").write_text("GOONDAN_TEST_FROM_ENV=1\n")
    result = goondan(
        "run", "--bundle", str(bundle), "--env-file", "missing.env", state_root=state_root
    )
    assert result.returncode == 3 and "E_RUN_ENV_FILE" in result.stderr
    result = goondan("run", "--bundle", str(bundle), state_root=state_root,
                     input="What is 17 * 23?\n\nlist your agents\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines == ["The worker says: 17 * 23 = 391", 'Agents I can call: ["worker"]']


@pytest.fixture
def headless(state_root: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(bundle),
            "--foreground",
            "--watch",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait(lambda: (a := read_active(state_root)) is not None and a.pid == proc.pid
              and Path(a.control_socket or "").exists(), 30, "the orchestrator")
        yield proc, bundle
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _control(state_root: Path, request: dict[str, Any]) -> dict[str, Any]:
    active = read_active(state_root)
    assert active is not None and active.control_socket
    return asyncio.run(send_control(Path(active.control_socket), request, timeout_s=30))


def test_headless_restart_watch_logs_and_sigterm(
    state_root: Path, headless: tuple[subprocess.Popen[str], Path]
) -> None:
    proc, bundle = headless
    answer = _control(state_root, {"command": "request", "input": "What is 17 * 23?"})
    assert answer["ok"] and "391" in answer["response"]
    # processes.json is written asynchronously (coalesced every 0.2 s)
    _wait(lambda: all(r.pid and r.status == "idle" for r in list_live_processes(state_root)
                      if r.process in ("worker.control", "coordinator.control"))
          and len(list_live_processes(state_root)) == 3, 30, "the status snapshot")
    rows = {r.process: r for r in list_live_processes(state_root)}
    assert rows["orchestrator"].status == "running" and rows["orchestrator"].pid == proc.pid
    worker = rows["worker.control"]
    assert worker.pid and pid_alive(worker.pid) and worker.uptime_s is not None

    # a second orchestrator for the same swarm is refused
    again = goondan("run", "--bundle", str(bundle), "--foreground", state_root=state_root)
    assert again.returncode == 3 and "E_RUN_ALREADY_RUNNING" in again.stderr

    restarted = goondan("restart", "--agent", "worker", state_root=state_root)
    assert restarted.returncode == 0, restarted.stderr
    assert "worker.control" in restarted.stdout
    # a new worker: a new process, or with pooled isolation a new instance on its host (same
    # pid): told apart by its start time
    _wait(
        lambda: (
            (r := {x.process: x for x in list_live_processes(state_root)}["worker.control"]).pid
            is not None
            and (r.pid, r.started_at) != (worker.pid, worker.started_at)
            and r.status == "idle"
        ),
        30,
        "the new worker process",
    )
    coordinator = _worker(state_root, "coordinator.control")
    assert coordinator == _worker_of(rows["coordinator.control"])  # only the worker was replaced
    assert (
        "391"
        in _control(state_root, {"command": "request", "input": "What is 17 * 23?"})["response"]
    )

    # --watch: editing only the worker's prompt restarts only the worker
    # (pids taken before the edit: the watcher may act before this test runs again)
    before = {x.process: _worker_of(x) for x in list_live_processes(state_root)}
    text = (bundle / "goondan.yaml").read_text()
    (bundle / "goondan.yaml").write_text(
        text.replace("Answer with the result only.", "Answer briefly.")
    )
    _wait(lambda: _worker(state_root, "worker.control")[0] is not None
          and _worker(state_root, "worker.control") != before["worker.control"],
          30, "the watch restart")
    assert _worker(state_root, "coordinator.control") == before["coordinator.control"]

    logs = goondan(
        "logs", "--json", "--process", "orchestrator", "--lines", "500", state_root=state_root
    )
    assert logs.returncode == 0 and "orchestrator.bundleChanged" in logs.stdout
    assert goondan("logs", "--process", "../etc", state_root=state_root).returncode == 2

    children = _child_pids(state_root)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    _wait(lambda: not any(pid_alive(p) for p in children), 30, "children to exit")
    assert read_active(state_root) is None
    assert goondan("restart", state_root=state_root).returncode == 3
