"""After a test stopped its swarm: is any process it (or goondan, or goondan's tools) started
still alive? (issue 27 item 5: "no process that goondan or its tools started is alive, checked
by process group and by parent chain").

:class:`ProcessWatch` makes the test process a *child subreaper* (Linux ``prctl``), so a process
whose parent exits — a tool's ``sleep 600 &`` after its shell returned, an orphaned agent — is
re-parented to the test process instead of ``init``, and the parent chain of everything the
test started keeps leading back to it. A *leftover* is a live (non-zombie) process that

* descends from the test process and started after the watch did (parent chain), or
* belongs to the process group or session of such a process seen by an earlier
  :meth:`ProcessWatch.scan` (process group: a job that left the tree still has its group).

Used by the ``no_leftover_processes`` fixture of tests/e2e/conftest.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["ProcessWatch", "alive", "supported"]

PR_SET_CHILD_SUBREAPER = 36
RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"


def supported() -> bool:
    """Linux with ``/proc``."""
    return Path("/proc/self/stat").exists()


def alive(pid: int) -> bool:
    """``pid`` runs and is not a zombie (``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    pgrp: int
    session: int
    start: int
    state: str


def _table() -> dict[int, _Proc]:
    out: dict[int, _Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
            fields = stat[stat.rfind(")") + 2:].split()
            out[int(entry.name)] = _Proc(
                int(entry.name),
                int(fields[1]),
                int(fields[2]),
                int(fields[3]),
                int(fields[19]),
                fields[0],
            )
    return out


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return (
            Path(f"/proc/{pid}/cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode(errors="replace")
            .strip()[:200]
        )
    return "?"


class ProcessWatch:
    """See the module docstring."""

    def __init__(self) -> None:
        self.me = os.getpid()
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        table = _table()
        self.baseline = set(self._descendants(table))
        self.groups: set[int] = set()

    def _descendants(self, table: dict[int, _Proc]) -> list[int]:
        out: list[int] = []
        for proc in table.values():
            seen: set[int] = set()
            parent = proc.ppid
            while parent not in (0, 1) and parent not in seen and parent != self.me:
                seen.add(parent)
                parent = table[parent].ppid if parent in table else 0
            if parent == self.me and proc.pid != self.me:
                out.append(proc.pid)
        return out

    def scan(self) -> list[int]:
        """The live processes started since the watch began, by parent chain or by a process
        group / session seen before; remembers their groups for the next scan. The test
        process's own ``multiprocessing`` resource tracker (it lives as long as the test
        process, by design) is not one."""
        table = _table()
        found = {
            p
            for p in self._descendants(table)
            if p not in self.baseline
            and table[p].state not in "ZX"
            and not (table[p].ppid == self.me and RESOURCE_TRACKER in _cmdline(p))
        }
        for proc in table.values():
            if (
                proc.pid != self.me
                and proc.state not in "ZX"
                and proc.pid not in self.baseline
                and (proc.pgrp in self.groups or proc.session in self.groups)
            ):
                found.add(proc.pid)
        for pid in found:
            self.groups.update({pid, table[pid].pgrp, table[pid].session})
        self.groups -= {self.me, table[self.me].pgrp if self.me in table else 0,
                        table[self.me].session if self.me in table else 0}
        return sorted(found)

    def leftovers(self, timeout: float = 10.0) -> list[str]:
        """Wait up to ``timeout`` (failure-only) for every started process to end; the ones still
        alive then (``pid cmdline``), which are SIGKILLed so the next test starts clean."""
        deadline = time.monotonic() + timeout
        while (alive := self.scan()) and time.monotonic() < deadline:
            time.sleep(0.05)
        described = [f"{pid} {_cmdline(pid)}" for pid in alive]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return described


def watch_run_module(
    request: pytest.FixtureRequest, modules: tuple[str, ...]
) -> Iterator[ProcessWatch | None]:
    """The body of a ``no_leftover_processes`` fixture: for a test of one of ``modules`` (module
    name prefixes), fail when a process started during the test outlives it."""
    module = request.module.__name__.rsplit(".", 1)[-1]
    if not supported() or not module.startswith(modules):
        yield None
        return
    watch = ProcessWatch()
    yield watch
    leftovers = watch.leftovers()
    assert leftovers == [], f"processes outlived the test's swarm: {leftovers}"
