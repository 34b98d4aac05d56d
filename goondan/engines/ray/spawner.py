"""The driver side of the Ray engine: :class:`RaySpawner` (docs/scaling.md).

``RaySpawner`` is a :class:`~goondan.swarm.spawner.Spawner`: the orchestrator, its supervisor,
request matching, cycle detection, cancellation and shutdown are unchanged; only where a worker
runs differs. On first use it connects to Ray (``address``: ``None`` starts a local Ray,
``auto`` joins the running cluster, ``ray://HOST:PORT`` a remote one), creates ``hosts`` named
host actors (:class:`~goondan.engines.ray.host.AgentHost`, ``max_restarts=-1``, spread over the
alive nodes with *soft* node affinity so a host fails over when its node dies) and, on the
JSONL state root, checks that every host sees the driver's state root. With a PostgreSQL store
(``store_url``, ``goondan run --store``) there is nothing to check: the hosts open their
instances in the store, and no filesystem needs to be shared.

An agent instance goes to host ``stable_hash(agent, instanceKey) % hosts`` — the same host for
the whole run, so one writer per instance on top of the instance lock. Its handle's transport
sends JSON frames through one sender per host (frames queued while a ``deliver`` call is in
flight go together in the next one, in order) and receives them from one long poll per host.

Connectors run in one more host actor, the *connector host*, created on the first connector
spawn and pinned to the driver's node: a connector that listens (``webhook``) binds the
configured host and port on the machine where ``goondan run`` was started, as on the local
engine. Its control messages (``emit``, ``answer``, ``ready`` …) cross the engine boundary
as the same JSON frames; the orchestrator stays the only writer of every inbox.

Starting a local Ray takes seconds: :attr:`RaySpawner.progress` (``goondan run`` prints it on
stderr) says ``starting Ray…`` and when it is ready. Ray's own log records go to
``ray.driver.log`` in the swarm's log folder, not to the terminal, and :meth:`RaySpawner.aclose`
shuts a Ray it started down with every process of it (none outlives ``goondan stop``).

Workers see the driver's environment (:func:`forwarded_env`: without the variables that
describe the driver's own machine and process), as a local child process inherits it: model
keys and connector secrets come from there. The store URL travels the same way (an argument of
each ``open`` call), never in a worker's arguments, a log line or an actor's options.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from goondan.engines.ray import require_ray
from goondan.engines.ray.host import MARKER_NAME, AgentHost
from goondan.errors import ConfigError, IpcError
from goondan.ipc.protocol import IpcMessage, encode
from goondan.storage.url import redact
from goondan.swarm.hosting import forwarded_env, host_index
from goondan.swarm.spawner import (
    AgentHandle,
    HostedHandle,
    HostedTransport,
    ProcessSpawner,
    Spawner,
    SpawnRequest,
    WorkerExit,
)

__all__ = ["CONNECTOR_HOST", "RaySpawner", "forwarded_env", "host_index"]

_log = logging.getLogger("goondan.engines.ray")
NAMESPACE = "goondan"
# How long a host may fail every poll before its instances are declared ended (a cluster that
# is gone); a host Ray restarts answers long before with a new epoch.
UNREACHABLE_GIVE_UP_S = 30.0
CONNECTOR_HOST = "connectors"  # the name suffix of the connector host actor
_DELIVER_BATCH = 256
_NO_SIGNAL_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"

def _closed() -> IpcError:
    return IpcError(
        "the Ray host of this agent instance is gone",
        code="E_IPC_CLOSED",
        suggestion="the orchestrator re-creates the instance on a restarted host; retry",
    )


class _RayTransport(HostedTransport):
    """The driver's end of one hosted instance's channel."""

    def __init__(self, spawner: RaySpawner, host: int, hid: str) -> None:
        super().__init__(hid)
        self._spawner = spawner
        self._host = host

    def _gone(self) -> Exception:
        return _closed()

    async def _deliver(self, message: IpcMessage) -> None:
        frame = encode(message).decode("utf-8")
        if not await self._spawner.sender(self._host).send(self.hid, frame):
            raise _closed()

    async def _send_eof(self) -> None:
        await self._spawner.actor(self._host).eof.options(concurrency_group="io").remote(self.hid)

    def kill(self) -> None:
        self._spawner.actor(self._host).kill.options(concurrency_group="control").remote(self.hid)


class _HostSender:
    """The driver's frames to one host: queued, sent in order, one ``deliver`` call in flight;
    what arrives meanwhile goes in the next call (a burst of events costs a few round trips,
    not one each)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self._queue: list[tuple[str, str, asyncio.Future[bool]]] = []
        self._task: asyncio.Task[None] | None = None
        self.calls = 0

    async def send(self, hid: str, frame: str) -> bool:
        """Queue one frame; True once the host handed it to instance ``hid`` (False: gone)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((hid, frame, future))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:_DELIVER_BATCH], self._queue[_DELIVER_BATCH:]
            self.calls += 1
            flags: list[bool] = []
            try:
                flags = await self.actor.deliver.options(concurrency_group="io").remote(
                    [[hid, frame] for hid, frame, _ in batch])
            except Exception:  # the host died or restarted: those channels are gone
                flags = []
            finally:  # also when cancelled: nobody waits forever for a frame's fate
                for index, (_, _, future) in enumerate(batch):
                    if not future.done():
                        future.set_result(bool(flags[index]) if index < len(flags) else False)

    def cancel(self) -> None:
        """Stop sending (the spawner closes): waiting senders get False."""
        if self._task is not None:
            self._task.cancel()
        for _, _, future in self._queue:
            if not future.done():
                future.set_result(False)
        self._queue = []


class _RayHandle(HostedHandle):
    def __init__(self, request: SpawnRequest, transport: _RayTransport) -> None:
        super().__init__(request, transport)
        self.ray_transport = transport
        self.epoch: str | None = None  # the host epoch it was opened on (None while opening)

    @property
    def pid(self) -> int | None:
        return None


class RaySpawner(Spawner):
    """Runs agent instances in Ray host actors (see the module docstring)."""

    def __init__(
        self, bundle_dir: Path, *, state_root: Path, swarm: str | None = None,
        log_dir: Path | None = None, hosts: int | None = None, address: str | None = None,
        name_prefix: str | None = None, init_options: dict[str, Any] | None = None,
        store_url: str | None = None,
    ) -> None:
        self._ray = require_ray()
        self.state_root = Path(state_root).resolve()
        # A PostgreSQL URL (may hold a password): the hosts' instances live there; None: the
        # JSONL state root, which every node must then share (docs/scaling.md).
        self.store_url = store_url
        self.local = ProcessSpawner(
            bundle_dir, state_root=self.state_root, swarm=swarm, log_dir=log_dir
        )
        self.hosts = hosts
        self.address = address
        self.name_prefix = name_prefix or f"goondan-{uuid.uuid4().hex[:8]}"
        self.init_options = dict(init_options or {})
        self._actors: list[Any] = []  # the agent hosts, then the connector host once created
        self._senders: list[_HostSender] = []
        self.placement: list[str | None] = []  # the node each host was first placed on (soft)
        self._epochs: list[str | None] = []
        self._dead_epochs: list[set[str]] = []  # epochs of hosts that restarted since
        self._unreachable_since: list[float | None] = []
        self._handles: dict[str, _RayHandle] = {}
        self._by_host: list[set[str]] = []
        self._pumps: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()
        self._started = False
        self._marker: tuple[Path, str] | None = None
        self._remote_cls: Any = None
        self.connector_host: int | None = None  # index of the connector host in the actor list
        self.log_dir = log_dir
        self.progress: Callable[[str], None] | None = None  # start-up progress for the user
        self._owns_ray = False  # this spawner called ray.init: aclose shuts Ray down
        self._ray_log: logging.Handler | None = None

    def __repr__(self) -> str:
        return (
            f"<RaySpawner hosts={self.hosts} address={self.address!r} prefix={self.name_prefix!r}>"
        )

    def actor(self, index: int) -> Any:
        """The Ray actor handle of host ``index``."""
        return self._actors[index]

    def sender(self, index: int) -> _HostSender:
        """The frame sender of host ``index``."""
        return self._senders[index]

    async def start(self) -> None:
        """Connect to Ray, create the host actors and check the shared state root. Idempotent."""
        async with self._lock:
            if not self._started:
                await self._start()
                self._started = True

    async def _start(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            self._ray_logs_to_file()
            where = "a local Ray" if self.address is None else f"Ray at {self.address}"
            self._say(f"starting {where}…" if self.address is None else f"connecting to {where}…")
            began = time.monotonic()
            options = {"configure_logging": False, **self.init_options}
            await asyncio.to_thread(_init_ray, ray, address=self.address, namespace=NAMESPACE,
                                    log_to_driver=False, **options)
            self._ray_logs_to_file()  # ray.init(configure_logging=False) cleared the "ray" logger's
            self._owns_ray = True
            self._say(f"{where} is ready ({time.monotonic() - began:.1f} s)")
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if self.hosts is None:
            self.hosts = max(1, int(sum(n.get("Resources", {}).get("CPU", 1) for n in nodes)))
        if self.store_url is None:  # the JSONL state root: every host must see it
            token = uuid.uuid4().hex
            marker = self.state_root / "runtime" / f"{self.name_prefix}.{MARKER_NAME}"
            await asyncio.to_thread(_write_marker, marker, token)
            self._marker = (marker, token)
        first = len(self._actors)
        for index in range(self.hosts):
            node = nodes[index % len(nodes)]["NodeID"] if nodes else None
            self._create_host(str(index), node)
        await self._verify(range(first, len(self._actors)))

    def _say(self, text: str) -> None:
        _log.info("%s", text)
        if self.progress is not None:
            self.progress(text)

    def _ray_logs_to_file(self) -> None:
        """Ray's Python log records (``Started a local Ray instance``, its warnings) go to
        ``ray.driver.log`` in the log folder instead of the terminal: the handler is put on the
        ``ray`` logger and on ``ray._private``, whose records (most of them) it keeps also while
        ``ray.init(configure_logging=False)`` has cleared the ``ray`` logger's handlers."""
        if self._ray_log is None:
            if self.log_dir is not None:
                Path(self.log_dir).mkdir(parents=True, exist_ok=True)
                self._ray_log = logging.FileHandler(
                    Path(self.log_dir) / "ray.driver.log", encoding="utf-8"
                )
                self._ray_log.setFormatter(
                    logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
                )
            else:
                self._ray_log = logging.NullHandler()
        for name in ("ray", "ray._private"):
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.addHandler(self._ray_log)
            logger.propagate = False

    def _create_host(self, suffix: str, node: str | None, *, soft: bool = True) -> int:
        """Create (or find, after a driver restart) host actor ``<prefix>-host-<suffix>`` on
        ``node``: preferred (``soft``: Ray moves it when the node dies) or required."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._remote_cls is None:
            self._remote_cls = self._ray.remote(
                concurrency_groups={"io": 1, "poll": 1, "control": 8}
            )(AgentHost)
        options: dict[str, Any] = {
            "name": f"{self.name_prefix}-host-{suffix}", "namespace": NAMESPACE,
            "max_restarts": -1, "max_task_retries": 0, "num_cpus": 0, "lifetime": None,
            "get_if_exists": True,
        }
        if node is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node, soft=soft)
        actor = self._remote_cls.options(**options).remote(f"{self.name_prefix}-{suffix}")
        self.placement.append(node)
        self._actors.append(actor)
        self._senders.append(_HostSender(actor))
        self._by_host.append(set())
        self._epochs.append(None)
        self._dead_epochs.append(set())
        self._unreachable_since.append(None)
        return len(self._actors) - 1

    async def _verify(self, indices: range) -> None:
        """Every new host sees the state root's marker (a PostgreSQL store: every host answers);
        then its poll starts."""
        if self._marker is None:
            checks = await asyncio.gather(*(
                self._actors[i].info.options(concurrency_group="control").remote()
                for i in indices))
        else:
            marker, token = self._marker
            checks = await asyncio.gather(*(
                self._actors[i].verify.options(concurrency_group="control").remote(
                    str(marker), token)
                for i in indices))
        for index, check in zip(indices, checks, strict=True):
            if not check.get("ok", True):
                raise ConfigError(
                    f"Ray host {index} does not see the state root {self.state_root} "
                    f"(workspace marker {check['path']} missing or different)",
                    code="E_ENGINE_STATE_ROOT",
                    suggestion="put the state root on a filesystem every Ray node mounts at the "
                               "same path (--state-root / GOONDAN_STATE_ROOT), or run on a "
                               "PostgreSQL store (--store postgresql://…); see docs/scaling.md",
                )
            self._epochs[index] = check["epoch"]
        loop = asyncio.get_running_loop()
        self._pumps += [loop.create_task(self._pump(i), name=f"ray-host-{i}") for i in indices]

    async def _connector_index(self) -> int:
        """The connector host, created on first use on the driver's node (module docstring)."""
        await self.start()
        async with self._lock:
            if self.connector_host is None:
                try:
                    node: str | None = self._ray.get_runtime_context().get_node_id()
                except Exception:  # a Ray client driver is no node: let Ray place it
                    node = None
                # Required, not preferred: Ray may place a soft-affine actor elsewhere, and a
                # webhook must listen where `goondan run` runs. The orchestrator lives on that
                # node too, so there is nothing to fail over to when it dies.
                index = self._create_host(CONNECTOR_HOST, node, soft=node is None)
                await self._verify(range(index, index + 1))
                self.connector_host = index
            return self.connector_host

    async def spawn(self, request: SpawnRequest) -> AgentHandle:
        """Open ``request``'s worker on its host: an agent instance on the host of its stable
        hash, a connector on the connector host."""
        if request.kind == "connector":
            index = await self._connector_index()
        else:
            await self.start()
            assert self.hosts is not None
            index = host_index(request.agent_name, request.instance_key, self.hosts)
        hid = f"{request.process_name}#{uuid.uuid4().hex[:8]}"
        handle = _RayHandle(request, _RayTransport(self, index, hid))
        self._handles[hid] = handle
        self._by_host[index].add(hid)
        argv = self.local.argv(request)
        try:
            epoch = await self._actors[index].open.options(concurrency_group="control").remote(
                hid, argv, request.kind, forwarded_env(os.environ),
                self.store_url if request.kind == "agent" else None)
        except Exception as exc:
            self._forget(hid)
            raise IpcError(
                f"cannot open {request.process_name} on Ray host {index}: "
                f"{redact(str(exc), self.store_url)}",
                code="E_IPC_CLOSED",
                suggestion="check the Ray cluster ('ray status')",
            ) from exc
        handle.epoch = epoch
        if epoch in self._dead_epochs[index]:  # opened on the host just before it went away
            handle.ended(WorkerExit("signalled", None, 9))
            self._forget(hid)
        elif epoch != self._epochs[index]:
            self._host_restarted(index, epoch, keep=hid)
        return handle

    def _forget(self, hid: str) -> None:
        handle = self._handles.pop(hid, None)
        if handle is not None:
            self._by_host[handle.ray_transport._host].discard(hid)

    def _host_restarted(self, index: int, epoch: str | None, *, keep: str | None = None) -> None:
        """Host ``index`` restarted as ``epoch`` (``None``: it stayed unreachable too long): the
        workers opened on its earlier epochs ended. Workers opened on ``epoch`` itself, and
        those whose open is still in flight (``spawn`` checks the epoch it gets back), live on:
        declaring them ended would make the orchestrator open a second copy of an instance the
        host still runs."""
        old = self._epochs[index]
        if epoch is not None:
            if old is not None and old != epoch:
                self._dead_epochs[index].add(old)
            self._epochs[index] = epoch
        for hid in list(self._by_host[index]):
            handle = self._handles.get(hid)
            if hid == keep or (
                handle is not None and (handle.epoch is None or handle.epoch == epoch)
            ):
                continue
            if handle is not None:
                handle.ended(WorkerExit("signalled", None, 9))
            self._forget(hid)

    async def _pump(self, index: int) -> None:
        try:
            await self._poll(index)
        except asyncio.CancelledError:
            self._unheard(index)
            raise

    def _unheard(self, index: int) -> None:
        """The poll of host ``index`` was cancelled (``asyncio.run`` cancels every task at its
        end): nobody hears its workers end any more, so a stop waiting for them would wait
        forever. They are killed on the host and end here."""
        for hid in list(self._by_host[index] if index < len(self._by_host) else ()):
            handle = self._handles.get(hid)
            if handle is not None:
                with contextlib.suppress(Exception):  # Ray may be going away too
                    handle.kill()
                handle.ended(WorkerExit("signalled", None, 9))
            self._forget(hid)

    async def _poll(self, index: int) -> None:
        actor = self._actors[index]
        while True:
            try:
                answer = await actor.poll.options(concurrency_group="poll").remote()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A failed poll is not a lost host: a busy host can fail one and still run its
                # instances. They end when the host answers with a new epoch (Ray restarted it)
                # or after UNREACHABLE_GIVE_UP_S without an answer.
                now = time.monotonic()
                since = self._unreachable_since[index]
                if since is None:
                    self._unreachable_since[index] = since = now
                    _log.warning("Ray host %d unreachable (%s)", index, type(exc).__name__)
                if now - since > UNREACHABLE_GIVE_UP_S and self._by_host[index]:
                    _log.warning(
                        "Ray host %d unreachable for %.0f s; its instances ended",
                        index,
                        now - since,
                    )
                    self._host_restarted(index, None)
                await asyncio.sleep(0.2)  # the actor restarts elsewhere; poll it again then
                continue
            self._unreachable_since[index] = None
            if answer["epoch"] != self._epochs[index]:
                self._host_restarted(index, answer["epoch"])
            for hid, frame, exit_info in answer["entries"]:
                handle = self._handles.get(hid)
                if handle is None:
                    continue
                if handle.report(None if frame is None else frame.encode("utf-8"), exit_info):
                    self._forget(hid)

    async def host_info(self) -> list[dict[str, Any]]:
        """Each host's epoch, pid and instance count (tests, ``scripts/bench_engines.py``)."""
        refs = [a.info.options(concurrency_group="control").remote() for a in self._actors]
        return list(await asyncio.gather(*refs))

    async def aclose(self) -> None:
        """Stop polling and end the host actors (after the orchestrator stopped its workers)."""
        for sender in self._senders:
            sender.cancel()
        for task in self._pumps:
            task.cancel()
        for task in self._pumps:
            with contextlib.suppress(BaseException):
                await task
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        self._pumps, self._actors, self._senders = [], [], []
        self._by_host, self._epochs, self.placement = [], [], []
        self._dead_epochs, self._unreachable_since = [], []
        self.connector_host = None
        self._started = False
        if self._owns_ray:  # a Ray this spawner started: every process of it ends now
            self._owns_ray = False
            await asyncio.to_thread(_shutdown_ray, self._ray)


def _init_ray(ray: Any, **options: Any) -> None:
    """``ray.init`` without Ray's failure signal handler in this process: it would take over
    SIGTERM — by which ``goondan stop`` stops the orchestrator — and print a stack dump on the
    terminal for it. Ray reads its ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER`` when it is imported,
    so its constant is set, only while this process connects (Ray's own processes keep theirs)."""
    try:
        from ray._private import ray_constants
    except ImportError:  # another layout: Ray's default
        ray.init(**options)
        return
    saved = getattr(ray_constants, _NO_SIGNAL_HANDLER, None)
    setattr(ray_constants, _NO_SIGNAL_HANDLER, True)
    try:
        ray.init(**options)
    finally:
        setattr(ray_constants, _NO_SIGNAL_HANDLER, saved)


def _shutdown_ray(ray: Any) -> None:
    """Disconnect; a local Ray that ``ray.init`` started stops with all its processes (raylet,
    GCS, dashboard and runtime-env agents), waited for."""
    try:
        ray.shutdown(wait_for_processes=True)
    except TypeError:  # a Ray before 2.50 has no wait_for_processes
        ray.shutdown()


def _write_marker(path: Path, token: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"token": token}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
