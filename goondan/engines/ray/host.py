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
orchestrator re-creates them, which re-opens each instance from the store: the shared state
root, or PostgreSQL (``goondan run --store``), which needs no shared filesystem.

What a host does with the frames — opening workers, their FIFO of frames, kills, exits, the
shared bundle — is :class:`goondan.swarm.hosting.InstanceHost`, the code the local engine's
``pooled`` isolation runs in its host processes too; this module is only its Ray transport.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from goondan.ipc.protocol import IpcMessage, decode, encode
from goondan.swarm.hosting import BundleCache, InstanceHost, run_hosted_agent, run_hosted_connector
from goondan.types import JsonObject

__all__ = ["MARKER_NAME", "AgentHost", "BundleCache", "run_hosted_agent", "run_hosted_connector"]

# The workspace marker every host must see under the state root (docs/scaling.md).
MARKER_NAME = "engine-marker.json"
_POLL_BATCH = 512
_POLL_IDLE_S = 1.0
_T = TypeVar("_T")


class AgentHost:
    """Hosts agent instances for the driver's :class:`~goondan.engines.ray.spawner.RaySpawner`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.epoch = uuid.uuid4().hex
        self._outbox: list[list[Any]] = []
        self._host = InstanceHost(self._post)
        # Ray runs each concurrency group of an async actor on its own event loop thread; the
        # hosted instances share one loop of their own, and every method runs its work there.
        self._loop = asyncio.new_event_loop()
        self._ready = asyncio.Event()
        threading.Thread(target=self._loop.run_forever, name="goondan-host", daemon=True).start()

    async def _on_loop(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def __repr__(self) -> str:  # no store URL here: Ray prints actor reprs in its logs
        return (f"<AgentHost {self.name} epoch={self.epoch[:8]} "
                f"instances={len(self._host.hosted)}>")

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
            "instances": len(self._host.hosted),
            "name": self.name,
            "nodeId": ray.get_runtime_context().get_node_id(),
            "bundleLoads": self._host.bundles.loads,
        }

    async def open(self, hid: str, argv: list[str], kind: str = "agent",
                   env: Mapping[str, str] | None = None, store: str | None = None) -> str:
        """Start one worker of ``kind`` (``agent`` or ``connector``) with the arguments of its
        local process and the driver's forwarded environment ``env``; ``store``: the PostgreSQL
        URL of ``goondan run --store`` (an argument of this call like ``env``'s secrets, never
        in ``argv`` or a log); returns the epoch."""
        return await self._on_loop(self._open(hid, argv, kind, dict(env or {}), store))

    def _apply_env(self, env: dict[str, str]) -> None:
        self._host.apply_env(env)

    async def _open(self, hid: str, argv: list[str], kind: str, env: dict[str, str],
                    store: str | None) -> str:
        self._host.open(hid, argv, kind, env, store)
        return self.epoch

    def _post(self, hid: str, message: IpcMessage | None, exit_info: JsonObject | None) -> None:
        frame = None if message is None else encode(message).decode("utf-8")
        self._outbox.append([hid, frame, exit_info])
        self._ready.set()

    async def deliver(self, entries: list[list[str]]) -> list[bool]:
        """Hand frames from the driver to their instances, in order: ``[hid, frame]`` each; one
        flag per entry, False when that instance is gone."""
        return await self._on_loop(self._deliver(entries))

    async def _deliver(self, entries: list[list[str]]) -> list[bool]:
        return [await self._host.deliver(hid, decode(frame.encode("utf-8")))
                for hid, frame in entries]

    async def eof(self, hid: str) -> None:
        """The driver closed its end: the instance drains as on EOF of its pipe."""
        return await self._on_loop(self._host.eof(hid))

    async def kill(self, hid: str) -> None:
        """Stop instance ``hid`` at once (its running turn is not folded, like SIGKILL)."""
        return await self._on_loop(self._kill(hid))

    async def _kill(self, hid: str) -> None:
        self._host.kill(hid)

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
