"""The orchestrator with real agent processes (spawn start method, JSON over pipes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner
from goondan.types import AgentEvent
from tests.support.ipc_agents import AGENTS_ENV, RECORD_DIR_ENV, script_child_main

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
AGENTS = ["a", "b", "c"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def _wait_dead(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.02)
    return [p for p in pids if _alive(p)]


@pytest.fixture
def record_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "records"
    directory.mkdir()
    monkeypatch.setenv(RECORD_DIR_ENV, str(directory))
    monkeypatch.setenv(AGENTS_ENV, ",".join(AGENTS))
    return directory


@pytest.fixture
def spawned_pids() -> Iterator[list[int]]:
    """PIDs to SIGKILL at teardown whatever happened (no orphans)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_with(
    state_root: Path, pids: list[int], body: Callable[[Orchestrator], Awaitable[Any]]
) -> Any:
    async def main() -> Any:
        spawner = ProcessSpawner(state_root, state_root=state_root, target=script_child_main,
                                 log_dir=state_root / "logs")
        orch = Orchestrator(spawner, swarm_name="t", entry_agent="a", agents=AGENTS,
                            grace_period_ms=5000, reconcile_interval_s=0.5)
        original = orch._start

        async def tracking_start(rec: Any) -> None:
            await original(rec)
            if rec.handle is not None and rec.handle.pid:
                pids.append(rec.handle.pid)

        orch._start = tracking_start  # type: ignore[method-assign]
        async with asyncio.timeout(60):
            async with orch:
                return await body(orch)

    return asyncio.run(main())


async def ask(orch: Orchestrator, agent: str, text: str, key: str = "default") -> str:
    return response_text(await orch.request(agent, text, instance_key=key, timeout_ms=20_000))


def test_processes_answer_and_stop_cleanly(
    state_root: Path, record_dir: Path, spawned_pids: list[int]
) -> None:
    async def body(orch: Orchestrator) -> None:
        assert await ask(orch, "a", "ask:b:echo:over ipc") == "asked:over ipc"
        assert (await ask(orch, "a", "ask:b:ask:a:echo:x")).startswith("asked:error:E_AGENT_CYCLE")

    run_with(state_root, spawned_pids, body)
    assert len(spawned_pids) == 2
    assert _wait_dead(spawned_pids, 30) == []
    logs = sorted(p.name for p in (state_root / "logs").iterdir())
    assert "a.default.stderr.log" in logs and "b.default.stdout.log" in logs


def test_sigkill_mid_turn_respawns_and_caller_gets_structured_error(
    state_root: Path, record_dir: Path, spawned_pids: list[int], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"

    async def body(orch: Orchestrator) -> None:
        assert await ask(orch, "c", "echo:c up") == "c up"
        caller = asyncio.ensure_future(ask(orch, "a", f"ask:b:block:{gate}:never"))
        await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=20)
        victim = orch.records[("b", "default")].handle
        assert victim is not None and victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        answer = await caller
        assert answer.startswith("error:E_AGENT_CRASHED:"), answer
        assert "signal 9" in answer
        rec = orch.records[("b", "default")]
        await orch.wait_until(lambda: rec.ready and rec.spawn_count == 2, timeout=20)
        assert await ask(orch, "b", "echo:back again") == "back again"
        assert orch.records[("c", "default")].spawn_count == 1  # others unaffected
        assert await ask(orch, "c", "echo:still here") == "still here"

    run_with(state_root, spawned_pids, body)
    assert _wait_dead(spawned_pids, 30) == []


def test_multi_process_ordering_exactly_once(
    state_root: Path, record_dir: Path, spawned_pids: list[int]
) -> None:
    keys = [f"k{i}" for i in range(4)]

    async def body(orch: Orchestrator) -> None:
        for n in range(10):
            for key in keys:
                await orch.submit(
                    "a", AgentEvent(type="message", input=f"echo:{n}", instance_key=key)
                )
        await orch.wait_until(
            lambda: sum(orch.records[("a", k)].processed for k in keys) == 40, timeout=30
        )

    run_with(state_root, spawned_pids, body)
    for key in keys:
        lines = (record_dir / f"a.{key}.log").read_text().splitlines()
        assert lines == [f"a@{key} echo:{n}" for n in range(10)]


def test_restart_during_turn_lets_it_finish(
    state_root: Path, record_dir: Path, spawned_pids: list[int], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"

    async def body(orch: Orchestrator) -> None:
        answer = asyncio.ensure_future(ask(orch, "a", f"block:{gate}:finished"))
        await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=20)
        first = orch.records[("a", "default")].handle
        restarting = asyncio.ensure_future(orch.restart("a"))
        await orch.wait_until(
            lambda: orch.records[("a", "default")].status == "draining", timeout=30
        )
        assert orch.records[("a", "default")].handle is first
        gate.write_text("go")
        assert await answer == "finished"
        assert await restarting == ["a.default"]
        assert first is not None and first.exitcode == 0  # drained, acknowledged, exited 0
        assert await ask(orch, "a", "echo:new process") == "new process"
        assert orch.records[("a", "default")].spawn_count == 2

    run_with(state_root, spawned_pids, body)


def _start_script(state_root: Path) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.orchestrator_script", str(state_root), "a", "b"],
        cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "orchestrator script died before it was ready"
    return proc, json.loads(line)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_orchestrator_exit_stops_every_child(
    state_root: Path, how: signal.Signals, record_dir: Path
) -> None:
    proc, info = _start_script(state_root)
    try:
        children = info["children"]
        assert len(children) == 2 and all(_alive(p) for p in children)
        os.kill(proc.pid, how)
        proc.wait(timeout=20)
        # SIGTERM: graceful shutdown; SIGKILL: children see EOF on their pipe and exit.
        assert _wait_dead(children, 30) == []
        if how == signal.SIGTERM:
            assert proc.returncode == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
