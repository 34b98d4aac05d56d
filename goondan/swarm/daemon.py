"""Service mode: find a running swarm, start one in the background, query it, stop it.

``goondan run --detach`` starts ``goondan run --foreground`` in its own session (stdin closed,
stdout/stderr appended to the swarm's ``orchestrator.{stdout,stderr}.log``) and returns once
the swarm answers on its control socket and its connector (and agent) processes run; when one
crashes meanwhile it stops the swarm and fails with the reason (``E_RUN_START_FAILED``).
``goondan stop`` asks the orchestrator to stop over the control socket (a graceful stop: running
Turns finish and are folded), then sends SIGTERM and finally SIGKILL — to the orchestrator and to
the agent and connector processes it had — when the grace period passes. ``status``, ``send``,
``logs`` and ``restart`` find the swarm the same way: from ``--bundle`` (default: the current
directory's bundle), else the most recently started swarm. See docs/cli.md, "Service mode".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.errors import ConfigError, GoondanError
from goondan.ipc.logs import tail_lines
from goondan.swarm.state import (
    ActiveRuntime,
    pid_start_time,
    read_active,
    runtime_key,
    same_process,
    write_active,
)
from goondan.types import JsonObject
from goondan.workspace.files import private_dirs, private_opener

__all__ = [
    "StopReport",
    "bundle_runtime_key",
    "detached_argv",
    "locate_running",
    "query_status",
    "start_detached",
    "stop_running",
    "wait_for",
    "write_standby",
]

READY_TIMEOUT_S = 60.0
# A connector reports ``ready`` before its ``run(ctx)`` starts, and a start failure in ``run``
# (its port taken) comes a moment later: ready means every connector kept running this long. A
# swarm with no agent or connector process has nothing that could fail so: it is ready at once.
SETTLE_S = 1.0
_POLL_S = 0.05
_STARTING = ("pending", "spawning", "crashed", "crashLoopBackOff")


def wait_for(condition: Callable[[], bool], timeout_s: float, *, poll_s: float = _POLL_S) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def bundle_runtime_key(bundle: Path, swarm: str | None, state_root: Path) -> tuple[str, Any]:
    """The runtime key of ``bundle``'s Swarm (see :func:`goondan.swarm.state.runtime_key`) and the
    loaded bundle."""
    from goondan.config.cache import load_bundle_cached
    from goondan.workspace.paths import workspace_id_for

    loaded = load_bundle_cached(bundle, state_root=state_root)
    spec = loaded.swarm_spec(swarm)
    return runtime_key(
        spec.instance_key, workspace_id_for(loaded.root, loaded.package_name)
    ), loaded


def _has_bundle(path: Path) -> bool:
    return path.is_file() or (path / "goondan.yaml").is_file()


def locate_running(state_root: Path, bundle: str | None, swarm: str | None = None, *,
                   required: bool = True, standby: bool = False) -> ActiveRuntime | None:
    """The running swarm of ``bundle`` (default: the current directory's bundle; without one,
    the most recently started swarm). Raises ``E_RUN_NOT_RUNNING`` when ``required``.
    ``standby``: a detached orchestrator standing by counts too (``stop``, ``status``)."""
    target = Path(bundle) if bundle is not None else Path.cwd()
    active: ActiveRuntime | None
    if bundle is not None or _has_bundle(target):
        key, loaded = bundle_runtime_key(target, swarm, state_root)
        active = read_active(state_root, key)
        where = f"for the bundle {loaded.root}"
        start = f"goondan run --detach {loaded.root}"
    else:
        active = read_active(state_root)
        where = f"under {state_root}"
        start = "goondan run --detach PATH"
    if active is not None and active.alive and (
            active.control_socket or (standby and active.standby is not None)):
        return active
    if not required:
        return None
    raise ConfigError(f"no running swarm {where}", code="E_RUN_NOT_RUNNING",
                      suggestion=f"start it with '{start}' (or 'goondan run' in another terminal)")


def query_status(active: ActiveRuntime, *, timeout_s: float = 10.0) -> JsonObject:
    """The orchestrator's status document (``{"command": "status"}`` on the control socket)."""
    from goondan.ipc.controlwire import send_control

    assert active.control_socket is not None
    return asyncio.run(
        send_control(Path(active.control_socket), {"command": "status"}, timeout_s=timeout_s)
    )


def detached_argv(state_root: Path, bundle: Path, swarm: str, *, watch: bool = False,
                  env_file: str | None = None) -> list[str]:
    """The ``goondan run --foreground`` command line that ``run --detach`` starts."""
    import sys

    # -P: the current directory is not put on sys.path (a goondan.py there is not imported);
    # PYTHONPATH is kept. Agent processes inherit the flag (multiprocessing spawn).
    argv = [
        sys.executable,
        "-P",
        "-m",
        "goondan",
        "--state-root",
        str(state_root),
        "-q",
        "run",
        str(bundle),
        "--foreground",
        "--swarm",
        swarm,
    ]
    if watch:
        argv.append("--watch")
    if env_file:
        argv += ["--env-file", env_file]
    return argv


def _start_failure(doc: JsonObject) -> str | None:
    """Why the swarm of status document ``doc`` failed to start: the first agent or connector
    process that crashed since it started (its last error), else None."""
    for row in _rows(doc):
        if not row.get("consecutiveCrashes"):
            continue
        what = (
            f"Connection {row.get('connection')} (connector {row.get('connector')})"
            if "connection" in row
            else f"agent process {row.get('process')}"
        )
        cause = row.get("lastError") or f"exited with code {row.get('lastExitCode')}"
        return f"{what} failed: {cause}"
    return None


def _workers_up(doc: JsonObject) -> dict[str, Any] | None:
    """The pid of every agent and connector process of status document ``doc`` while none is
    still starting (None while one is)."""
    up: dict[str, Any] = {}
    for row in _rows(doc):
        if row.get("status") in _STARTING:
            return None
        up[str(row.get("process"))] = row.get("pid")
    return up


def _rows(doc: JsonObject) -> list[JsonObject]:
    """The connector and agent process rows of a status document."""
    rows = [*(doc.get("connections") or []), *(doc.get("processes") or [])]
    return [row for row in rows if isinstance(row, dict)]


def _await_workers(
    active: ActiveRuntime, child: subprocess.Popen[bytes], deadline: float
) -> str | None:
    """Wait until every agent and connector process of the swarm runs and kept running for
    :data:`SETTLE_S` (none: no wait); returns why it will not (a crash, the orchestrator's exit,
    the deadline)."""
    steady: tuple[dict[str, Any], float] | None = None
    while True:
        doc: JsonObject | None = None
        with contextlib.suppress(GoondanError, OSError, ValueError):
            doc = query_status(active, timeout_s=5.0)
        if child.poll() is not None:
            return f"exited with code {child.returncode}"
        if doc is not None:
            failure = _start_failure(doc)
            if failure is not None:
                return failure
            up = _workers_up(doc)
            if up == {}:  # no process at all (the rows are made before the socket answers)
                return None
            now = time.monotonic()
            if up is None or steady is None or steady[0] != up:
                steady = (up, now) if up is not None else None
            elif now - steady[1] >= SETTLE_S:
                return None
        if time.monotonic() >= deadline:
            starting = ", ".join(str(row.get("process")) for row in _rows(doc or {})
                                 if row.get("status") in _STARTING)
            return "was not ready in time" + (f" (still starting: {starting})" if starting else "")
        time.sleep(_POLL_S * 2)


def start_detached(
    argv: Sequence[str], *, state_root: Path, key: str, log_dir: Path, env: Mapping[str, str],
    cwd: Path, timeout_s: float = READY_TIMEOUT_S, pass_fds: Sequence[int] = (),
) -> ActiveRuntime:
    """Start ``argv`` (a ``goondan run --foreground``) in its own session and wait until its
    control socket answers and its agent and connector processes run (:func:`_await_workers`).
    Raises ``E_RUN_START_FAILED`` (with the reason and the log path) if it exits, a process
    crashes, or it is not ready before ``timeout_s``; nothing of it is left running then."""
    deadline = time.monotonic() + timeout_s
    private_dirs(log_dir)
    out_path, err_path = log_dir / "orchestrator.stdout.log", log_dir / "orchestrator.stderr.log"
    with (
        open(out_path, "ab", opener=private_opener) as out,
        open(err_path, "ab", opener=private_opener) as err,
    ):
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=dict(env),
            cwd=str(cwd),
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    found: list[ActiveRuntime] = []

    def ready() -> bool:
        if child.poll() is not None:
            return True
        with contextlib.suppress(GoondanError):
            active = read_active(state_root, key)
            if active is not None and active.pid == child.pid and active.standby is not None:
                found.append(active)  # standing by (write_standby): it starts when it leads
                return True
            if active is not None and active.pid == child.pid and active.control_socket:
                with contextlib.suppress(GoondanError, OSError, ValueError):
                    if query_status(active, timeout_s=5.0).get("ok"):
                        found.append(active)
                        return True
        return False

    wait_for(ready, timeout_s)
    if found and found[0].standby is not None:
        return found[0]
    if found:
        failure = _await_workers(found[0], child, deadline)
        if failure is None:
            return found[0]
        stop_running(found[0], grace_s=5.0)  # the processes it started go too
        _kill_session(child)
        raise ConfigError(
            f"the swarm did not start: {failure}",
            code="E_RUN_START_FAILED",
            suggestion=f"fix the cause and start it again (the processes' logs: {log_dir}; "
            "'goondan logs --process NAME' shows one)",
        )
    if child.poll() is None:  # alive but never ready: do not leave it behind
        _kill_session(child)
        what = f"did not become ready within {timeout_s:.0f} s"
    else:
        what = f"exited with code {child.returncode}"
    last = [line for line in (tail_lines(err_path, 5) if err_path.exists() else [])]
    detail = ("; last log lines:\n    " + "\n    ".join(last)) if last else ""
    raise ConfigError(
        f"the swarm {what} (log: {err_path}){detail}",
        code="E_RUN_START_FAILED",
        suggestion="run it in the foreground ('goondan run --foreground') to see the problem, "
        f"or read {err_path}",
    )


def write_standby(service: Any, holder: JsonObject, store: str | None) -> None:
    """The record of an orchestrator standing by for the swarm's lease on a PostgreSQL store
    (``holder``: the active node): ``run --detach`` returns on it, ``stop`` and ``status``
    find it. No control socket; the service's own record replaces it once this node leads."""
    from goondan.types import now_iso

    write_active(service.state_root, ActiveRuntime(
        instance_key=service.instance_key, runtime_key=service.key,
        log_dir=str(service.log_dir), bundle_path=str(service.bundle.root / "goondan.yaml"),
        swarm=service.swarm.name, pid=os.getpid(), pid_start=pid_start_time(os.getpid()),
        started_at=now_iso(), watch=service.watch, store=store, standby=dict(holder)))


def _kill_session(child: subprocess.Popen[bytes]) -> None:
    """SIGKILL what is left of the session ``run --detach`` started, and reap its leader."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


@dataclass
class StopReport:
    """What ``goondan stop`` did: ``graceful`` (stopped over the control socket / SIGTERM in
    time) or ``forced`` (SIGKILL), and the pids that were still running at the end (none)."""

    instance_key: str
    pid: int
    mode: str
    processes: list[int] = field(default_factory=list)
    left_running: list[int] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        return {"instanceKey": self.instance_key, "pid": self.pid, "mode": self.mode,
                "processes": list(self.processes), "leftRunning": list(self.left_running)}


def _child_pids(active: ActiveRuntime) -> list[tuple[int, int | None]]:
    """Agent and connector processes of the running swarm, as (pid, start time) (best effort)."""
    pids: list[tuple[int, int | None]] = []
    with contextlib.suppress(GoondanError, OSError, ValueError, AssertionError):
        doc = query_status(active, timeout_s=5.0)
        if active.token and doc.get("token") not in (None, active.token):
            return []  # another orchestrator answers on this socket: not the record's children
        for row in [*(doc.get("processes") or []), *(doc.get("connections") or [])]:
            pid = row.get("pid") if isinstance(row, dict) else None
            if isinstance(pid, int) and pid > 0:
                pids.append((pid, pid_start_time(pid)))
    return pids


def _signal(pid: int, start: int | None, sig: int) -> None:
    """Send ``sig`` to ``pid`` only while it is still the process that started at ``start``
    (never to an unrelated process that reused the pid)."""
    if same_process(pid, start):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop_running(active: ActiveRuntime, *, grace_s: float) -> StopReport:
    """Stop the swarm ``active``: graceful stop over the control socket, SIGTERM if the socket
    does not answer, SIGKILL (orchestrator and its processes) after ``grace_s``. A process is
    signalled only while its pid still names the process recorded (pid and start time)."""
    from goondan.ipc.controlwire import send_control

    children = _child_pids(active)
    mode = "graceful"
    asked = False
    if active.control_socket:
        with contextlib.suppress(GoondanError, OSError, ValueError):
            asked = bool(asyncio.run(send_control(Path(active.control_socket), {"command": "stop"},
                                                  timeout_s=5.0)).get("ok"))
    if not asked:
        _signal(active.pid, active.pid_start, signal.SIGTERM)

    def gone() -> bool:
        return not active.alive

    def children_gone() -> bool:
        return not any(same_process(pid, start) for pid, start in children)

    if not wait_for(gone, grace_s):
        mode = "forced"
        _signal(active.pid, active.pid_start, signal.SIGKILL)
        wait_for(gone, 10.0)
    # Agents and connectors end with their orchestrator; after a forced stop they may not.
    if not wait_for(children_gone, 5.0 if mode == "graceful" else 0.0):
        mode = "forced"
        for pid, start in children:
            _signal(pid, start, signal.SIGKILL)
        wait_for(children_gone, 10.0)
    left = [
        pid
        for pid, start in [(active.pid, active.pid_start), *children]
        if same_process(pid, start)
    ]
    return StopReport(active.instance_key, active.pid, mode, [pid for pid, _ in children], left)
