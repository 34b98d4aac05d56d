"""Issue 27 item 4 / issue 28 item 5: one orchestrator per swarm, identified by more than its pid.

* Three ``goondan run`` of one bundle started at once leave exactly one orchestrator (the swarm's
  lock file); the others attach to it. ``stop`` then leaves none and ``status`` agrees.
* ``run --input`` / piped lines against a running swarm are answered by it instead of failing.
* A runtime record naming a live *unrelated* process (an orchestrator SIGKILLed, its pid reused)
  is not that orchestrator: ``stop`` does not signal it and ``run`` starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goondan.swarm.daemon import bundle_runtime_key
from tests.support.hostile_bundles import write_bundle
from tests.support.soak import trials

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def goondan(state_root: Path, *args: str, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        input=input,
        check=False,
    )


def orchestrators(state_root: Path) -> set[int]:
    """Pids of the live ``goondan run --foreground`` processes of this state root."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
            if stat.rsplit(") ", 1)[1].startswith("Z"):
                continue
            if b"--foreground" in argv and str(state_root).encode() in argv:
                found.add(int(entry.name))
    return found


def wait_until(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return write_bundle(tmp_path / "bundle", script=[{"text": "ok"}], loop=True)


@pytest.mark.skipif(
    not Path("/proc/self/cmdline").exists(), reason="counts processes through /proc"
)
@pytest.mark.soak
# 20 trials under make soak, each a few seconds (several times that on a loaded machine)
@pytest.mark.timeout(1200)
def test_three_concurrent_runs_of_one_bundle_leave_exactly_one_orchestrator(
    bundle: Path, state_root: Path,
) -> None:
    count = trials(2, 20)
    for trial in range(count):
        argv = [sys.executable, "-m", "goondan", "--state-root", str(state_root), "--json", "run",
                str(bundle), "--detach"]
        runs = [
            subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
            )
            for _ in range(3)
        ]
        try:
            outputs = [run.communicate(timeout=120) for run in runs]
            outcomes = [
                (run.returncode, out, err) for run, (out, err) in zip(runs, outputs, strict=True)
            ]
            assert all(code == 0 for code, _, _ in outcomes), outcomes
            pids = {json.loads(out)["pid"] for _, out, _ in outcomes}
            assert len(pids) == 1, f"trial {trial}: three runs reported {pids}"
            assert orchestrators(state_root) == pids, f"trial {trial}"
            answer = goondan(state_root, "send", "--bundle", str(bundle), "hi")
            assert answer.returncode == 0 and answer.stdout.strip() == "ok", answer.stderr
        finally:
            stopped = goondan(state_root, "stop", "--bundle", str(bundle))
        assert stopped.returncode == 0, stopped.stderr
        assert orchestrators(state_root) == set(), f"trial {trial}: an orchestrator survived stop"
        status = goondan(state_root, "status", "--bundle", str(bundle))
        assert status.returncode == 3 and "E_RUN_NOT_RUNNING" in status.stderr
    print(f"\n{count} trials of three concurrent `goondan run --detach`: one orchestrator each")


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_three_concurrent_run_inputs_of_one_bundle_are_all_answered(
    bundle: Path, state_root: Path
) -> None:
    # One takes the lock and runs the swarm, the others attach; one that attached after the
    # owner began to stop (its answer given) starts the swarm again itself.
    count = trials(1, 20)
    for trial in range(count):
        argv = [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            str(bundle),
            "--input",
            f"hi {trial}",
        ]
        runs = [
            subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
            )
            for _ in range(3)
        ]
        outputs = [run.communicate(timeout=120) for run in runs]
        outcomes = [
            (run.returncode, out, err) for run, (out, err) in zip(runs, outputs, strict=True)
        ]
        assert [(code, out.strip()) for code, out, _ in outcomes] == [(0, "ok")] * 3, outcomes
        assert orchestrators(state_root) == set()  # the owner stopped the swarm when it was done
    print(f"\n{count} trials of three concurrent `goondan run --input`: all answered")


def test_run_input_and_piped_lines_attach_to_the_running_swarm(
    bundle: Path, state_root: Path
) -> None:
    started = goondan(state_root, "--json", "run", str(bundle), "--detach")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    try:
        one = goondan(state_root, "run", str(bundle), "--input", "hello")
        assert one.returncode == 0, one.stderr
        assert one.stdout.strip() == "ok"
        piped = goondan(state_root, "run", str(bundle), input="first\n\nsecond\n")
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout.split() == ["ok", "ok"]
        # answered by the running orchestrator, which is still the only one and still runs
        assert orchestrators(state_root) == {pid}
        status = json.loads(goondan(state_root, "status", "--json", "--bundle", str(bundle)).stdout)
        (swarm,) = status["swarms"]
        assert swarm["pid"] == pid
        # the Swarm's instanceKey: the CLI's conversation
        assert {p["process"] for p in swarm["processes"]} == {"a.default"}
    finally:
        assert goondan(state_root, "stop", "--bundle", str(bundle)).returncode == 0


def _start_time(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19])


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="process start times come from /proc"
)
def test_stale_record_naming_an_unrelated_process_is_neither_stopped_nor_blocking(
    bundle: Path,
    state_root: Path,
) -> None:
    # An orchestrator was SIGKILLed and its pid reused by an unrelated process (a sleep here):
    # its runtime record still names that pid, with the dead orchestrator's start time.
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        key, _ = bundle_runtime_key(bundle, None, state_root)
        runtime = state_root / "runtime"
        record = {
            "instanceKey": "hostile",
            "runtimeKey": key,
            "bundlePath": str(bundle / "goondan.yaml"),
            "swarm": "default",
            "pid": sleeper.pid,
            "pidStart": _start_time(sleeper.pid) - 1,
            "token": "orch-dead",
            "startedAt": "2026-01-01T00:00:00Z",
            "watch": False,
            "logs": [],
            "controlSocket": str(runtime / "control" / f"{key}.sock"),
            "statusFile": None,
            "logDir": None,
        }
        (runtime / "orchestrators").mkdir(parents=True)
        for path in (runtime / "orchestrators" / f"{key}.json", runtime / "active.json"):
            path.write_text(json.dumps(record))

        stop = goondan(state_root, "stop", "--bundle", str(bundle), "--grace", "1")
        assert stop.returncode == 3 and "E_RUN_NOT_RUNNING" in stop.stderr, stop.stderr
        with pytest.raises(subprocess.TimeoutExpired):  # a signal sent by stop would end it
            sleeper.wait(timeout=0.5)
        status = goondan(state_root, "status", "--json")
        assert json.loads(status.stdout) == {"swarms": []}

        run = goondan(state_root, "run", str(bundle), "--input", "hi")
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == "ok"
        assert sleeper.poll() is None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(sleeper.pid, signal.SIGKILL)
        sleeper.wait(timeout=10)


def test_attached_input_is_routed_by_the_running_swarms_cli_connection(state_root: Path) -> None:
    # route.instanceKey "smoke-test"
    smoke = REPO / "tests" / "fixtures" / "connectors" / "cli-smoke"
    started = goondan(state_root, "run", str(smoke), "--detach")
    assert started.returncode == 0, started.stderr
    try:
        attached = goondan(state_root, "run", str(smoke), "--input", "hi")
        assert attached.returncode == 0, attached.stderr
        assert attached.stdout.strip() == "hello from smoke-test"  # the model saw connection_name
        inbox = next(state_root.glob("workspaces/*/connections/default/cli-in/inbox.jsonl"))
        assert {json.loads(line)["instanceKey"] for line in inbox.read_text().splitlines()} == {
            "smoke-test"
        }
    finally:
        assert goondan(state_root, "stop", "--bundle", str(smoke)).returncode == 0
