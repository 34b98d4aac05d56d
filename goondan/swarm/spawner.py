"""Spawners start one worker process per request and hand back a handle.

A worker has a *kind* (:data:`WorkerKind`): ``agent`` (one per (agent, instanceKey)) or
``connector`` (one per Connection, docs/connectors.md). :data:`WORKER_ENTRIES` is the table of
child entry points by kind; :meth:`ProcessSpawner.argv` builds each kind's arguments, and both
kinds get the same handle, pipe channel, log files and signal set-up.

The orchestrator never creates processes itself: it is given a :class:`Spawner` (dependency
injection), so tests and the embedding API can swap real processes for in-process workers.

* :class:`ProcessSpawner` uses ``multiprocessing`` with the ``spawn`` start method (a fresh
  interpreter, nothing inherited from the orchestrator's memory, safe with threads). The child's
  entry is a module-level function ``target(conn, argv)``; ``argv`` carries the spec's
  ``--bundle-dir --agent-name --instance-key`` plus ``--state-root``/``--swarm``/``--workdir``/
  ``--log-dir``. Exit is observed through the process sentinel on the event loop (no thread per
  child). The child runs :func:`child_entry` first: a spawned child inherits the
  signal mask of the thread that started it, and ``goondan run`` starts agents from threads
  that block SIGINT/SIGTERM (see :mod:`goondan.swarm.frontend`); a blocked SIGTERM would make
  the agent ignore graceful stops, so the mask is cleared before the target runs.
  On Linux an agent process is forked from the **fork server**'s template instead
  (:mod:`goondan.swarm.forkserver`): the same entry, environment and arguments, at the cost of a
  fork rather than an interpreter start; it falls back to ``spawn`` where it cannot fork.
* :class:`InProcessSpawner` runs a worker coroutine per instance in the current loop over an
  :class:`~goondan.ipc.channel.InProcessTransport` pair; ``kill()`` cancels it (like SIGKILL:
  the running turn is not folded).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from goondan.ipc.channel import InProcessTransport, PipeTransport, QueueTransport, Transport
from goondan.ipc.logs import connection_process_name, process_name
from goondan.ipc.protocol import IpcMessage
from goondan.swarm.procstart import start_process
from goondan.types import now_iso

if TYPE_CHECKING:
    from goondan.swarm.forkserver import ForkServer

_log = logging.getLogger("goondan.swarm.spawner")

__all__ = [
    "WORKER_ENTRIES",
    "AgentHandle",
    "ExitReason",
    "HostedHandle",
    "HostedTransport",
    "InProcessSpawner",
    "ProcessSpawner",
    "SpawnRequest",
    "Spawner",
    "WorkerExit",
    "WorkerFactory",
    "WorkerKind",
    "child_entry",
    "resolve_worker_entry",
]

ChildTarget = Callable[[Connection, list[str]], None]


WorkerKind = Literal["agent", "connector"]

# Child entry point of each worker kind, as ``module:function`` (imported in the parent only
# when that kind is spawned, and by name in the child, so neither pays for the other).
WORKER_ENTRIES: Final[dict[str, str]] = {
    "agent": "goondan.swarm.agent_process:process_main",
    "connector": "goondan.connectors.process:process_main",
}


def resolve_worker_entry(kind: str) -> ChildTarget:
    """The child entry function of worker ``kind`` (see :data:`WORKER_ENTRIES`)."""
    spec = WORKER_ENTRIES.get(kind)
    if spec is None:
        raise ValueError(f"unknown worker kind {kind!r}; known: {', '.join(WORKER_ENTRIES)}")
    module_name, _, attr = spec.partition(":")
    target: ChildTarget = getattr(importlib.import_module(module_name), attr)
    return target


@dataclass
class SpawnRequest:
    """What to start: one worker of ``kind``.

    ``agent``: one (agent, instanceKey), optionally with its own tool workdir.
    ``connector``: one Connection's connector; ``agent_name`` holds the Connection's name and
    ``instance_key`` the Connector's (use :meth:`connector`)."""

    agent_name: str
    instance_key: str
    workdir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    kind: WorkerKind = "agent"

    @classmethod
    def connector(cls, connection_name: str, connector_name: str) -> SpawnRequest:
        """The request for the connector process of Connection ``connection_name``."""
        return cls(connection_name, connector_name, kind="connector")

    @property
    def worker_name(self) -> str:
        """The agent's or the Connection's name."""
        return self.agent_name

    @property
    def process_name(self) -> str:
        if self.kind == "connector":
            return connection_process_name(self.agent_name)
        return process_name(self.agent_name, self.instance_key)


ExitReason = Literal["exited", "signalled", "killed", "failed"]


@dataclass(frozen=True)
class WorkerExit:
    """How a worker ended: what :meth:`AgentHandle.wait` returns.

    ``exited`` — it returned or called exit (``code``); ``signalled`` — a signal ended it
    (``signal``); ``killed`` — :meth:`AgentHandle.kill` ended it; ``failed`` — an in-process
    worker raised. Engines without OS processes (an actor, a task) fill in what they know."""

    reason: ExitReason
    code: int | None = None
    signal: int | None = None

    @classmethod
    def from_exitcode(cls, exitcode: int | None, *, killed: bool = False) -> WorkerExit:
        """From ``multiprocessing``'s ``exitcode`` (negative: ended by that signal)."""
        if exitcode is None:
            return cls("signalled" if not killed else "killed", None, None)
        if exitcode < 0:
            return cls(
                "killed" if killed and -exitcode == signal.SIGKILL else "signalled", None, -exitcode
            )
        return cls("exited", exitcode, None)

    @property
    def ok(self) -> bool:
        """True for a clean exit (code 0)."""
        return self.reason == "exited" and self.code == 0

    @property
    def status_code(self) -> int:
        """The ``lastExitCode`` of ``processes.json``: the code, or minus the signal."""
        if self.code is not None:
            return self.code
        return -self.signal if self.signal is not None else -1

    def describe(self) -> str:
        """``exit code N`` or ``signal N`` for log messages."""
        if self.code is not None:
            return f"exit code {self.code}"
        return f"signal {self.signal}" if self.signal is not None else self.reason


class AgentHandle(abc.ABC):
    """A started agent process (or in-process worker) and its channel."""

    # The process ``pid`` is this worker's alone: its tools' processes are swept when it dies.
    # False for an instance on a shared host process (goondan/swarm/pool.py).
    owns_pid = True

    def __init__(self, request: SpawnRequest, transport: Transport) -> None:
        self.request = request
        self.transport = transport
        self.started_at = now_iso()
        self.started_monotonic = time.monotonic()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.request.process_name} "
            f"pid={self.pid} exit={self.exitcode}>"
        )

    @property
    @abc.abstractmethod
    def pid(self) -> int | None:
        """OS process id (``None`` in process)."""

    @property
    @abc.abstractmethod
    def exitcode(self) -> int | None:
        """Exit status once exited (negative = killed by that signal), else ``None``."""

    @abc.abstractmethod
    async def wait(self) -> WorkerExit:
        """Wait for the exit and return how the worker ended."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop at once (SIGKILL); the running turn is not folded."""


class HostedTransport(QueueTransport):
    """The orchestrator's end of the channel of worker ``hid`` inside a host that runs many (a
    pooled host process, a Ray host actor). The host's reader feeds it what the worker sends
    (:meth:`feed`); a subclass carries frames to the host (:meth:`_deliver`), tells it of this end's
    close (:meth:`_send_eof`) and kills the worker there (:meth:`kill`)."""

    def __init__(self, hid: str) -> None:
        super().__init__()
        self.hid = hid

    async def send(self, message: IpcMessage) -> None:
        """Deliver one frame to the worker (awaited: the frames of one worker stay in order)."""
        if self.closed:
            raise self._gone()
        await self._deliver(message)

    async def _after_close(self) -> None:
        with contextlib.suppress(Exception):
            await self._send_eof()

    @abc.abstractmethod
    def _gone(self) -> Exception:
        """The error of a send to a worker whose channel or host is gone."""

    @abc.abstractmethod
    async def _deliver(self, message: IpcMessage) -> None:
        """Carry ``message`` to the worker on its host; raise :meth:`_gone` when it is gone."""

    @abc.abstractmethod
    async def _send_eof(self) -> None:
        """Tell the host this end closed: the worker drains as on the EOF of its pipe."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Ask the host to stop the worker at once (not awaited)."""


class HostedHandle(AgentHandle):
    """A worker inside a host that runs many: it has no process of its own to wait for; the
    host's reader reports its frames and its end (:meth:`report`), and its end closes the
    channel (the receiver sees the end of the stream)."""

    def __init__(self, request: SpawnRequest, transport: HostedTransport) -> None:
        super().__init__(request, transport)
        self.hosted = transport
        self._exit: WorkerExit | None = None
        self._exited = asyncio.Event()

    @property
    def exitcode(self) -> int | None:
        return None if self._exit is None else self._exit.status_code

    def report(self, frame: IpcMessage | bytes | None, exit_info: Mapping[str, Any] | None) -> bool:
        """What the host's reader got for this worker: a frame it sent and/or its end (a
        ``reason``/``code``/``signal`` object, after its last frame); True when it ended."""
        if frame is not None:
            self.hosted.feed(frame)
        if exit_info is None:
            return False
        self.ended(WorkerExit(exit_info["reason"], exit_info.get("code"), exit_info.get("signal")))
        return True

    def ended(self, exit_info: WorkerExit) -> None:
        """The host reported the end of this worker (or the host itself went away)."""
        if self._exit is None:
            self._exit = exit_info
            self.hosted.feed(None)
            self._exited.set()

    async def wait(self) -> WorkerExit:
        await self._exited.wait()
        assert self._exit is not None
        return self._exit

    def kill(self) -> None:
        if self._exit is None:
            self.hosted.kill()


class Spawner(abc.ABC):
    """Starts agent processes for the orchestrator."""

    @abc.abstractmethod
    async def spawn(self, request: SpawnRequest) -> AgentHandle:
        """Start the process for ``request`` and return its handle (before it is ready)."""

    def release(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """The orchestrator stopped: free what only speeds up spawns (the fork server's
        template); a later :meth:`spawn` starts it again."""


def child_entry(target: ChildTarget, conn: Connection, argv: list[str]) -> None:
    """First code of every agent process: a clean signal mask, SIGINT ignored, then ``target``.

    SIGINT is set to ignored *before* the mask is cleared, so a Ctrl-C that arrived while the
    child was starting (pending, blocked) is discarded instead of killing it: Ctrl-C in a
    terminal reaches the whole process group, and the orchestrator decides what stops."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    target(conn, argv)


class _ProcessHandle(AgentHandle):
    def __init__(self, request: SpawnRequest, transport: PipeTransport, process: Any) -> None:
        super().__init__(request, transport)
        self._process = process
        self._exited = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._watching = False
        self._killed = False
        self._watch()

    def _watch(self) -> None:
        sentinel = self._process.sentinel
        try:
            self._loop.add_reader(sentinel, self._on_sentinel)
            self._watching = True
        except (OSError, ValueError):  # already gone
            self._on_sentinel()

    def _on_sentinel(self) -> None:
        if self._watching:
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                self._loop.remove_reader(self._process.sentinel)
            self._watching = False
        self._process.join(0)  # reap; returns immediately, the sentinel says it exited
        self._exited.set()

    @property
    def pid(self) -> int | None:
        pid: int | None = self._process.pid
        return pid

    @property
    def exitcode(self) -> int | None:
        if not self._exited.is_set():
            return None
        self._process.join(0)
        code: int | None = self._process.exitcode
        return code

    async def wait(self) -> WorkerExit:
        await self._exited.wait()
        # The sentinel closes when the child's files do, a moment before it can be reaped.
        for _ in range(2000):
            if self._process.exitcode is not None:
                break
            self._process.join(0)
            await asyncio.sleep(0.001)
        code = self._process.exitcode
        return WorkerExit.from_exitcode(
            int(code) if code is not None else None, killed=self._killed
        )

    def kill(self) -> None:
        pid = self._process.pid
        if pid is not None and self._process.exitcode is None:
            self._killed = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


class ProcessSpawner(Spawner):
    """Starts real agent processes: agents forked from the fork server's template where it is
    available (:mod:`goondan.swarm.forkserver`; ``fork_server=False`` or
    ``GOONDAN_FORK_SERVER=0`` turns it off), otherwise and for connectors with the ``spawn``
    start method."""

    def __init__(
        self,
        bundle_dir: Path,
        *,
        state_root: Path,
        swarm: str | None = None,
        log_dir: Path | None = None,
        target: ChildTarget | None = None,
        extra_args: Sequence[str] = (),
        targets: Mapping[str, ChildTarget] | None = None,
        fork_server: bool | None = None,
        store_url: str | None = None,
    ) -> None:
        self.bundle_dir = Path(bundle_dir)
        self.state_root = Path(state_root)
        # A store URL (PostgreSQL, may hold a password): sent to the agents through the spawn
        # pipe with their arguments, never on a command line (docs/orchestrator.md "The store").
        self.store_url = store_url
        self.swarm = swarm
        self.log_dir = log_dir
        self.extra_args = list(extra_args)
        # ``target`` replaces the agent entry (tests); ``targets`` any kind's.
        self._targets: dict[str, ChildTarget] = dict(targets or {})
        if target is not None:
            self._targets.setdefault("agent", target)
        self._context = multiprocessing.get_context("spawn")
        self._fork_server: ForkServer | None = None
        if fork_server is not False:
            from goondan.swarm.forktemplate import fork_server_enabled

            if fork_server_enabled(os.environ):
                from goondan.swarm.forkserver import ForkServer

                self._fork_server = ForkServer()

    @property
    def fork_server(self) -> ForkServer | None:
        """The fork server agent processes are forked from (``None``: they are spawned)."""
        return self._fork_server

    def close(self) -> None:
        """Stop the fork server's template process, if any (started processes keep running)."""
        if self._fork_server is not None:
            self._fork_server.close()

    def release(self) -> None:
        """Stop the fork server's template (see :meth:`Spawner.release`)."""
        self.close()

    def __repr__(self) -> str:
        return f"<ProcessSpawner bundle={str(self.bundle_dir)!r} swarm={self.swarm!r}>"

    def argv(self, request: SpawnRequest) -> list[str]:
        """The child's command-line arguments: agents get ``--bundle-dir --agent-name
        --instance-key``, connectors ``--bundle-dir --connection-name --connector-name``; both
        get the state root, Swarm and log options."""
        if request.kind == "connector":
            argv = [
                "--bundle-dir", str(self.bundle_dir),
                "--connection-name", request.agent_name,
                "--connector-name", request.instance_key,
                "--state-root", str(self.state_root),
            ]
            if self.swarm:
                argv += ["--swarm", self.swarm]
            if self.log_dir is not None:
                argv += ["--log-dir", str(self.log_dir), "--process-name", request.process_name]
            return argv
        argv = [
            "--bundle-dir", str(self.bundle_dir),
            "--agent-name", request.agent_name,
            "--instance-key", request.instance_key,
            "--state-root", str(self.state_root),
        ]
        if self.swarm:
            argv += ["--swarm", self.swarm]
        if request.workdir:
            argv += ["--workdir", request.workdir]
        if self.log_dir is not None:
            argv += ["--log-dir", str(self.log_dir), "--process-name", request.process_name]
        if self.store_url is not None:
            argv += ["--store", self.store_url]
        return argv + self.extra_args

    async def spawn(self, request: SpawnRequest) -> AgentHandle:
        """Start ``python`` (spawn) running ``target(conn, argv)``; returns once started."""
        target = self._targets.get(request.kind) or resolve_worker_entry(request.kind)
        if request.kind == "agent" and self._fork_server is not None:
            forked = await self._fork_server.spawn(request, target, self.argv(request))
            if forked is not None:
                return forked
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=child_entry,
            args=(target, child_conn, self.argv(request)),
            name=f"goondan-{request.kind}:{request.process_name}",
            daemon=False,
        )
        # start() writes the preparation data synchronously; keep it off the event loop.
        await asyncio.to_thread(start_process, process)
        child_conn.close()
        return _ProcessHandle(request, PipeTransport(parent_conn), process)


WorkerFactory = Callable[[SpawnRequest, Transport], Awaitable[int | None]]


class _TaskHandle(AgentHandle):
    def __init__(
        self, request: SpawnRequest, transport: Transport, task: asyncio.Task[int | None]
    ) -> None:
        super().__init__(request, transport)
        self._task = task
        self._killed = False

    @property
    def pid(self) -> int | None:
        return None

    @property
    def exitcode(self) -> int | None:
        if not self._task.done():
            return None
        if self._killed or self._task.cancelled():
            return -signal.SIGKILL
        if self._task.exception() is not None:
            return 1
        return int(self._task.result() or 0)

    async def wait(self) -> WorkerExit:
        # Neither raises the worker's error nor cancels it; a cancellation of ours propagates.
        await asyncio.wait([self._task])
        if self._killed or self._task.cancelled():
            return WorkerExit("killed", None, signal.SIGKILL)
        if self._task.exception() is not None:
            return WorkerExit("failed", 1, None)
        return WorkerExit("exited", int(self._task.result() or 0), None)

    def kill(self) -> None:
        if not self._task.done():
            self._killed = True
            self._task.cancel()
            # The dead worker's end must look closed to the orchestrator, like a dead pipe.
            asyncio.get_running_loop().create_task(self.transport.aclose())


class InProcessSpawner(Spawner):
    """Runs ``worker(request, transport)`` as a task per instance (same loop, no processes)."""

    def __init__(self, worker: WorkerFactory) -> None:
        self._worker = worker
        self.spawned: list[SpawnRequest] = []

    async def spawn(self, request: SpawnRequest) -> AgentHandle:
        """Create a transport pair and start the worker on the child end."""
        parent, child = InProcessTransport.pair(request.process_name)
        self.spawned.append(request)

        async def run() -> int | None:
            try:
                return await self._worker(request, child)
            except Exception:
                # A real process would print its traceback to its stderr log; keep the cause.
                _log.exception("in-process agent %s failed", request.process_name)
                raise
            finally:
                await child.aclose()

        task = asyncio.get_running_loop().create_task(run(), name=f"agent:{request.process_name}")
        return _TaskHandle(request, parent, task)
