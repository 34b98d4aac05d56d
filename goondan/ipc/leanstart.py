"""Starting a ``spawn`` child without re-running the parent's ``__main__`` (see :func:`_lean_start`).

Kept apart from :mod:`goondan.ipc.spawner` so that ``goondan run`` can start its prewarmed agent
process (goondan/ipc/prewarm.py) before importing asyncio and the orchestrator: every
millisecond before that start is on the path to the first model request (docs/runtime.md
"Performance").
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["_lean_start"]

_lean = threading.local()


def _install_lean_main() -> None:
    """Wrap ``multiprocessing.spawn.get_preparation_data`` once: while ``_lean.active`` is set
    in the calling thread, the child is told not to re-import the parent's ``__main__``."""
    from multiprocessing import spawn as mp_spawn

    original = mp_spawn.get_preparation_data
    if getattr(original, "_goondan_lean", False):
        return

    def get_preparation_data(name: str) -> dict[str, Any]:
        data: dict[str, Any] = original(name)
        if getattr(_lean, "active", False):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    get_preparation_data._goondan_lean = True  # type: ignore[attr-defined]
    mp_spawn.get_preparation_data = get_preparation_data


def _lean_start(process: Any, *, lean: bool) -> None:
    """``process.start()``; with ``lean`` the parent's ``__main__`` is not re-run in the child.

    The spawn start method re-executes the parent's main script in the child (as
    ``__mp_main__``) so that targets defined there can be unpickled. Targets from importable
    modules do not need it, and for the ``goondan`` console script it costs ~40 ms of
    click/CLI imports per agent process.

    The calling thread's signal mask is restored afterwards: the first ``start()`` launches
    multiprocessing's resource tracker, which blocks and then *unblocks* SIGINT/SIGTERM in the
    calling thread, letting a worker thread take a Ctrl-C or SIGTERM meant for the main one."""
    if lean:
        _install_lean_main()
    has_mask = hasattr(signal, "pthread_sigmask")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set()) if has_mask else None
    _lean.active = lean
    try:
        process.start()
    finally:
        _lean.active = False
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
