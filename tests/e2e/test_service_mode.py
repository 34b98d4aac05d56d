"""Service mode as a user drives it: run --detach → send → status → restart → logs → stop.

Two copies of examples/delegation (same Swarm instanceKey) run at once under one state root;
the same bundle again attaches to (``--detach``: reports) the running swarm, ``--foreground``
is refused. After ``goondan stop`` no process of either swarm is left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from goondan.swarm.daemon import wait_for
from goondan.swarm.state import control_socket_path, pid_alive, running_records

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "delegation"


def goondan(*args: str, cwd: Path, timeout: float = 90,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "goondan", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, check=False, env=env)


def _pids(status: dict[str, Any]) -> list[int]:
    out: list[int] = []
    for swarm in status["swarms"]:
        out.append(swarm["pid"])
        out.extend(p["pid"] for p in swarm["processes"] if p.get("pid"))
    return out


def test_detach_send_status_restart_logs_stop_two_bundles(tmp_path: Path, state_root: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(EXAMPLE, a)
    shutil.copytree(EXAMPLE, b)
    started: list[int] = []
    try:
        # global options in either position; the bundle as a positional argument
        first = goondan("run", str(a), "--detach", "--state-root", str(state_root), cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert (
            "started in the background" in first.stdout and "goondan stop --bundle" in first.stdout
        )
        second = goondan(
            "--state-root",
            str(state_root),
            "--json",
            "run",
            "--detach",
            "--bundle",
            str(b),
            cwd=tmp_path,
        )
        assert second.returncode == 0, second.stderr
        record = json.loads(second.stdout)
        assert record["instanceKey"] == "delegation" and pid_alive(record["pid"])
        started = [r.pid for r in running_records(state_root)]
        assert len(started) == 2

        # the same bundle again: the running swarm is reported, no second orchestrator starts
        again = goondan("run", "--detach", str(a), "--state-root", str(state_root), cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert "already runs" in again.stdout
        assert int(again.stdout.rsplit("pid=", 1)[1].split(")")[0]) in started
        assert sorted(r.pid for r in running_records(state_root)) == sorted(started)
        refused = goondan(
            "run", "--foreground", str(a), "--state-root", str(state_root), cwd=tmp_path
        )
        assert refused.returncode == 3 and "E_RUN_ALREADY_RUNNING" in refused.stderr
        assert f"goondan stop --bundle {a}" in refused.stderr

        # send finds the swarm from the current directory's bundle (cwd = a)
        answer = goondan("send", "What is 17 * 23?", "--state-root", str(state_root), cwd=a)
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip() == "The worker says: 17 * 23 = 391"

        status = goondan("status", "--json", "--state-root", str(state_root), cwd=a)
        assert status.returncode == 0, status.stderr
        doc = json.loads(status.stdout)
        assert [s["bundle"] for s in doc["swarms"]] == [str(a)]
        rows = {p["process"]: p for p in doc["swarms"][0]["processes"]}
        assert {"coordinator.delegation", "worker.delegation"} <= set(rows)
        assert (
            rows["worker.delegation"]["kind"] == "agent"
            and rows["worker.delegation"]["queued"] == 0
        )
        assert (
            rows["worker.delegation"]["restarts"] == 0
            and rows["worker.delegation"]["uptimeSeconds"] >= 0
        )
        everything = json.loads(
            goondan(
                "status", "--all", "--json", "--state-root", str(state_root), cwd=tmp_path
            ).stdout
        )
        assert {s["bundle"] for s in everything["swarms"]} == {str(a), str(b)}
        text = goondan("status", "--state-root", str(state_root), "--bundle", str(b), cwd=tmp_path)
        assert text.returncode == 0 and "Swarm default (instanceKey=delegation" in text.stdout

        restarted = goondan(
            "instance",
            "restart",
            "delegation",
            "--agent",
            "worker",
            "--bundle",
            str(a),
            "--state-root",
            str(state_root),
            "--json",
            cwd=tmp_path,
        )
        assert restarted.returncode == 0, restarted.stderr
        assert json.loads(restarted.stdout)["restarted"] == ["worker.delegation"]
        whole = goondan("restart", "-b", str(a), "--state-root", str(state_root), cwd=tmp_path)
        assert whole.returncode == 0 and "coordinator.delegation" in whole.stdout, whole.stderr
        doc = json.loads(goondan("status", "--json", "--state-root", str(state_root), cwd=a).stdout)
        rows = {p["process"]: p for p in doc["swarms"][0]["processes"]}
        assert (
            rows["worker.delegation"]["restarts"] == 2
            and rows["coordinator.delegation"]["restarts"] == 1
        )

        # logs: pretty by default, raw JSON with --json, filters
        pretty = goondan("logs", "--no-color", "--state-root", str(state_root), cwd=a)
        assert pretty.returncode == 0, pretty.stderr
        assert " orchestrator INFO  " in pretty.stdout and '{"level"' not in pretty.stdout
        raw = goondan("logs", "--json", "--state-root", str(state_root), cwd=a)
        lines = [json.loads(line) for line in raw.stdout.splitlines()]
        assert lines and all("message" in line for line in lines)
        worker = goondan(
            "logs", "--agent", "worker", "--since", "1h", "--state-root", str(state_root), cwd=a
        )
        assert worker.returncode == 0 and "Logs of agent worker" in worker.stdout, worker.stderr
        none = goondan("logs", "--trace", "no-such-trace", "--state-root", str(state_root), cwd=a)
        assert none.returncode == 0 and "(no matching lines)" in none.stdout
        listed = goondan("logs", "--list", "--state-root", str(state_root), cwd=a)
        assert {"orchestrator", "worker.delegation", "coordinator.delegation"} <= set(
            listed.stdout.split()
        )
        other = goondan(
            "logs", "--list", "--state-root", str(state_root), "--bundle", str(b), cwd=tmp_path
        )
        assert "worker.delegation" not in other.stdout.split()  # b's log folder is its own

        children = _pids(doc)
        # the whole swarm: stop, then start again in the background (new orchestrator pid)
        full = goondan("restart", "--full", "--json", "--state-root", str(state_root), cwd=b)
        assert full.returncode == 0, full.stderr
        swap = json.loads(full.stdout)
        assert (
            swap["oldPid"] != swap["pid"]
            and not pid_alive(swap["oldPid"])
            and pid_alive(swap["pid"])
        )
        started = [r.pid for r in running_records(state_root)]
        assert swap["pid"] in started and len(started) == 2
        for bundle in (a, b):
            stopped = goondan(
                "stop",
                "--bundle",
                str(bundle),
                "--state-root",
                str(state_root),
                "--json",
                cwd=tmp_path,
            )
            assert stopped.returncode == 0, stopped.stderr
            report = json.loads(stopped.stdout)
            assert report["mode"] == "graceful" and report["leftRunning"] == []
        assert not [pid for pid in [*started, *children] if pid_alive(pid)]
        assert running_records(state_root) == []
        gone = goondan(
            "send", "hi", "--bundle", str(a), "--state-root", str(state_root), cwd=tmp_path
        )
        assert gone.returncode == 3 and "E_RUN_NOT_RUNNING" in gone.stderr
        assert f"goondan run --detach {a}" in gone.stderr
    finally:
        for pid in started:
            if pid_alive(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)


def test_detach_reports_a_swarm_that_dies_at_start(tmp_path: Path) -> None:
    bundle = tmp_path / "broken"
    shutil.copytree(EXAMPLE, bundle)
    # A short state root: under a long one the control socket moves to the temp dir
    # (control_socket_path) and the blocked directory below would not stop the swarm.
    state_root = Path(tempfile.mkdtemp(prefix="gd-", dir="/tmp"))
    try:
        assert control_socket_path(state_root, "x").is_relative_to(state_root)
        # valid bundle, but the control socket directory cannot be created: the child dies at start
        (state_root / "runtime").mkdir(parents=True)
        (state_root / "runtime" / "control").write_text("not a directory", encoding="utf-8")
        result = goondan(
            "run", "--detach", str(bundle), "--state-root", str(state_root), cwd=tmp_path
        )
        assert result.returncode == 3 and "E_RUN_START_FAILED" in result.stderr, result.stderr
        assert "orchestrator.stderr.log" in result.stderr and running_records(state_root) == []
    finally:
        # a swarm that started after all: never left behind
        for record in running_records(state_root):
            if pid_alive(record.pid):
                os.kill(record.pid, 9)
        shutil.rmtree(state_root, ignore_errors=True)


def test_status_lists_connector_processes_and_stop_ends_them(
    tmp_path: Path, state_root: Path
) -> None:
    from tests.support.trigger_client import FIXTURE

    env = {**os.environ, "TRIGGER_PORT_FILE": str(tmp_path / "port.json"), "TRIGGER_FAIL": ""}
    started = goondan(
        "run", "--detach", str(FIXTURE), "--state-root", str(state_root), cwd=tmp_path, env=env
    )
    assert started.returncode == 0, started.stderr
    try:
        def connectors() -> list[dict[str, Any]]:
            doc = json.loads(goondan("status", "--json", "--bundle", str(FIXTURE), "--state-root",
                                     str(state_root), cwd=tmp_path).stdout)
            return [
                p for p in doc["swarms"][0]["processes"] if p["kind"] == "connector" and p["pid"]
            ]

        assert wait_for(lambda: bool(connectors()), 60), "no running connector process in status"
        pids = [p["pid"] for p in connectors()]
        assert all(p["connection"] and p["restarts"] == 0 for p in connectors())
    finally:
        stopped = goondan(
            "stop", "--bundle", str(FIXTURE), "--state-root", str(state_root), cwd=tmp_path
        )
    assert stopped.returncode == 0, stopped.stderr
    assert not [pid for pid in pids if pid_alive(pid)]
    assert running_records(state_root) == []
