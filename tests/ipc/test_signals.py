"""Signal masks: the service thread blocks SIGINT/SIGTERM, agent processes start with a clean
mask."""

from __future__ import annotations

import asyncio
import signal
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from goondan.ipc.protocol import IpcMessage, control_event, encode
from goondan.swarm.frontend import BLOCKED_SIGNALS, ServiceThread
from goondan.swarm.spawner import ProcessSpawner, SpawnRequest

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "pthread_sigmask"), reason="needs pthread_sigmask"
)


def report_signals_child(conn: Connection, argv: list[str]) -> None:
    """Child target: report the signal mask and the SIGINT disposition, then exit."""
    blocked = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
    sigint = "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "handled"
    event = control_event(
        "signals", agent="probe", instance_key="k", blocked=blocked, sigint=sigint
    )
    conn.send_bytes(encode(IpcMessage.event("probe", "orchestrator", event)))
    conn.close()


class _Service:
    """The smallest thing ServiceThread runs: start/stop coroutines."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


def _blocked_here() -> set[int]:
    return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set())}


def test_service_thread_blocks_sigint_and_spawned_agents_start_clean(tmp_path: Path) -> None:
    main_before = _blocked_here()
    thread = ServiceThread(_Service())  # type: ignore[arg-type]
    thread.start()
    try:
        async def on_loop() -> tuple[set[int], set[int], dict[str, Any]]:
            in_loop = _blocked_here()
            in_worker = await asyncio.to_thread(_blocked_here)  # executor threads inherit it
            spawner = ProcessSpawner(tmp_path, state_root=tmp_path, target=report_signals_child)
            handle = await spawner.spawn(SpawnRequest("probe", "k"))  # started from such a thread
            message = await asyncio.wait_for(handle.transport.recv(), 60)
            assert message is not None
            await handle.wait()
            return in_loop, in_worker, message.agent_event().metadata

        in_loop, in_worker, child = thread.call(on_loop())
    finally:
        thread.stop()
    wanted = {int(s) for s in BLOCKED_SIGNALS}
    assert wanted <= in_loop and wanted <= in_worker
    assert _blocked_here() == main_before  # the main thread still takes Ctrl-C
    assert not wanted & set(child["blocked"])  # SIGTERM reaches the agent's drain handler
    assert child["sigint"] == "ignored"  # Ctrl-C goes to the orchestrator, not the agents


def test_starting_an_agent_process_keeps_the_thread_mask() -> None:
    """The first process start launches multiprocessing's resource tracker, which unblocks
    SIGINT/SIGTERM in the calling thread; ``start_process`` restores the mask. Run in a fresh
    interpreter so the tracker is not already running."""
    import subprocess
    import sys

    probe = """
import multiprocessing, signal, threading
from goondan.swarm.procstart import start_process

def child():
    pass

result = []
def worker():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    process = multiprocessing.get_context("spawn").Process(target=child)
    start_process(process)
    process.join()
    result.append(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set())))

if __name__ == "__main__":
    t = threading.Thread(target=worker)
    t.start(); t.join()
    print(result[0])
"""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2, 15]"
