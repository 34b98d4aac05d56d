"""Issue 27 item 5: the processes an agent process's tools started do not outlive it, whether it
is SIGKILLed (its orchestrator sweeps its marker before the respawn) or stops gracefully (it
sweeps its own), and the swarm's stop sweeps what is left. A job that forks while its killed
agent's marker is swept loses its child too (the fork is placed right after the sweep listed
``/proc``, through the listing: the sweep's test point)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner
from goondan.tools import processes
from goondan.tools.processes import AGENT_PROCESS_ENV, ORCHESTRATOR_ENV
from goondan.workspace.claims import owner_token
from tests.support.ipc_agents import AGENTS_ENV, script_child_main
from tests.support.process_tree import alive

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120),
              pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")]


async def _gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def test_a_tool_child_of_a_sigkilled_agent_process_is_killed_and_a_stop_kills_the_rest(
    state_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(AGENTS_ENV, "a")
    jobs: list[int] = []
    forked: list[subprocess.Popen[bytes]] = []
    fork_as: dict[str, str] = {}  # the markers of the first job, once its agent is killed
    listed = processes._proc_pids

    def listing() -> list[int]:
        pids = listed()
        if fork_as and not forked:  # the job forks just after the sweep listed /proc
            forked.append(subprocess.Popen(
                ["sleep", "7798"], env={**os.environ, **fork_as}, start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return pids

    monkeypatch.setattr(processes, "_proc_pids", listing)

    async def main() -> None:
        spawner = ProcessSpawner(state_root, state_root=state_root, target=script_child_main,
                                 log_dir=state_root / "logs")
        orch = Orchestrator(
            spawner,
            swarm_name="t",
            entry_agent="a",
            agents=["a"],
            grace_period_ms=5000,
            reconcile_interval_s=0.5,
        )
        async with asyncio.timeout(90), orch:
            ask = orch.request
            assert (
                response_text(await ask("a", f"job:{tmp_path / 'one'}", timeout_ms=20_000)) == "job"
            )
            jobs.append(int((tmp_path / "one").read_text()))
            handle = orch.records[("a", "default")].handle
            assert handle is not None and handle.pid is not None and alive(jobs[0])
            fork_as.update({ORCHESTRATOR_ENV: owner_token(), AGENT_PROCESS_ENV: str(handle.pid)})
            os.kill(handle.pid, signal.SIGKILL)
            assert await _gone(jobs[0]), "the job of a SIGKILLed agent process survived it"
            assert forked, "the orchestrator did not sweep the SIGKILLed process's marker"
            assert await _gone(forked[0].pid), "the job's child born during the sweep survived"
            # the respawned process starts another; a graceful restart (the process exits on
            # its own and sweeps its marker) ends it
            assert (
                response_text(await ask("a", f"job:{tmp_path / 'two'}", timeout_ms=20_000)) == "job"
            )
            jobs.append(int((tmp_path / "two").read_text()))
            await orch.restart("a")
            assert await _gone(jobs[1]), "the job survived its agent process's graceful stop"
            assert (
                response_text(await ask("a", f"job:{tmp_path / 'three'}", timeout_ms=20_000))
                == "job"
            )
            jobs.append(int((tmp_path / "three").read_text()))
        assert await _gone(jobs[2]), "the job survived the swarm's stop"

    try:
        asyncio.run(main())
    finally:
        for pid in jobs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in forked:
            proc.kill()
            proc.wait()
