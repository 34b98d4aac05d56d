"""Starting a ``spawn`` child without losing the calling thread's signal mask
(:func:`start_process`).

Kept apart from :mod:`goondan.swarm.spawner` so that ``goondan run`` can start the fork server's
template process (goondan/swarm/forktemplate.py) before importing asyncio and the orchestrator.
"""

from __future__ import annotations

import signal
from typing import Any

__all__ = ["start_process"]


def start_process(process: Any) -> None:
    """``process.start()``, with the calling thread's signal mask restored afterwards.

    The first ``start()`` launches multiprocessing's resource tracker, which blocks and then
    *unblocks* SIGINT/SIGTERM in the calling thread, letting a worker thread take a Ctrl-C or
    SIGTERM meant for the main one."""
    has_mask = hasattr(signal, "pthread_sigmask")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set()) if has_mask else None
    try:
        process.start()
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
