"""The prewarmed agent process of ``goondan run`` (goondan/swarm/prewarm.py).

The first agent spawn takes it and must behave like a fresh child started at that moment: the
orchestrator's environment and working directory at spawn time, the usual entry (clean signal
mask, SIGINT ignored) and arguments; later spawns start fresh processes; an unused one is
terminated."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from goondan.ipc.protocol import IpcMessage, control_event, encode
from goondan.swarm import prewarm
from goondan.swarm.spawner import ProcessSpawner, SpawnRequest

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask"), reason="needs pthread_sigmask"
)

PROBE_ENV = "GOONDAN_TEST_PREWARM_PROBE"


def report_child(conn: Connection, argv: list[str]) -> None:
    """Child target: report pid, cwd, the probe variable, argv and the SIGINT disposition."""
    sigint = "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "handled"
    event = control_event(
        "probe",
        agent="probe",
        instance_key="k",
        pid=os.getpid(),
        cwd=os.getcwd(),
        probe=os.environ.get(PROBE_ENV),
        argv=argv,
        sigint=sigint,
        path=sys.path[-1],
        blocked=sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set())),
    )
    conn.send_bytes(encode(IpcMessage.event("probe", "orchestrator", event)))
    conn.close()


@pytest.fixture
def clean_slot() -> Iterator[None]:
    prewarm.discard_prewarmed()
    yield
    prewarm.discard_prewarmed()


async def _probe(spawner: ProcessSpawner, key: str) -> tuple[int | None, dict[str, object]]:
    handle = await spawner.spawn(SpawnRequest("probe", key))
    message = await asyncio.wait_for(handle.transport.recv(), 60)
    assert message is not None
    exit_ = await handle.wait()
    assert exit_.ok
    return handle.pid, dict(message.agent_event().metadata)


def test_first_agent_spawn_takes_the_prewarmed_process_with_the_current_environment(
        tmp_path: Path, clean_slot: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROBE_ENV, raising=False)
    prewarm.prewarm_agent_process()
    warm = prewarm._slot
    assert warm is not None
    warm_pid = warm.process.pid
    # set after the prewarm, like the variables `goondan run` loads from .env
    monkeypatch.setenv(PROBE_ENV, "after-prewarm")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "added-after-prewarm")])
    spawner = ProcessSpawner(tmp_path, state_root=tmp_path / "state", target=report_child)

    async def main() -> tuple[
        tuple[int | None, dict[str, object]], tuple[int | None, dict[str, object]]
    ]:
        return await _probe(spawner, "first"), await _probe(spawner, "second")

    (first_pid, first), (second_pid, second) = asyncio.run(main())
    assert first_pid == warm_pid and first["pid"] == warm_pid
    assert first["probe"] == "after-prewarm"
    assert first["cwd"] == str(tmp_path.resolve())
    assert first["argv"] == spawner.argv(SpawnRequest("probe", "first"))
    assert first["path"] == str(tmp_path / "added-after-prewarm")
    assert first["sigint"] == "ignored" and first["blocked"] == []
    assert prewarm._slot is None
    assert second_pid != warm_pid and second["pid"] == second_pid  # later agents start fresh
    assert second["probe"] == "after-prewarm"


def test_an_unused_prewarmed_process_is_terminated(clean_slot: None) -> None:
    prewarm.prewarm_agent_process()
    warm = prewarm._slot
    assert warm is not None
    prewarm.discard_prewarmed()  # terminates it even while it is still importing
    assert prewarm._slot is None
    assert not warm.process.is_alive()
    assert warm.process.exitcode is not None


def test_an_entry_defined_in_main_does_not_take_the_prewarmed_process(
    tmp_path: Path, clean_slot: None
) -> None:
    prewarm.prewarm_agent_process()
    taken = prewarm.take_prewarmed(report_child, [])  # a module-level entry takes it
    assert taken is not None and prewarm._slot is None
    process, conn = taken
    assert conn.poll(60)
    conn.recv_bytes()
    process.join(60)
    conn.close()
    prewarm.prewarm_agent_process()

    def local_target(conn: Connection, argv: list[str]) -> None:  # pragma: no cover - never run
        raise AssertionError

    local_target.__module__ = "__main__"
    assert prewarm.take_prewarmed(local_target, []) is None  # needs the parent's __main__
    assert prewarm._slot is not None
