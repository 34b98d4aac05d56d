"""Runtime files under the state root: ``runtime/active.json``, per-orchestrator records,
process status snapshots, control sockets, and the live-process view for ``instance list``.

```text
<state_root>/runtime/active.json                      the most recently started orchestrator
<state_root>/runtime/orchestrators/<key>.json         one per running orchestrator (same shape)
<state_root>/runtime/status/<key>.json                processes.json: every agent process
<state_root>/runtime/control/<key>.sock               control socket (restart, status)
<state_root>/runtime/locks/<key>.lock                 flock held by the running orchestrator
<state_root>/runtime/logs/<key>/<process>.{stdout,stderr}.log
```

``<key>`` is the *runtime key* ``<instanceKey>.<workspaceId>`` (:func:`runtime_key`): two bundles
whose Swarms share an ``instanceKey`` never share files, while the same bundle started twice
still finds its own record (docs/cli.md, "Service mode").

A record names its orchestrator by pid *and* the pid's start time (``pidStart``, from
``/proc/<pid>/stat``) plus a random ``token`` its control socket reports: after a SIGKILL and
pid reuse the record no longer matches any process, so nothing signals an unrelated one. Only
the holder of the swarm's lock file (:class:`SwarmLock`, ``fcntl.flock``) runs its orchestrator:
a second ``goondan run`` of the same swarm cannot start another one (docs/orchestrator.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from goondan.errors import ConfigError
from goondan.ipc.logs import safe_key
from goondan.types import JsonObject
from goondan.workspace.claims import owner_alive, pid_start_time
from goondan.workspace.files import private_dirs, private_opener

__all__ = [
    "ActiveRuntime",
    "LiveProcess",
    "SwarmLock",
    "active_path",
    "clear_active",
    "control_socket_path",
    "list_live_processes",
    "pid_alive",
    "pid_start_time",
    "pid_stopped",
    "read_active",
    "running_records",
    "runtime_key",
    "same_process",
    "status_path",
    "write_active",
]

_SOCKET_PATH_LIMIT = 100  # sun_path is 108 bytes on Linux


def runtime_key(instance_key: str, workspace_id: str) -> str:
    """The key of a running swarm's files: its ``instanceKey`` scoped by its workspace id."""
    return safe_key(f"{instance_key}.{workspace_id}")


def runtime_dir(state_root: Path) -> Path:
    return Path(state_root) / "runtime"


def active_path(state_root: Path) -> Path:
    return runtime_dir(state_root) / "active.json"


def status_path(state_root: Path, key: str) -> Path:
    return runtime_dir(state_root) / "status" / f"{safe_key(key)}.json"


def control_socket_path(state_root: Path, key: str) -> Path:
    """The control socket; falls back to the temp dir when the path is too long for AF_UNIX."""
    path = runtime_dir(state_root) / "control" / f"{safe_key(key)}.sock"
    if len(str(path)) <= _SOCKET_PATH_LIMIT:
        return path
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"goondan-{digest}.sock"


def pid_alive(pid: int | None) -> bool:
    """True if ``pid`` runs (zombies count as dead)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(") ", 1)[1].startswith("Z"):
            return False
    return True


def pid_stopped(pid: int | None) -> bool:
    """True if ``pid`` is stopped (SIGSTOP, Ctrl-Z, a debugger): alive but unable to answer."""
    if not pid or pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(") ", 1)[1][:1] in ("T", "t")
    except (OSError, IndexError):  # gone, or no /proc: nothing to say
        return False


def same_process(pid: int | None, start: int | None) -> bool:
    """True if ``pid`` runs and is the process that started at ``start`` (pid only when the
    start time is not known: an old record, or no ``/proc``)."""
    if not pid or pid <= 0:
        return False
    return owner_alive(f"{pid}:{'' if start is None else start}")  # the claim files' liveness check


class SwarmLock:
    """The exclusive lock of one swarm (``runtime/locks/<key>.lock``), held by its orchestrator's
    process for its whole life; the kernel releases it when that process dies, however it dies.

    ``goondan run --detach`` takes it and hands the descriptor to the orchestrator it starts
    (:meth:`adopt`), so there is no moment when neither holds it."""

    def __init__(self, state_root: Path, key: str) -> None:
        self.path = runtime_dir(state_root) / "locks" / f"{safe_key(key)}.lock"
        self.fd: int | None = None

    def __repr__(self) -> str:
        return f"<SwarmLock {self.path} held={self.fd is not None}>"

    def acquire(self) -> bool:
        """Take the lock without waiting; False if another process holds it."""
        if self.fd is not None:
            return True
        private_dirs(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self.fd = fd
        self._write_holder()
        return True

    def _write_holder(self) -> None:
        with contextlib.suppress(OSError):
            assert self.fd is not None
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def holder(self) -> int | None:
        """The pid that last took the lock (written into the file; informative only)."""
        try:
            return int(self.path.read_text(encoding="ascii").strip() or 0) or None
        except (OSError, ValueError):
            return None

    def adopt(self, fd: int) -> bool:
        """Use the inherited descriptor ``fd`` (already locked by the parent); False if it is
        not a lock on this file that this process now holds."""
        try:
            same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        if not same:
            return False
        os.set_inheritable(fd, False)  # agent processes must not keep the swarm locked
        self.fd = fd
        self._write_holder()
        return True

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


@dataclass
class ActiveRuntime:
    """``runtime/active.json`` (docs/orchestrator.md "`goondan run`") plus ``controlSocket`` and
    ``statusFile``."""

    instance_key: str
    bundle_path: str
    swarm: str
    pid: int
    started_at: str
    watch: bool = False
    logs: list[JsonObject] = field(default_factory=list)
    control_socket: str | None = None
    status_file: str | None = None
    runtime_key: str = ""  # file key (runtime_key()); the instance key for old records
    log_dir: str | None = None
    pid_start: int | None = None  # pid_start_time(pid) when the record was written
    token: str = ""  # random; the control socket's status answer carries it
    store: str | None = None  # a PostgreSQL store's masked URL (goondan run --store); else None
    # a detached orchestrator standing by (docs/orchestrator.md "Failover"): the lease's holder
    # (host, pid, stateRoot, ...); it has no control socket until it takes over
    standby: JsonObject | None = None

    def __post_init__(self) -> None:
        if not self.runtime_key:
            self.runtime_key = safe_key(self.instance_key)

    def to_dict(self) -> JsonObject:
        return {
            "instanceKey": self.instance_key,
            "bundlePath": self.bundle_path,
            "startedAt": self.started_at,
            "watch": self.watch,
            "swarm": self.swarm,
            "pid": self.pid,
            "logs": self.logs,
            "controlSocket": self.control_socket,
            "statusFile": self.status_file,
            "runtimeKey": self.runtime_key,
            "logDir": self.log_dir,
            "pidStart": self.pid_start,
            "token": self.token,
        } | ({"store": self.store} if self.store is not None else {}) | (
            {"standby": self.standby} if self.standby is not None else {})

    @classmethod
    def from_dict(cls, data: Any) -> ActiveRuntime:
        if not isinstance(data, dict) or not isinstance(data.get("instanceKey"), str):
            raise ValueError("not an active runtime record")
        return cls(
            instance_key=data["instanceKey"], bundle_path=str(data.get("bundlePath", "")),
            swarm=str(data.get("swarm", "")), pid=int(data.get("pid") or 0),
            started_at=str(data.get("startedAt", "")), watch=bool(data.get("watch")),
            logs=list(data.get("logs") or []), control_socket=data.get("controlSocket"),
            status_file=data.get("statusFile"), runtime_key=str(data.get("runtimeKey") or ""),
            log_dir=data.get("logDir"),
            pid_start=data["pidStart"] if isinstance(data.get("pidStart"), int) else None,
            token=str(data.get("token") or ""),
            store=data["store"] if isinstance(data.get("store"), str) else None,
            standby=data["standby"] if isinstance(data.get("standby"), dict) else None,
        )

    @property
    def alive(self) -> bool:
        """The recorded orchestrator still runs (pid *and* start time: a reused pid is not it)."""
        return same_process(self.pid, self.pid_start)


def _atomic_write(path: Path, data: JsonObject) -> None:
    private_dirs(path.parent)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8", opener=private_opener) as handle:
        handle.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_active(state_root: Path, active: ActiveRuntime) -> None:
    """Write ``active.json`` and ``orchestrators/<key>.json``."""
    _atomic_write(active_path(state_root), active.to_dict())
    _atomic_write(
        runtime_dir(state_root) / "orchestrators" / f"{active.runtime_key}.json", active.to_dict()
    )


def clear_active(state_root: Path, active: ActiveRuntime) -> None:
    """Remove this orchestrator's records (``active.json`` only if it is still ours)."""
    with contextlib.suppress(FileNotFoundError):
        (runtime_dir(state_root) / "orchestrators" / f"{active.runtime_key}.json").unlink()
    with contextlib.suppress(OSError, ValueError, ConfigError):
        current = read_active(state_root)
        if current is not None and current.pid == active.pid and current.token == active.token:
            active_path(state_root).unlink()


def running_records(state_root: Path) -> list[ActiveRuntime]:
    """The records of every orchestrator whose pid is alive (newest first)."""
    directory = runtime_dir(state_root) / "orchestrators"
    out: list[ActiveRuntime] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            active = ActiveRuntime.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        if active.alive:
            out.append(active)
    return sorted(out, key=lambda a: a.started_at, reverse=True)


def read_active(state_root: Path, key: str | None = None) -> ActiveRuntime | None:
    """The record of orchestrator ``key`` (a runtime key; ``active.json`` if None); None when
    absent."""
    path = (
        active_path(state_root)
        if key is None
        else runtime_dir(state_root) / "orchestrators" / f"{safe_key(key)}.json"
    )
    try:
        return ActiveRuntime.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{path} is unreadable: {exc}",
            code="E_RUN_ACTIVE_CORRUPT",
            suggestion=f"delete {path} and start the swarm again with 'goondan run'",
        ) from exc


@dataclass
class LiveProcess:
    """One row of ``goondan instance list``'s live view."""

    orchestrator_key: str
    process: str
    agent_name: str
    instance_key: str
    pid: int | None
    status: str
    started_at: str | None
    uptime_s: float | None

    def to_dict(self) -> JsonObject:
        return {
            "orchestratorKey": self.orchestrator_key,
            "process": self.process,
            "agentName": self.agent_name,
            "instanceKey": self.instance_key,
            "pid": self.pid,
            "status": self.status,
            "startedAt": self.started_at,
            "uptimeSeconds": self.uptime_s,
        }


def _uptime(started_at: str | None) -> float | None:
    if not started_at:
        return None
    try:
        start = datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return round(max(0.0, time.time() - start), 1)


def list_live_processes(state_root: Path) -> list[LiveProcess]:
    """The orchestrators of this state root and their agent processes, with pid liveness.

    A record whose orchestrator pid is dead is reported as ``terminated`` (agents included).
    """
    rows: list[LiveProcess] = []
    directory = runtime_dir(state_root) / "orchestrators"
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            active = ActiveRuntime.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
        alive = active.alive
        rows.append(LiveProcess(
            active.instance_key, "orchestrator", "orchestrator", active.instance_key,
            active.pid, "running" if alive else "terminated", active.started_at,
            _uptime(active.started_at) if alive else None,
        ))
        try:
            status = json.loads(
                Path(active.status_file or status_path(state_root, active.runtime_key)).read_text()
            )
        except (OSError, ValueError):
            continue
        for proc in status.get("processes") or []:
            pid = proc.get("pid")
            live = alive and pid_alive(pid)
            state = str(proc.get("status")) if alive else "terminated"
            if alive and pid and not live:
                state = "terminated"
            rows.append(
                LiveProcess(
                    active.instance_key,
                    str(proc.get("process")),
                    str(proc.get("agentName")),
                    str(proc.get("instanceKey")),
                    pid if live else None,
                    state,
                    proc.get("startedAt") if live else None,
                    _uptime(proc.get("startedAt")) if live else None,
                )
            )
    return rows
