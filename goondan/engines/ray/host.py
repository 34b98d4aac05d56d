"""The Ray host actor: many workers in one event loop (docs/scaling.md).

:class:`AgentHost` is a plain class; :mod:`goondan.engines.ray.spawner` turns it into a named
async Ray actor. A hosted worker is of either kind of :data:`~goondan.swarm.spawner.WORKER_ENTRIES`:
an agent instance runs the same :class:`~goondan.swarm.agent_process.AgentWorker` a local agent
process runs, a connector the same :func:`goondan.connectors.process.serve` a local connector
process runs, each on the child end of an :class:`~goondan.ipc.channel.InProcessTransport` pair;
the host keeps the parent end and relays it to the driver as JSON text frames (nothing else
crosses the engine boundary):

* ``deliver(entries)`` / ``eof(hid)`` — the driver's sends, a batch of ``[hid, frame]`` per
  call, in the ``io`` concurrency group of size 1, so frames from the driver are applied in the
  order they were submitted (a FIFO per instance);
* ``poll()`` — a long poll returning ``[hid, frame, exit]`` entries of every hosted instance, an
  instance's exit always after its last frame;
* ``open``, ``kill``, ``verify``, ``info`` — the ``control`` group, answered even while the
  ``io`` group is busy.

Every host carries an ``epoch`` (new on each start): after Ray restarts a host on another node,
its instances are gone, the driver sees a new epoch and reports their workers as ended, and the
orchestrator re-creates them, which re-opens each instance from the shared state root.

A host loads the bundle once for all its instances (:class:`BundleCache`: reloaded when one of
its files changes), where a local agent process loads it at every start: at ~18 ms a load, that
was most of the cost of a new conversation on a host.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from goondan.errors import GoondanError
from goondan.ipc.channel import InProcessTransport
from goondan.ipc.protocol import decode, encode
from goondan.types import JsonObject

__all__ = ["MARKER_NAME", "AgentHost", "BundleCache", "run_hosted_agent", "run_hosted_connector"]

_log = logging.getLogger("goondan.engines.ray")

# The workspace marker every host must see under the state root (docs/scaling.md).
MARKER_NAME = "engine-marker.json"
_POLL_BATCH = 512
_POLL_IDLE_S = 1.0
_T = TypeVar("_T")


def _signature(files: list[Path]) -> tuple[tuple[str, int, int], ...]:
    out = []
    for path in files:
        try:
            st = path.stat()
            out.append((str(path), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(path), -1, -1))
    return tuple(out)


class BundleCache:
    """Loaded bundles by (bundle dir, state root), reused while none of their files changed.

    The files are those ``--watch`` follows (``Bundle.watched_files``); their size and mtime are
    checked before each reuse, so an instance opened after an edit sees the edited bundle, as a
    new local agent process would. One load at a time per key: a burst of new instances on a
    host waits for the first load instead of parsing the same YAML hundreds of times."""

    def __init__(self) -> None:
        self._entries: dict[
            tuple[str, str | None], tuple[Any, tuple[tuple[str, int, int], ...]]
        ] = {}
        self._locks: dict[tuple[str, str | None], asyncio.Lock] = {}
        self.loads = 0

    def __repr__(self) -> str:
        return f"<BundleCache bundles={len(self._entries)} loads={self.loads}>"

    async def get(self, bundle_dir: str, state_root: str | None) -> Any:
        """The bundle at ``bundle_dir`` as ``load_bundle`` returns it (``BundleError`` too)."""
        from goondan.config import load_bundle
        from goondan.workspace.paths import resolve_state_root

        key = (bundle_dir, state_root)
        async with self._locks.setdefault(key, asyncio.Lock()):
            entry = self._entries.get(key)
            if entry is not None:
                bundle, signature = entry
                if await asyncio.to_thread(lambda: _signature(bundle.watched_files())) == signature:
                    return bundle

            def load() -> tuple[Any, tuple[tuple[str, int, int], ...]]:
                loaded = load_bundle(Path(bundle_dir), state_root=resolve_state_root(state_root))
                return loaded, _signature(loaded.watched_files())

            # The signature is taken after the load: an edit racing the load is caught by the
            # ``--watch`` restart that follows it, which opens the instances again.
            bundle, signature = await asyncio.to_thread(load)
            self.loads += 1
            self._entries[key] = (bundle, signature)
            return bundle


async def run_hosted_agent(argv: list[str], transport: InProcessTransport,
                           bundles: BundleCache | None = None) -> int:
    """One agent instance inside a host: what a local agent process's main does."""
    from goondan.ipc.control import StartError
    from goondan.swarm.agent_process import AgentWorker, build_agent_instance, parse_args

    args = parse_args(argv)
    worker = AgentWorker(transport, agent_name=args.agent_name, instance_key=args.instance_key)
    try:
        bundle = None if bundles is None else await bundles.get(args.bundle_dir, args.state_root)
        handler = await build_agent_instance(args, worker, bundle=bundle)
    except GoondanError as err:
        _log.error("agent %s failed to start: [%s] %s", args.agent_name, err.code, err.message)
        await worker.report(StartError(err.code, err.message))
        return 3
    return await worker.serve(handler)


async def run_hosted_connector(argv: list[str], transport: InProcessTransport) -> int:
    """One Connection's connector inside a host: what a local connector process's main does."""
    from goondan.connectors.process import parse_args, serve

    return await serve(transport, parse_args(argv))


class _Hosted:
    def __init__(self, parent: InProcessTransport, task: asyncio.Task[int | None]) -> None:
        self.parent = parent
        self.task = task
        self.killed = False


class AgentHost:
    """Hosts agent instances for the driver's :class:`~goondan.engines.ray.spawner.RaySpawner`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.epoch = uuid.uuid4().hex
        self._hosted: dict[str, _Hosted] = {}
        self._outbox: list[list[Any]] = []
        self._bundles = BundleCache()
        self._env: dict[str, str] = {}
        self._own_env = dict(os.environ)
        # Ray runs each concurrency group of an async actor on its own event loop thread; the
        # hosted instances share one loop of their own, and every method runs its work there.
        self._loop = asyncio.new_event_loop()
        self._ready = asyncio.Event()
        threading.Thread(target=self._loop.run_forever, name="goondan-host", daemon=True).start()

    async def _on_loop(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def __repr__(self) -> str:
        return f"<AgentHost {self.name} epoch={self.epoch[:8]} instances={len(self._hosted)}>"

    async def verify(self, marker: str, token: str) -> JsonObject:
        """Check that this node sees the driver's state root: the marker file under it holds
        ``token``."""
        path = Path(marker)
        try:
            seen = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except OSError:
            seen = ""
        return {"ok": token in seen, "epoch": self.epoch, "pid": os.getpid(), "path": str(path)}

    async def info(self) -> JsonObject:
        """The host's epoch, pid and hosted instance count."""
        import ray

        return {
            "epoch": self.epoch,
            "pid": os.getpid(),
            "instances": len(self._hosted),
            "name": self.name,
            "nodeId": ray.get_runtime_context().get_node_id(),
            "bundleLoads": self._bundles.loads,
        }

    async def open(self, hid: str, argv: list[str], kind: str = "agent",
                   env: Mapping[str, str] | None = None) -> str:
        """Start one worker of ``kind`` (``agent`` or ``connector``) with the arguments of its
        local process and the driver's forwarded environment ``env``; returns the epoch."""
        return await self._on_loop(self._open(hid, argv, kind, dict(env or {})))

    def _apply_env(self, env: dict[str, str]) -> None:
        """Make ``env`` (the driver's, see ``forwarded_env``) this process's environment: what a
        local worker inherits from the orchestrator. A variable forwarded before and not now gets
        the node's own value back, or is removed (``goondan restart`` re-reads the .env files)."""
        for key in set(self._env) - set(env):
            if key in self._own_env:  # the node's own value, overridden while forwarded
                os.environ[key] = self._own_env[key]
            else:
                os.environ.pop(key, None)
        os.environ.update(env)
        self._env = env

    async def _open(self, hid: str, argv: list[str], kind: str, env: dict[str, str]) -> str:
        self._apply_env(env)
        parent, child = InProcessTransport.pair(hid)

        async def run() -> int | None:
            try:
                if kind == "connector":
                    return await run_hosted_connector(argv, child)
                return await run_hosted_agent(argv, child, self._bundles)
            finally:
                await child.aclose()

        task = asyncio.get_running_loop().create_task(run(), name=f"{kind}:{hid}")
        hosted = _Hosted(parent, task)
        self._hosted[hid] = hosted
        asyncio.get_running_loop().create_task(self._relay(hid, hosted))
        return self.epoch

    async def _relay(self, hid: str, hosted: _Hosted) -> None:
        while True:
            message = await hosted.parent.recv()
            if message is None:
                break
            self._post([hid, encode(message).decode("utf-8"), None])
        with contextlib.suppress(BaseException):
            await asyncio.shield(hosted.task)
        exit_info: JsonObject
        if hosted.killed or hosted.task.cancelled():
            exit_info = {"reason": "killed", "signal": 9}
        elif hosted.task.exception() is not None:
            _log.error("hosted agent %s failed", hid, exc_info=hosted.task.exception())
            exit_info = {"reason": "failed", "code": 1}
        else:
            exit_info = {"reason": "exited", "code": int(hosted.task.result() or 0)}
        self._hosted.pop(hid, None)
        self._post([hid, None, exit_info])

    def _post(self, entry: list[Any]) -> None:
        self._outbox.append(entry)
        self._ready.set()

    async def deliver(self, entries: list[list[str]]) -> list[bool]:
        """Hand frames from the driver to their instances, in order: ``[hid, frame]`` each; one
        flag per entry, False when that instance is gone."""
        return await self._on_loop(self._deliver(entries))

    async def _deliver(self, entries: list[list[str]]) -> list[bool]:
        out = []
        for hid, frame in entries:
            hosted = self._hosted.get(hid)
            if hosted is None or hosted.parent.closed:
                out.append(False)
                continue
            try:
                await hosted.parent.send(decode(frame.encode("utf-8")))
            except GoondanError:
                out.append(False)
                continue
            out.append(True)
        return out

    async def eof(self, hid: str) -> None:
        """The driver closed its end: the instance drains as on EOF of its pipe."""
        return await self._on_loop(self._eof(hid))

    async def _eof(self, hid: str) -> None:
        hosted = self._hosted.get(hid)
        if hosted is not None:
            await hosted.parent.aclose()

    async def kill(self, hid: str) -> None:
        """Stop instance ``hid`` at once (its running turn is not folded, like SIGKILL)."""
        return await self._on_loop(self._kill(hid))

    async def _kill(self, hid: str) -> None:
        hosted = self._hosted.get(hid)
        if hosted is not None and not hosted.task.done():
            hosted.killed = True
            hosted.task.cancel()

    async def poll(self) -> JsonObject:
        """Wait (up to about a second) for output of any hosted instance and return up to a
        batch of entries, with the host's epoch."""
        return await self._on_loop(self._poll())

    async def _poll(self) -> JsonObject:
        # An idle poll still answers after _POLL_IDLE_S: the driver learns a restarted host's
        # new epoch (and so which instances ended) even when nothing is running on it.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _POLL_IDLE_S
        while not self._outbox:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                break
        batch, self._outbox = self._outbox[:_POLL_BATCH], self._outbox[_POLL_BATCH:]
        return {"epoch": self.epoch, "entries": batch}
