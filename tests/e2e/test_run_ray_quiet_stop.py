"""``goondan run --engine ray`` with a local Ray it starts itself (issue 32 item 9).

It says ``starting a local Ray…`` (starting takes seconds) and when Ray is ready, keeps Ray's own
log lines out of the terminal (they go to ``ray.driver.log`` in the log folder), and ``goondan
stop`` stops it without a SIGTERM stack dump and without leaving any Ray process behind (before:
two Ray agents lived 60–70 s longer). Slow: a local Ray takes 10–20 s to start here.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.connector_e2e import wait_for
from tests.support.process_tree import alive

pytest.importorskip("ray")
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _session_members(session: int) -> list[int]:
    """Live processes of session ``session`` (/proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if int(fields[3]) == session and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_ray_engine_says_it_starts_ray_keeps_its_noise_in_logs_and_stops_it_fully(
        tmp_path: Path, state_root: Path) -> None:
    bundle = tmp_path / "delegation"
    shutil.copytree(REPO / "examples" / "delegation", bundle)
    ray_tmp = tempfile.mkdtemp(prefix="gq", dir="/tmp")  # Ray's socket paths must stay short
    # A Ray of its own (not a cluster another test started), every address on 127.0.0.1.
    env = {**os.environ, "RAY_TMPDIR": ray_tmp, "HOME": ray_tmp, "RAY_AUTH_MODE": "disabled",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    env.pop("RAY_ADDRESS", None)
    terminal = tmp_path / "terminal.txt"
    with open(terminal, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "goondan", "--state-root", str(state_root), "run", str(bundle),
             "--engine", "ray", "--foreground"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
            start_new_session=True)
    try:
        wait_for(
            lambda: "Orchestrator started" in terminal.read_text() or proc.poll() is not None,
            180,
            "the orchestrator on Ray",
        )
        assert proc.poll() is None, terminal.read_text()
        answer = subprocess.run(
            [
                sys.executable,
                "-m",
                "goondan",
                "--state-root",
                str(state_root),
                "send",
                "-b",
                str(bundle),
                "What is 17 * 23?",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert answer.returncode == 0 and "391" in answer.stdout, answer.stderr
        stop = subprocess.run(
            [
                sys.executable,
                "-m",
                "goondan",
                "--state-root",
                str(state_root),
                "stop",
                "-b",
                str(bundle),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        assert stop.returncode == 0, stop.stderr
        proc.wait(timeout=60)
        # every Ray process it started is gone with it (the fixture's 10 s wait is failure-only)
        wait_for(
            lambda: not _session_members(proc.pid), 10, "the Ray processes of the swarm to end"
        )
        said = terminal.read_text()
        lines = said.splitlines()
        assert lines[0] == "starting a local Ray…", said
        assert any(line.startswith("a local Ray is ready (") for line in lines), said
        for noise in (
            "SIGTERM received",
            "Started a local Ray instance",
            "SIGTERM handler",
            "Traceback",
            "logging.cc",
        ):
            assert noise not in said, said
        [ray_log] = list((state_root / "runtime" / "logs").glob("*/ray.driver.log"))
        assert "Started a local Ray instance" in ray_log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        shutil.rmtree(ray_tmp, ignore_errors=True)
