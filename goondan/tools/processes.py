"""Who owns a tool's child processes, and how they are stopped (docs/tools.md "Child processes").

Every process a tool or an MCP stdio server starts runs in its own process group
(``start_new_session=True``) and carries owner markers in its environment, inherited by
everything it starts in turn:

* ``GOONDAN_ORCHESTRATOR=<pid>:<start time>`` (:func:`~goondan.workspace.claims.owner_token`)
  — the orchestrator of the agent process (its parent), set when an agent process starts
  (:func:`enter_agent_process`);
* ``GOONDAN_AGENT_PROCESS=<pid>`` — the agent process itself.

Stopping, from the narrowest to the widest scope:

* a call: :func:`stop_group` (SIGTERM to the group, :data:`GROUP_GRACE_S`, SIGKILL) when the
  command ended, plus :func:`sweep` of the call's own marker for jobs that left the group;
* an agent process: on its way out it sweeps its own marker (jobs kept on purpose with
  ``keepBackground``, MCP servers that were not closed);
* the orchestrator: when an agent process dies (SIGKILL included) it sweeps that process's
  marker, and when the swarm stops it sweeps its own.

Markers are found through ``/proc/<pid>/environ`` (Linux). A process that clears its
environment *and* leaves its process group escapes them (documented limit); elsewhere only the
process-group kill applies.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from goondan.workspace.claims import owner_token

__all__ = [
    "AGENT_PROCESS_ENV",
    "GROUP_GRACE_S",
    "ORCHESTRATOR_ENV",
    "enter_agent_process",
    "owner_env",
    "stop_group",
    "sweep",
]

ORCHESTRATOR_ENV = "GOONDAN_ORCHESTRATOR"
AGENT_PROCESS_ENV = "GOONDAN_AGENT_PROCESS"
GROUP_GRACE_S = 0.1
_POLL_S = 0.005
_SWEEP_LOOKS = 50  # a bound for a process that keeps forking faster than the sweep kills
_orchestrator: str | None = None


def enter_agent_process(orchestrator: int | None = None) -> None:
    """Called first thing in an agent process: its orchestrator is ``orchestrator``, by default
    its parent. Once per process: the fork server's child names the orchestrator (its parent is
    the template) before the agent entry calls this again."""
    global _orchestrator
    if _orchestrator is None:
        _orchestrator = owner_token(os.getppid() if orchestrator is None else orchestrator)


def owner_env() -> dict[str, str]:
    """The owner markers every child of this process carries."""
    env = {AGENT_PROCESS_ENV: str(os.getpid())}
    if _orchestrator is not None:
        env[ORCHESTRATOR_ENV] = _orchestrator
    return env


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace_s: float = GROUP_GRACE_S) -> bool:
    """SIGTERM the process group ``pgid``, SIGKILL what is left after ``grace_s``; True when
    the group had members. Blocks at most ``grace_s`` (run it in a thread from async code)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return False
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return True


def _proc_pids() -> list[int]:
    """The pids under ``/proc`` (a test point of :func:`sweep`)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def sweep(markers: dict[str, str]) -> int:
    """SIGKILL every process (but this one) whose environment holds all of ``markers``;
    returns how many. Linux only (``/proc``); elsewhere nothing.

    One look at ``/proc`` is not enough: a marked process may fork after the look and before
    its SIGKILL, and its child carries the markers too. So it looks again until a look finds
    no process it has not killed yet (a process cannot fork once SIGKILL is pending)."""
    if not markers or not Path("/proc").is_dir():
        return 0
    needles = {f"{k}={v}".encode() for k, v in markers.items()}
    seen = {os.getpid()}
    killed = 0
    for _ in range(_SWEEP_LOOKS):
        found = [pid for pid in _proc_pids() if pid not in seen and _marked(pid, needles)]
        if not found:
            break
        for pid in found:
            seen.add(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _marked(pid: int, needles: set[bytes]) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return needles.issubset(environ.split(b"\0"))
