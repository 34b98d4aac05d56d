"""``policy.isolation: pooled``: many agent instances per local host process (docs/scaling.md).

:class:`PooledSpawner` is a :class:`~goondan.swarm.spawner.Spawner` like
:class:`~goondan.swarm.spawner.ProcessSpawner`; the orchestrator, its supervisor, request matching,
cancellation and shutdown do not change. It starts ``policy.pool.hosts`` host processes (default
one per CPU) with the same start machinery as agent processes (``spawn``,
:func:`~goondan.swarm.spawner.child_entry`), on first use, and puts instance (agent, instanceKey)
on host ``host_index(agent, instanceKey, hosts)`` — the stable hash the Ray engine uses. A host
runs its instances with :class:`~goondan.swarm.hosting.InstanceHost`, the code of a Ray host.

One multiprocessing pipe per host carries the frames of all its instances. Each pipe frame is a
JSON list of entries ``[op, hid, ...]`` (``hid``: the instance's id on its host):

* to the host: ``["open", hid, argv, kind, env]``, ``["f", hid, message]``, ``["eof", hid]``,
  ``["kill", hid]`` — applied in order, so the frames of one instance stay FIFO;
* from the host: ``["f", hid, message]`` and ``["x", hid, exit]`` (an instance's end, after its
  last frame).

A host process that dies (SIGKILL, OOM) ends every instance on it as ``signalled``: the supervisor
respawns them with its usual backoff, the next spawn starts a new host process, and each instance
resumes its interrupted turn from its journal (docs/durable-execution.md). The tool processes of a
dead host are swept like those of a dead agent process. Connectors keep one process each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import multiprocessing
import os
import signal
import sys
import uuid
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from goondan.errors import ConfigError, IpcError
from goondan.ipc.channel import PipeTransport
from goondan.ipc.protocol import IpcMessage, encode
from goondan.swarm.hosting import InstanceFields, InstanceHost, forwarded_env, host_index
from goondan.swarm.procstart import start_process
from goondan.swarm.spawner import (
    AgentHandle,
    HostedHandle,
    HostedTransport,
    ProcessSpawner,
    Spawner,
    SpawnRequest,
    WorkerExit,
    child_entry,
)
from goondan.types import JsonObject, now_iso

__all__ = ["PooledSpawner", "default_hosts", "host_main", "isolation_of"]

_log = logging.getLogger("goondan.swarm.pool")
_DRAIN_S = 30.0  # how long a host whose orchestrator is gone waits for its instances to drain


def isolation_of(swarm: Any, environ: Mapping[str, str]) -> str:
    """``process`` or ``pooled``: the Swarm's ``policy.isolation``, else ``GOONDAN_ISOLATION``,
    else ``process`` (docs/scaling.md "Pooled hosts")."""
    chosen = swarm.isolation or environ.get("GOONDAN_ISOLATION") or "process"
    if chosen not in ("process", "pooled"):
        raise ConfigError(
            f"GOONDAN_ISOLATION is {chosen!r}; expected process or pooled",
            code="E_ENGINE_ISOLATION",
            suggestion="set GOONDAN_ISOLATION=process or pooled, or unset it",
        )
    return str(chosen)


def default_hosts() -> int:
    """One host process per CPU this process may run on."""
    with contextlib.suppress(AttributeError, OSError):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _entry(op: str, hid: str, message: IpcMessage) -> bytes:
    """``[op, hid, message]`` with the message encoded once (protocol.encode's rules)."""
    return b'["' + op.encode() + b'",' + json.dumps(hid).encode() + b"," + encode(message) + b"]"


def _frame(entries: list[bytes]) -> bytes:
    return b"[" + b",".join(entries) + b"]"


def _dumps(entry: list[Any]) -> bytes:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# -- the orchestrator's side ---------------------------------------------------------------------
def _gone(name: str) -> Exception:
    return IpcError(f"the host process of {name} is gone", code="E_IPC_CLOSED",
                    suggestion="the orchestrator re-creates the instance on a new host; retry")


class _Host:
    """One host process as the orchestrator sees it."""

    def __init__(self, index: int, process: Any, pipe: PipeTransport) -> None:
        self.index = index
        self.name = f"pool-{index}"
        self.process = process
        self.pipe = pipe
        self.handles: dict[str, _PooledHandle] = {}
        self.alive = True
        self.started_at = now_iso()
        self.reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        pid: int | None = self.process.pid
        return pid

    async def send(self, entry: bytes) -> None:
        await self.pipe.send_bytes(_frame([entry]))


class _PooledTransport(HostedTransport):
    """The orchestrator's end of one hosted instance's channel."""

    def __init__(self, host: _Host, hid: str) -> None:
        super().__init__(hid)
        self.host = host
        self._kill_task: asyncio.Task[None] | None = None

    def _gone(self) -> Exception:
        return _gone(self.hid)

    async def _deliver(self, message: IpcMessage) -> None:
        if not self.host.alive:
            raise _gone(self.hid)
        await self.host.send(_entry("f", self.hid, message))

    async def _send_eof(self) -> None:
        if self.host.alive:
            await self.host.send(_dumps(["eof", self.hid]))

    def kill(self) -> None:
        if self.host.alive:
            entry = _dumps(["kill", self.hid])
            self._kill_task = asyncio.get_running_loop().create_task(self.host.send(entry))


class _PooledHandle(HostedHandle):
    """An instance on a host process: ``pid`` is the host's, shared with its neighbours."""

    owns_pid = False

    def __init__(self, request: SpawnRequest, transport: _PooledTransport) -> None:
        super().__init__(request, transport)
        self.pooled = transport

    @property
    def host(self) -> str:
        """The name of the host process (``pool-N``)."""
        return self.pooled.host.name

    @property
    def pid(self) -> int | None:
        return self.pooled.host.pid


class PooledSpawner(Spawner):
    """Runs agent instances in ``hosts`` local host processes (see the module docstring)."""

    def __init__(self, bundle_dir: Path, *, state_root: Path, swarm: str | None = None,
                 log_dir: Path | None = None, hosts: int | None = None,
                 store_url: str | None = None) -> None:
        # argv (with ``--store``: it reaches a host over its pipe, never a command line), and
        # connectors (a process each)
        self.local = ProcessSpawner(bundle_dir, state_root=state_root, swarm=swarm,
                                    log_dir=log_dir, store_url=store_url)
        self.log_dir = log_dir
        self.hosts = hosts or default_hosts()
        self._hosts: list[_Host | None] = [None] * self.hosts
        self.starts = [0] * self.hosts  # host processes started per slot (restarts + 1)
        self._locks = [asyncio.Lock() for _ in range(self.hosts)]
        self._context = multiprocessing.get_context("spawn")

    def __repr__(self) -> str:
        return f"<PooledSpawner hosts={self.hosts}>"

    async def spawn(self, request: SpawnRequest) -> AgentHandle:
        """An agent instance opens on the host of its stable hash; a connector gets a process."""
        if request.kind != "agent":
            return await self.local.spawn(request)
        host = await self._host(host_index(request.agent_name, request.instance_key, self.hosts))
        hid = f"{request.process_name}#{uuid.uuid4().hex[:8]}"
        handle = _PooledHandle(request, _PooledTransport(host, hid))
        host.handles[hid] = handle
        try:
            await host.send(_dumps(["open", hid, self.local.argv(request), request.kind,
                                    forwarded_env(os.environ)]))
        except Exception as exc:
            host.handles.pop(hid, None)
            raise _gone(request.process_name) from exc
        return handle

    async def _host(self, index: int) -> _Host:
        """Host ``index``, started (again) when it is not running."""
        async with self._locks[index]:
            host = self._hosts[index]
            if host is not None and host.alive:
                return host
            parent_conn, child_conn = self._context.Pipe(duplex=True)
            argv = [f"pool-{index}"] + ([str(self.log_dir)] if self.log_dir is not None else [])
            process = self._context.Process(target=child_entry,
                                            args=(host_main, child_conn, argv),
                                            name=f"goondan-host:pool-{index}", daemon=False)
            await asyncio.to_thread(start_process, process)
            child_conn.close()
            host = _Host(index, process, PipeTransport(parent_conn))
            self.starts[index] += 1
            host.reader = asyncio.get_running_loop().create_task(self._read(host),
                                                                 name=host.name)
            self._hosts[index] = host
            _log.info("started host %s (pid %s)", host.name, host.pid,
                      extra={"event": "orchestrator.hostStarted", "host": host.name,
                             "childPid": host.pid})
            return host

    async def _read(self, host: _Host) -> None:
        try:
            while True:
                data = await host.pipe.recv_bytes()
                if data is None:
                    break
                for entry in json.loads(data):
                    handle = host.handles.get(entry[1])
                    if handle is None:
                        continue
                    if entry[0] == "f":
                        handle.report(IpcMessage.from_dict(entry[2]), None)
                    elif handle.report(None, entry[2]):
                        host.handles.pop(entry[1], None)
            await self._host_ended(host)
        except asyncio.CancelledError:
            self._unheard(host)
            raise

    def _unheard(self, host: _Host) -> None:
        """The reader was cancelled (``asyncio.run`` cancels every task at its end): nobody
        hears the host's instances end any more, so a stop waiting for them would wait forever.
        The host is killed and its instances end with it."""
        host.alive = False
        if host.process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(host.process.pid, signal.SIGKILL)
        for handle in list(host.handles.values()):
            handle.ended(WorkerExit("signalled", None, 9))
        host.handles.clear()

    async def _host_ended(self, host: _Host) -> None:
        """The host's pipe closed: it exited or died; every instance on it ended with it."""
        host.alive = False
        await asyncio.to_thread(host.process.join, 10.0)
        ended = WorkerExit.from_exitcode(host.process.exitcode)
        with contextlib.suppress(Exception):
            await host.pipe.aclose()
        if not ended.ok:
            _log.warning("host %s (pid %s) ended: %s; its %d instance(s) ended with it",
                         host.name, host.pid, ended.describe(), len(host.handles),
                         extra={"event": "orchestrator.hostEnded", "host": host.name,
                                "childPid": host.pid})
            from goondan.tools.processes import AGENT_PROCESS_ENV, ORCHESTRATOR_ENV
            from goondan.tools.processes import sweep as sweep_tools
            from goondan.workspace.claims import owner_token

            # The tools' processes of a host that could not stop them (those of a dead agent
            # process are swept by the supervisor; an instance's handle does not own the pid).
            await asyncio.to_thread(sweep_tools, {ORCHESTRATOR_ENV: owner_token(),
                                                  AGENT_PROCESS_ENV: str(host.pid)})
        for handle in list(host.handles.values()):
            handle.ended(ended if not ended.ok else WorkerExit("signalled", None, 9))
        host.handles.clear()

    def hosts_status(self) -> list[JsonObject]:
        """One row per host slot: name, pid, start time, restarts and its instances."""
        rows: list[JsonObject] = []
        for index, host in enumerate(self._hosts):
            if host is None:
                continue
            rows.append({
                "host": host.name,
                "pid": host.pid if host.alive else None,
                "status": "running" if host.alive else "exited",
                "startedAt": host.started_at,
                "restarts": max(0, self.starts[index] - 1),
                "instances": sorted(h.request.process_name for h in host.handles.values()),
            })
        return rows

    async def aclose(self) -> None:
        """End the host processes (after the orchestrator stopped its instances): their pipe
        closes, they drain what is left and exit; one still running after 10 s is killed."""
        for host in self._hosts:
            if host is not None and host.alive:
                with contextlib.suppress(Exception):
                    await host.pipe.aclose()
        for host in self._hosts:
            if host is None:
                continue
            await asyncio.to_thread(host.process.join, 10.0)
            if host.process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(host.process.pid, signal.SIGKILL)
                await asyncio.to_thread(host.process.join, 5.0)
            if host.reader is not None:
                host.reader.cancel()
                with contextlib.suppress(BaseException):
                    await host.reader


# -- the host process ------------------------------------------------------------------------------
def host_main(conn: Connection, argv: list[str]) -> None:
    """Entry of a host process: ``argv`` is ``[name]`` or ``[name, log_dir]``."""
    from goondan.ipc.logs import configure_process_logging, redirect_output
    from goondan.tools.processes import enter_agent_process, owner_env, sweep

    parser = argparse.ArgumentParser(prog="goondan-host", add_help=False)
    parser.add_argument("name")
    parser.add_argument("log_dir", nargs="?")
    args = parser.parse_args(argv)
    enter_agent_process()  # the owner markers of every process its instances' tools start
    if args.log_dir:
        redirect_output(Path(args.log_dir), f"host.{args.name}")
    handler = configure_process_logging(host=args.name)
    handler.addFilter(InstanceFields())  # each line names the instance that wrote it
    code = asyncio.run(_serve(conn))
    sweep(owner_env())  # as an agent process does at its exit (docs/tools.md)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


async def _serve(conn: Connection) -> int:
    pipe = PipeTransport(conn)
    outbox: list[bytes] = []
    wake = asyncio.Event()

    def post(hid: str, message: IpcMessage | None, exit_info: JsonObject | None) -> None:
        outbox.append(_entry("f", hid, message) if message is not None
                      else _dumps(["x", hid, exit_info]))
        wake.set()

    async def write() -> None:
        while True:
            await wake.wait()
            wake.clear()
            batch = outbox[:]
            outbox.clear()
            if batch:
                await pipe.send_bytes(_frame(batch))

    host = InstanceHost(post)
    loop = asyncio.get_running_loop()
    writer = loop.create_task(write())
    drains: set[asyncio.Task[None]] = set()

    def drain_all() -> None:  # SIGTERM: every instance drains as on the EOF of its pipe
        for hid in list(host.hosted):
            task = loop.create_task(host.eof(hid))
            drains.add(task)
            task.add_done_callback(drains.discard)

    loop.add_signal_handler(signal.SIGTERM, drain_all)
    while True:
        data = await pipe.recv_bytes()
        if data is None:
            break
        for entry in json.loads(data):
            op, hid = entry[0], entry[1]
            if op == "f":
                await host.deliver(hid, IpcMessage.from_dict(entry[2]))
            elif op == "open":
                host.open(hid, entry[2], entry[3], entry[4])
            elif op == "eof":
                await host.eof(hid)
            elif op == "kill":
                host.kill(hid)
    # The orchestrator is gone: every instance drains as an agent process does on EOF.
    drain_all()
    relays = [h.relay for h in host.hosted.values() if h.relay is not None]
    if relays:
        await asyncio.wait(relays, timeout=_DRAIN_S)
    writer.cancel()
    await pipe.aclose()
    return 0
