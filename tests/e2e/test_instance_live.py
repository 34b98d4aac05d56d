"""``goondan instance list`` with a running orchestrator: conversations plus live processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.commands.instance import format_uptime
from goondan.swarm.state import list_live_processes, read_active
from tests.e2e.test_run import EXAMPLE, REPO, _control, _wait, goondan

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_format_uptime() -> None:
    assert [format_uptime(v) for v in (None, 0.4, 59, 61, 3600 + 125, 2 * 86400 + 3 * 3600)] == [
        "-", "0s", "59s", "1m01s", "1h02m", "2d03h",
    ]


def test_instance_list_shows_live_processes_while_an_orchestrator_runs(state_root: Path) -> None:
    before = goondan("instance", "list", "--json", state_root=state_root)
    assert before.returncode == 0 and json.loads(before.stdout) == {
        "instances": [],
        "processes": [],
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(EXAMPLE),
            "--foreground",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait(lambda: (a := read_active(state_root)) is not None and a.pid == proc.pid
              and Path(a.control_socket or "").exists(), 30, "the orchestrator")
        assert (
            "391"
            in _control(state_root, {"command": "request", "input": "What is 17 * 23?"})["response"]
        )
        _wait(
            lambda: (
                sum(1 for r in list_live_processes(state_root) if r.pid and r.status == "idle") == 2
            ),
            30,
            "the status snapshot",
        )

        listed = goondan("instance", "list", state_root=state_root)
        assert listed.returncode == 0, listed.stderr
        conversations, _, live = listed.stdout.partition("Live processes")
        assert "coordinator" in conversations and "worker" in conversations
        lines = live.strip().splitlines()
        assert lines[0].split() == [
            "PROCESS",
            "AGENT",
            "INSTANCE",
            "KEY",
            "PID",
            "STATUS",
            "UPTIME",
        ]
        rows = {line.split()[0]: line.split() for line in lines[1:]}
        assert set(rows) == {"orchestrator", "coordinator.control", "worker.control"}
        assert rows["orchestrator"][3] == str(proc.pid) and rows["orchestrator"][4] == "running"
        worker = rows["worker.control"]
        assert worker[1:3] == ["worker", "control"] and worker[3].isdigit() and worker[4] == "idle"
        assert worker[5].endswith(("s", "m", "h"))

        data = json.loads(goondan("instance", "list", "--json", state_root=state_root).stdout)
        assert {r["agentName"] for r in data["instances"]} == {"coordinator", "worker"}
        procs = {p["process"]: p for p in data["processes"]}
        assert procs["worker.control"]["pid"] == int(worker[3])
        assert (
            procs["worker.control"]["uptimeSeconds"] >= 0
            and procs["worker.control"]["status"] == "idle"
        )
        only = json.loads(
            goondan("instance", "list", "--json", "--agent", "worker", state_root=state_root).stdout
        )
        assert {p["process"] for p in only["processes"]} == {"orchestrator", "worker.control"}

        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    after = goondan("instance", "list", state_root=state_root)
    assert "Live processes" not in after.stdout and "coordinator" in after.stdout
