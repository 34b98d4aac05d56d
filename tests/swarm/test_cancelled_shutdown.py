"""A shutdown whose helper tasks were cancelled still stops every process and ends.

``asyncio.run`` ends by cancelling every task still running at once (``_cancel_all_tasks``): the
task that owns the orchestrator, and with it the per-process ``_watch`` tasks that run the exit
bookkeeping, the message pumps, a pooled host's reader. The owner's ``shutdown`` must not wait
for bookkeeping that nobody runs any more (docs/orchestrator.md "Stopping").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from goondan.connectors.spec import ConnectionSpec
from goondan.ipc.channel import Transport
from goondan.runtime.agents import response_text
from goondan.swarm.connector_supervisor import ConnectorSupervisor
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner, ProcessSpawner, SpawnRequest
from goondan.types import AgentEvent
from tests.support.ipc_agents import AGENTS_ENV, script_child_main

AGENTS = ["a"]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is dead for our purposes
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def _wait_dead(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def pids(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The agent processes started; SIGKILLed at teardown whatever happened (no orphans)."""
    monkeypatch.setenv(AGENTS_ENV, ",".join(AGENTS))
    started: list[int] = []
    yield started
    for pid in started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _orchestrator(state_root: Path, grace_period_ms: int = 5000) -> Orchestrator:
    spawner = ProcessSpawner(state_root, state_root=state_root, target=script_child_main,
                             log_dir=state_root / "logs")
    return Orchestrator(spawner, swarm_name="t", entry_agent="a", agents=AGENTS,
                        grace_period_ms=grace_period_ms, reconcile_interval_s=0.5,
                        status_path=state_root / "processes.json")


async def _cancel_every_other_task() -> list[asyncio.Task[Any]]:
    """What ``asyncio.run`` does at its end (``asyncio.runners._cancel_all_tasks``): cancel every
    task at once, then wait for all of them — here with a deadline, so a hang fails."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for task in tasks:
        task.cancel()
    async with asyncio.timeout(15):
        await asyncio.gather(*tasks, return_exceptions=True)
    return tasks


def _assert_stopped(orch: Orchestrator, pid: int) -> None:
    rec = orch.records[("a", "default")]
    assert rec.handle is None and rec.status == "terminated"
    assert _wait_dead(pid), f"agent process {pid} is left over"


@pytest.mark.e2e
def test_cancelling_every_task_stops_the_agent_process(
    state_root: Path, pids: list[int]
) -> None:
    """The owner of the orchestrator is cancelled together with its watch tasks."""

    async def main() -> None:
        orch = _orchestrator(state_root)
        up = asyncio.Event()

        async def serve() -> None:
            async with orch:
                answer = await orch.request("a", "echo:up", timeout_ms=20_000)
                assert response_text(answer) == "up"
                handle = orch.records[("a", "default")].handle
                assert handle is not None and handle.pid is not None
                pids.append(handle.pid)
                up.set()
                await asyncio.Event().wait()

        server = asyncio.ensure_future(serve())
        async with asyncio.timeout(30):
            await up.wait()
        await _cancel_every_other_task()
        assert server.cancelled()
        _assert_stopped(orch, pids[0])

    asyncio.run(main())


@pytest.mark.e2e
def test_cancelling_every_task_during_a_turn_stops_the_agent_process(
    state_root: Path, pids: list[int], tmp_path: Path
) -> None:
    """The main task is cancelled while a turn runs (it never ends: SIGKILL after the grace)."""
    gate = tmp_path / "gate"

    async def main() -> None:
        orch = _orchestrator(state_root, grace_period_ms=500)

        async def serve() -> None:
            async with orch:
                await orch.request("a", f"block:{gate}:never", timeout_ms=60_000)

        server = asyncio.ensure_future(serve())
        async with asyncio.timeout(30):
            while not (tmp_path / "gate.started").exists():
                await asyncio.sleep(0.02)
        handle = orch.records[("a", "default")].handle
        assert handle is not None and handle.pid is not None
        pids.append(handle.pid)
        await _cancel_every_other_task()
        assert server.cancelled()
        _assert_stopped(orch, pids[0])

    asyncio.run(main())


@pytest.mark.e2e
def test_shutdown_after_the_watch_tasks_were_cancelled_stops_the_agent_process(
    state_root: Path, pids: list[int]
) -> None:
    """Only the helper tasks are cancelled; ``shutdown`` runs afterwards, and once more."""

    async def main() -> None:
        orch = _orchestrator(state_root)
        await orch.start()
        assert response_text(await orch.request("a", "echo:up", timeout_ms=20_000)) == "up"
        handle = orch.records[("a", "default")].handle
        assert handle is not None and handle.pid is not None
        pids.append(handle.pid)
        await _cancel_every_other_task()
        async with asyncio.timeout(15):
            await orch.shutdown()
            await orch.shutdown()  # a second call finds nothing left to wait for
        _assert_stopped(orch, pids[0])
        assert '"status": "terminated"' in (state_root / "processes.json").read_text()

    asyncio.run(main())


def test_a_cancelled_shutdown_raises_cancelled_error() -> None:
    """Cancelling ``shutdown`` itself still cancels it (nothing swallows the cancellation)."""

    async def until_shutdown(request: SpawnRequest, transport: Transport) -> int:
        while (message := await transport.recv()) is not None:
            if message.type == "shutdown":
                await asyncio.Event().wait()  # never drains: the stop waits for the grace
        return 0

    async def main() -> None:
        orch = Orchestrator(InProcessSpawner(until_shutdown), swarm_name="t", entry_agent="a",
                            agents=AGENTS, grace_period_ms=60_000, reconcile_interval_s=0)
        await orch.start()
        await orch.submit("a", AgentEvent(type="message", input="hi"))
        rec = orch.records[("a", "default")]
        await orch.wait_until(lambda: rec.handle is not None, timeout=10)
        stopping = asyncio.ensure_future(orch.shutdown())
        await orch.wait_until(lambda: rec.status == "draining", timeout=10)
        stopping.cancel()
        async with asyncio.timeout(10):
            with pytest.raises(asyncio.CancelledError):
                await stopping
        assert rec.handle is not None  # still in its grace period: stopped by the next call
        async with asyncio.timeout(10):
            await orch.shutdown(grace_period_ms=0)
        assert rec.handle is None

    asyncio.run(main())


def test_connector_shutdown_after_its_watch_tasks_were_cancelled_ends() -> None:
    """The connector supervisor has the same stop path."""

    async def until_shutdown(request: SpawnRequest, transport: Transport) -> int:
        while (message := await transport.recv()) is not None:
            if message.type == "shutdown":
                return 0
        return 0

    spec = ConnectionSpec(name="trig", connector="trigger", connector_package=None,
                          entry=Path("trigger.py"), swarm="main", events=(), rules=())

    async def main() -> None:
        spawner = InProcessSpawner(until_shutdown)
        connectors = ConnectorSupervisor(spawner, cast(Any, None), [spec])
        connectors.start()
        rec = connectors.records["trig"]
        await connectors.wait_until(lambda: rec.handle is not None, timeout=10)
        for task in list(connectors._tasks):  # the watch and pump tasks, not the worker
            task.cancel()
        await asyncio.gather(*connectors._tasks, return_exceptions=True)
        async with asyncio.timeout(10):
            await connectors.shutdown()
        assert rec.handle is None and rec.status == "terminated"

    asyncio.run(main())


def test_an_agent_that_does_not_drain_is_killed_after_the_grace_period() -> None:
    """The stop's SIGKILL after the grace period (its warning once broke the stop)."""

    async def never_drains(request: SpawnRequest, transport: Transport) -> int:
        await asyncio.Event().wait()
        return 0

    async def main() -> None:
        orch = Orchestrator(InProcessSpawner(never_drains), swarm_name="t", entry_agent="a",
                            agents=AGENTS, grace_period_ms=50, reconcile_interval_s=0)
        await orch.start()
        await orch.submit("a", AgentEvent(type="message", input="hi"))
        rec = orch.records[("a", "default")]
        await orch.wait_until(lambda: rec.handle is not None, timeout=10)
        handle = rec.handle
        async with asyncio.timeout(10):
            await orch.shutdown()
        assert handle is not None and handle.exitcode == -signal.SIGKILL
        assert rec.handle is None and rec.status == "terminated"

    asyncio.run(main())


@pytest.mark.e2e
def test_cancelling_every_task_stops_a_pooled_host(tmp_path: Path) -> None:
    """A pooled host's reader is cancelled too: the host is not left running."""
    from goondan.swarm.pool import PooledSpawner

    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle, ignore=shutil.ignore_patterns("__pycache__"))
    host_pid: list[int] = []

    async def main() -> None:
        spawner = PooledSpawner(bundle, state_root=tmp_path / "state", hosts=1)
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=bundle, reconcile_interval_s=0,
                            grace_period_ms=10_000)
        up = asyncio.Event()

        async def serve() -> None:
            async with orch:
                answer = await orch.request("worker", "What is 17 * 23?", timeout_ms=60_000)
                assert "391" in response_text(answer)
                handle = orch.records[("worker", "default")].handle
                assert handle is not None and handle.pid is not None
                host_pid.append(handle.pid)
                up.set()
                await asyncio.Event().wait()

        server = asyncio.ensure_future(serve())
        async with asyncio.timeout(60):
            await up.wait()
        await _cancel_every_other_task()
        assert server.cancelled()
        rec = orch.records[("worker", "default")]
        assert rec.handle is None and rec.status == "terminated"
        async with asyncio.timeout(20):
            await spawner.aclose()

    try:
        asyncio.run(main())
        assert host_pid and _wait_dead(host_pid[0]), "the pooled host is left over"
    finally:
        for pid in host_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
