"""The fork server: agent processes forked from a pre-imported template (docs/scaling.md).

:class:`ForkServer` is used by :class:`~goondan.swarm.spawner.ProcessSpawner` for agent
workers when :func:`fork_server_enabled` (Linux with ``pidfd_open``, unless
``GOONDAN_FORK_SERVER=0``). It starts the template (:mod:`goondan.swarm.forktemplate`) at its
first spawn, or takes the one ``goondan run`` started early, sends it one request at a time
over the control socket and builds a handle for the forked pid. The forked process is the
template's child, not the orchestrator's: the template reaps it and reports its exit code, which
the handle returns as a :class:`~goondan.swarm.spawner.WorkerExit` exactly as for a spawned
child; ``kill()`` sends SIGKILL to the pid.

Falling back to ``spawn`` (``spawn`` returns ``None`` and the spawner starts the child the usual
way): the template could not start or never became ready (then for the rest of this spawner's
life), it refused or failed one fork (that instance only), or the entry lives in ``__main__``
(a fresh interpreter re-imports the parent's main module; the template cannot). A template that
dies after it was ready is started again at the next spawn; the instances it had forked keep
running, and their exits are then observed through a ``pidfd`` (their exit code is lost with the
template: they end as ``signalled`` without a signal number, i.e. as a crash).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import sys
from typing import Any

from goondan.ipc.channel import PipeTransport
from goondan.swarm.forktemplate import fork_server_enabled, start_template, take_early
from goondan.swarm.spawner import AgentHandle, SpawnRequest, WorkerExit

__all__ = ["ForkServer", "fork_server_enabled"]

_log = logging.getLogger("goondan.swarm.forkserver")

READY_TIMEOUT_S = 120.0  # imports on a loaded machine; a template slower than this is broken
FORK_TIMEOUT_S = 60.0  # one fork, including a first load of the bundle in the template


class _ForkedHandle(AgentHandle):
    """A process forked by the template; its exit code comes from the template's report."""

    def __init__(self, request: SpawnRequest, transport: PipeTransport) -> None:
        super().__init__(request, transport)
        self._pid: int | None = None
        self._code: int | None = None
        self._ended = asyncio.Event()
        self._killed = False
        self._pidfd: int | None = None
        self._watch_loop: Any = None

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def exitcode(self) -> int | None:
        return self._code if self._ended.is_set() else None

    def ended(self, code: int | None) -> None:
        """The process ended with ``code`` (``None``: unknown, the template is gone)."""
        self._unwatch()
        if not self._ended.is_set():
            self._code = code
            self._ended.set()

    async def wait(self) -> WorkerExit:
        await self._ended.wait()
        return WorkerExit.from_exitcode(self._code, killed=self._killed)

    def kill(self) -> None:
        if self._pid is not None and not self._ended.is_set():
            self._killed = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._pid, signal.SIGKILL)

    def orphaned(self, loop: asyncio.AbstractEventLoop) -> None:
        """The template died: watch the process through a pidfd (its exit code is lost)."""
        if self._ended.is_set() or self._pid is None or self._pidfd is not None:
            return
        try:
            fd = os.pidfd_open(self._pid)
        except OSError:  # already gone (and reaped by init)
            self.ended(None)
            return
        try:
            loop.add_reader(fd, self.ended, None)
        except RuntimeError:  # the loop is closed: nobody waits for it any more
            os.close(fd)
            return
        self._pidfd, self._watch_loop = fd, loop

    def _unwatch(self) -> None:
        fd, self._pidfd = self._pidfd, None
        if fd is not None:
            with contextlib.suppress(Exception):
                self._watch_loop.remove_reader(fd)
            os.close(fd)


class ForkServer:
    """Forks agent processes from one template process (see the module docstring)."""

    def __init__(self) -> None:
        self._process: Any = None
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._ready: asyncio.Future[bool] | None = None
        self._waiting: tuple[_ForkedHandle, asyncio.Future[str | None]] | None = None
        self._handles: dict[int, _ForkedHandle] = {}
        self.broken = False  # the template could not start: spawn from now on
        self.starts = 0

    def __repr__(self) -> str:
        pid = getattr(self._process, "pid", None)
        return f"<ForkServer template={pid} live={len(self._handles)} broken={self.broken}>"

    @property
    def template_pid(self) -> int | None:
        """The running template's pid (``None`` when there is none)."""
        return getattr(self._process, "pid", None) if self._sock is not None else None

    async def spawn(
        self, request: SpawnRequest, target: Any, argv: list[str]
    ) -> AgentHandle | None:
        """Fork ``target(conn, argv)`` for ``request``; ``None``: spawn it instead."""
        if self.broken or getattr(target, "__module__", "__main__") == "__main__":
            return None
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._rebind(loop)
        assert self._lock is not None
        async with self._lock:
            for _ in range(2):  # a template found dead is started again once
                if not await self._ensure_template():
                    return None
                handle = await self._fork(request, target, argv)
                if handle is not None or self._sock is not None:
                    return handle
            return None

    def _rebind(self, loop: asyncio.AbstractEventLoop) -> None:
        """First use, or a new event loop (the old one's handles are gone with it)."""
        if self._sock is not None and self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._sock.fileno())
            loop.add_reader(self._sock.fileno(), self._on_readable)
        self._loop = loop
        self._lock = asyncio.Lock()
        self._handles.clear()
        self._waiting = None
        if self._ready is not None and not self._ready.done():
            self._stop_template()  # its ready report belonged to the old loop

    async def _ensure_template(self) -> bool:
        if self._sock is None:
            early = take_early() if self.starts == 0 else None
            try:
                self._process, self._sock = early or start_template()
            except (OSError, ValueError) as err:
                return self._give_up(f"cannot start the template: {err}")
            self.starts += 1
            self._sock.setblocking(False)
            assert self._loop is not None
            self._ready = self._loop.create_future()
            self._loop.add_reader(self._sock.fileno(), self._on_readable)
        assert self._ready is not None
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                ok = await asyncio.shield(self._ready)
        except TimeoutError:
            ok = False
        if not ok:
            self._stop_template()
            return self._give_up("the template did not start")
        return True

    def _give_up(self, why: str) -> bool:
        _log.warning("fork server unavailable (%s): agent processes are spawned", why)
        self.broken = True
        return False

    async def _fork(
        self, request: SpawnRequest, target: Any, argv: list[str]
    ) -> AgentHandle | None:
        import multiprocessing

        assert self._sock is not None and self._loop is not None
        parent_conn, child_conn = multiprocessing.get_context("spawn").Pipe(duplex=True)
        handle = _ForkedHandle(request, PipeTransport(parent_conn))
        answer: asyncio.Future[str | None] = self._loop.create_future()
        name = f"goondan-{request.kind}:{request.process_name}"
        payload = pickle.dumps(
            (target, argv, dict(os.environ), os.getcwd(), list(sys.path), name)
        )
        self._waiting = (handle, answer)
        try:
            socket.send_fds(self._sock, [payload], [child_conn.fileno()])
            async with asyncio.timeout(FORK_TIMEOUT_S):
                failure = await answer
        except (OSError, TimeoutError) as err:
            failure = f"{type(err).__name__}: {err}"
            self._stop_template()  # in an unknown state: the next spawn starts another
        finally:
            self._waiting = None
            child_conn.close()
        if failure is not None:
            parent_conn.close()
            if self._sock is not None:  # the template refused: this one is spawned
                _log.warning("fork server: cannot fork %s (%s); spawning it",
                             request.process_name, failure)
            return None
        return handle

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        while True:
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._template_gone()
                return
            self._on_record(json.loads(data))

    def _on_record(self, record: list[Any]) -> None:
        kind = record[0]
        if kind == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(True)
        elif kind == "exit":
            handle = self._handles.pop(int(record[1]), None)
            if handle is not None:
                handle.ended(None if record[2] is None else int(record[2]))
        elif self._waiting is not None:
            handle, answer = self._waiting
            if kind == "forked":
                handle._pid = int(record[1])
                self._handles[handle._pid] = handle
                if not answer.done():
                    answer.set_result(None)
            elif not answer.done():
                answer.set_result(str(record[1]))

    def _template_gone(self) -> None:
        """End of file on the control socket: the template exited (or was killed)."""
        was_ready = self._ready is not None and self._ready.done() and self._ready.result()
        self._close_socket()
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(False)
        if self._waiting is not None and not self._waiting[1].done():
            self._waiting[1].set_result("the template exited")
        assert self._loop is not None
        for handle in list(self._handles.values()):
            handle.orphaned(self._loop)
        self._handles.clear()
        if was_ready:
            _log.warning("fork server: the template process exited; starting another")

    def _close_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(sock.fileno())
            sock.close()
        process, self._process = self._process, None
        if process is not None:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                process.join(0)  # reap it if it is gone already

    def _stop_template(self) -> None:
        process = self._process
        self._close_socket()
        if process is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                process.terminate()
        self._ready = None
        for handle in list(self._handles.values()):
            if self._loop is not None:
                handle.orphaned(self._loop)
        self._handles.clear()

    def close(self) -> None:
        """Stop the template (its forked processes keep running)."""
        self._stop_template()

