"""One pre-started agent process for ``goondan run``'s first agent (docs/runtime.md "Performance").

An agent process spends most of its start importing the runtime (asyncio, the turn loop, the
HTTP stack, the bundle loader). ``goondan run`` knows it will need an agent process as soon as
its arguments are parsed, while the orchestrator still has its own imports, the bundle and the
service set-up ahead of it. :func:`prewarm_agent_process` starts a ``spawn`` child at that
point which imports those modules and then waits; the first agent :class:`ProcessSpawner.spawn`
takes it (:func:`take_prewarmed`) and sends it what a fresh child would have received —
the entry function, its arguments, and the orchestrator's environment, working directory and
``sys.path`` *at that moment* (a fresh child inherits them when it starts; the variables loaded from
``.env`` after the prewarm are therefore there too). Every later agent starts the usual way.

Measured (``scripts/bench_cold.py 7 --without prewarm``, wall time, medians of 7 interleaved
runs on a loaded 2-core machine): without it ``run --input`` reaches its first model request
135 ms (31 %) later (440 → 575 ms) and ends 194 ms (39 %) later (an earlier run of 9: 26 % and
26 %); it saves mostly wall time (the imports run in parallel with the orchestrator's).

A prewarmed process nobody takes (an invalid bundle, another swarm already running) is
terminated when the orchestrator exits. Memory: one interpreter with the runtime imported,
about 30 MB resident (20 MB of it private), from the orchestrator's start until the first agent uses
it.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import multiprocessing
import os
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["prewarm_agent_process", "take_prewarmed", "warm_entry"]

# What every agent process imports before its first request (goondan/swarm/agent_process.py).
WARM_IMPORTS = (
    "goondan.swarm.agent_process",
    "goondan.runtime.instance",
    "goondan.config.cache",
    "goondan.config.bundle",
    "goondan.llm.registry",
    "goondan.llm.http",
)


class _Warm:
    def __init__(self, process: Any, conn: Connection) -> None:
        self.process = process
        self.conn = conn

    def discard(self) -> None:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.process.terminate()
        with contextlib.suppress(OSError):
            self.conn.close()
        with contextlib.suppress(OSError, ValueError, AssertionError):
            self.process.join(5)


_slot: _Warm | None = None


def warm_entry(conn: Connection) -> None:
    """Child side: import what an agent process needs, then run the entry it is sent.

    The message is ``(target, argv, environ, cwd, sys.path)``; end of file (the orchestrator
    exited or discarded it) ends the process quietly. The process starts with SIGINT and SIGTERM
    blocked: SIGINT is ignored before they are unblocked, so a Ctrl-C during its start is
    discarded, and a SIGTERM from :func:`discard_prewarmed` still ends it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's to handle
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    # The imports create long-lived objects only: collecting while they load is wasted work,
    # and freezing them keeps the agent's later collections small (figures: commands/common.py
    # defer_gc).
    gc.disable()
    from goondan.codecache import install, save

    install()  # compiled dataclass methods of earlier starts
    try:
        for name in WARM_IMPORTS:
            importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()
    save()  # while waiting for the orchestrator: nothing else to do yet
    try:
        target, argv, environ, cwd, path = conn.recv()
    except (EOFError, OSError):
        return
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    sys.path[:] = path
    from goondan.swarm.spawner import child_entry

    child_entry(target, conn, argv)


def prewarm_agent_process() -> None:
    """Start the pre-imported agent process (once per orchestrator; see the module docs)."""
    global _slot
    if _slot is not None:
        return
    from goondan.swarm.procstart import start_process

    context = multiprocessing.get_context("spawn")
    parent_conn, child_conn = context.Pipe(duplex=True)
    process = context.Process(target=warm_entry, args=(child_conn,), name="goondan-agent:prewarmed",
                              daemon=False)
    has_mask = hasattr(signal, "pthread_sigmask")
    # Started from the main thread: block Ctrl-C and SIGTERM until the child has set them up.
    mask = (
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        if has_mask
        else None
    )
    try:
        start_process(process)
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    child_conn.close()
    _slot = _Warm(process, parent_conn)
    atexit.register(discard_prewarmed)


def discard_prewarmed() -> None:
    """Terminate the prewarmed process if nothing took it."""
    global _slot
    warm, _slot = _slot, None
    if warm is not None:
        warm.discard()


def take_prewarmed(target: Any, argv: list[str]) -> tuple[Any, Connection] | None:
    """Hand ``target(conn, argv)`` to the prewarmed process: ``(process, parent end)``, or
    ``None`` when there is none (or it died, or ``target`` lives in ``__main__``)."""
    global _slot
    if _slot is None or getattr(target, "__module__", "__main__") == "__main__":
        return None
    warm, _slot = _slot, None
    if not warm.process.is_alive():
        warm.discard()
        return None
    try:
        warm.conn.send((target, argv, dict(os.environ), os.getcwd(), list(sys.path)))
    except (OSError, ValueError):
        warm.discard()
        return None
    return warm.process, warm.conn
