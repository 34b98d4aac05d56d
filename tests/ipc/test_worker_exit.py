"""``AgentHandle.wait`` returns a :class:`WorkerExit` (reason, code, signal), for every engine."""

from __future__ import annotations

import asyncio
import signal
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from goondan.ipc.channel import Transport
from goondan.swarm.spawner import InProcessSpawner, ProcessSpawner, SpawnRequest, WorkerExit
from tests.support.aio import run


def exit_with_three(conn: Connection, argv: list[str]) -> None:
    sys.exit(3)


def sleep_forever(conn: Connection, argv: list[str]) -> None:
    conn.recv()  # blocks until the parent kills it


def test_exit_values_from_exit_codes() -> None:
    assert WorkerExit.from_exitcode(0) == WorkerExit("exited", 0, None)
    assert WorkerExit.from_exitcode(0).ok
    assert WorkerExit.from_exitcode(-15) == WorkerExit("signalled", None, 15)
    assert WorkerExit.from_exitcode(-9, killed=True).reason == "killed"
    assert WorkerExit.from_exitcode(-15).status_code == -15  # processes.json keeps its form
    assert WorkerExit.from_exitcode(2).describe() == "exit code 2"
    assert WorkerExit.from_exitcode(-9).describe() == "signal 9"


def test_process_handles_report_exit_codes_and_kills(tmp_path: Path) -> None:
    async def main() -> tuple[WorkerExit, WorkerExit]:
        exiting = ProcessSpawner(tmp_path, state_root=tmp_path, target=exit_with_three)
        first = await (await exiting.spawn(SpawnRequest("probe", "a"))).wait()
        sleeping = ProcessSpawner(tmp_path, state_root=tmp_path, target=sleep_forever)
        handle = await sleeping.spawn(SpawnRequest("probe", "b"))
        handle.kill()
        return first, await handle.wait()

    first, killed = run(main(), timeout_s=90)
    assert first == WorkerExit("exited", 3, None) and not first.ok
    assert killed == WorkerExit("killed", None, int(signal.SIGKILL))


def test_in_process_handles_report_the_same_values() -> None:
    async def returns(request: SpawnRequest, transport: Transport) -> int | None:
        return None

    async def raises(request: SpawnRequest, transport: Transport) -> int | None:
        raise RuntimeError("boom")

    async def blocks(request: SpawnRequest, transport: Transport) -> int | None:
        await asyncio.Event().wait()
        return None

    async def main() -> list[WorkerExit]:
        ends = []
        for worker in (returns, raises):
            ends.append(await (await InProcessSpawner(worker).spawn(SpawnRequest("a", "k"))).wait())
        handle = await InProcessSpawner(blocks).spawn(SpawnRequest("a", "k"))
        await asyncio.sleep(0)
        handle.kill()
        ends.append(await handle.wait())
        return ends

    assert run(main(), timeout_s=90) == [
        WorkerExit("exited", 0, None), WorkerExit("failed", 1, None),
        WorkerExit("killed", None, int(signal.SIGKILL)),
    ]
