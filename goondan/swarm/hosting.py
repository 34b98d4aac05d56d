"""One process runs many workers: the host code shared by the pooled local engine and Ray.

A *host* is a process that runs many agent instances (and connectors) in one event loop, where
the local engine's ``process`` isolation gives each its own process (docs/scaling.md). Two
transports carry a host's frames: a multiprocessing pipe per host process for the local engine's
``pooled`` isolation (:mod:`goondan.swarm.pool`), Ray actor calls for the Ray engine
(:mod:`goondan.engines.ray.host`). What a host does with the frames is this module:

* :class:`InstanceHost` opens workers, hands them the frames meant for them (in order: one FIFO
  per instance), kills them, and reports every frame a worker writes and its exit through one
  ``post(hid, message, exit)`` callback — an exit always after the worker's last frame;
* :func:`run_hosted_agent` / :func:`run_hosted_connector` are what the main of a local agent or
  connector process does, on the child end of an :class:`~goondan.ipc.channel.InProcessTransport`
  pair;
* :class:`BundleCache` loads the bundle once for all the instances of a host (reloaded when one of
  its files changes), where a local agent process loads it at every start (~18 ms a load).

An exception in one worker ends that worker (exit ``failed``), never its neighbours.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from goondan.errors import GoondanError
from goondan.ipc.channel import InProcessTransport
from goondan.ipc.protocol import IpcMessage
from goondan.types import JsonObject

__all__ = [
    "BundleCache",
    "InstanceFields",
    "InstanceHost",
    "Post",
    "StoreCache",
    "forwarded_env",
    "host_index",
    "run_hosted_agent",
    "run_hosted_connector",
]

_log = logging.getLogger("goondan.swarm.hosting")

# Variables that describe the driver's machine or process, not the swarm: never forwarded.
_LOCAL_ENV: Final = re.compile(
    r"(PATH|HOME|PWD|OLDPWD|SHLVL|_|USER|LOGNAME|SHELL|MAIL|HOSTNAME|TERM|COLORTERM|DISPLAY"
    r"|TMPDIR|TMP|TEMP|VIRTUAL_ENV|PYTHONPATH|PYTHONHOME|PYTHONSTARTUP|PYTHONEXECUTABLE"
    r"|CUDA_VISIBLE_DEVICES|(LD|DYLD|RAY|SSH|XDG|CONDA|PYENV|OMP|MKL)_.*)"
)

# The log fields of the hosted worker whose code runs (set in its task, inherited by the tasks
# and threads it starts): a host's log lines say which instance wrote them.
_fields: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "goondan_hosted_fields", default=None
)

# post(hid, message, exit): a frame a worker wrote (exit None), or its end (message None).
Post = Callable[[str, IpcMessage | None, JsonObject | None], None]


def forwarded_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The orchestrator's environment as hosted workers see it (docs/scaling.md,
    "Environment"): without the variables that describe its own machine and process."""
    return {k: v for k, v in environ.items() if not _LOCAL_ENV.fullmatch(k)}


def host_index(agent: str, instance_key: str, hosts: int) -> int:
    """The host of (agent, instanceKey): a stable hash, the same in every process and run."""
    digest = hashlib.sha256(f"{agent}\0{instance_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % max(1, hosts)


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
                if await asyncio.to_thread(bundle.watched_signature) == signature:
                    return bundle

            def load() -> tuple[Any, tuple[tuple[str, int, int], ...]]:
                loaded = load_bundle(Path(bundle_dir), state_root=resolve_state_root(state_root))
                return loaded, loaded.watched_signature()

            # The signature is taken after the load: an edit racing the load is caught by the
            # ``--watch`` restart that follows it, which opens the instances again.
            bundle, signature = await asyncio.to_thread(load)
            self.loads += 1
            self._entries[key] = (bundle, signature)
            return bundle


class StoreCache:
    """The stores (PostgreSQL, by URL) of a host's instances, opened once and shared: the locks
    of all its open instances are held by the store's one lock session, and everything else
    (their reads and writes, queues, approvals) uses its small pool — 1 + ≤ 4 connections per
    host, whatever the number of instances (goondan/storage/postgres/locks.py)."""

    def __init__(self) -> None:
        self._stores: dict[str, Any] = {}
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<StoreCache stores={len(self._stores)}>"

    async def get(self, url: str) -> Any:
        """The backend at ``url`` (``E_STORE_UNAVAILABLE`` … as ``open_backend`` raises them);
        parsing registers its password with :mod:`goondan.secrets`, so this process's log
        records mask it."""
        from goondan.storage.backends import open_backend
        from goondan.storage.url import parse_store

        async with self._lock:
            if url not in self._stores:
                location = parse_store(url)
                self._stores[url] = await asyncio.to_thread(open_backend, location)
            return self._stores[url]


async def run_hosted_agent(argv: list[str], transport: InProcessTransport,
                           bundles: BundleCache | None = None, *, store: str | None = None,
                           stores: StoreCache | None = None) -> int:
    """One agent instance inside a host: what a local agent process's main does. ``store``: the
    PostgreSQL URL of ``goondan run --store`` (Ray gives it beside ``argv``, a pooled host's pipe
    as ``--store`` in it), opened once per host in ``stores``; None: the JSONL state root."""
    from goondan.ipc.control import StartError
    from goondan.swarm.agent_process import AgentWorker, build_agent_instance, parse_args

    args = parse_args(argv)
    worker = AgentWorker(transport, agent_name=args.agent_name, instance_key=args.instance_key)
    try:
        bundle = None if bundles is None else await bundles.get(args.bundle_dir, args.state_root)
        store = store or args.store
        if store and args.store_lease:  # failover: the host's sessions are named by the token
            from goondan.swarm.leadership import lease_application_name, parse_lease_arg

            store = lease_application_name(store, parse_lease_arg(args.store_lease)[0])
        storage = None if not store else await (stores or StoreCache()).get(store)
        handler = await build_agent_instance(args, worker, bundle=bundle, storage=storage)
    except GoondanError as err:
        _log.error("agent %s failed to start: [%s] %s", args.agent_name, err.code, err.message)
        await worker.report(StartError(err.code, err.message))
        return 3
    return await worker.serve(handler)


async def run_hosted_connector(argv: list[str], transport: InProcessTransport) -> int:
    """One Connection's connector inside a host: what a local connector process's main does."""
    from goondan.connectors.process import parse_args, serve

    return await serve(transport, parse_args(argv))


class InstanceFields(logging.Filter):
    """Adds ``agent`` and ``instanceKey`` (``connection`` for a connector) of the hosted worker
    that logs to each record (a host's log handler carries it; ``goondan logs -p <agent>.<key>``
    selects by it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _fields.get()
        if fields is not None:
            record.__dict__.update(fields)
        return True


def _worker_fields(argv: list[str], kind: str) -> dict[str, str]:
    """The log fields of a worker from its local process's arguments."""
    opts = dict(zip(argv[::2], argv[1::2], strict=False))
    if kind != "agent":
        return {"connection": opts.get("--connection-name", "")}
    return {"agent": opts.get("--agent-name", ""), "instanceKey": opts.get("--instance-key", "")}


class _Hosted:
    def __init__(self, parent: InProcessTransport, task: asyncio.Task[int | None]) -> None:
        self.parent = parent
        self.task = task
        self.relay: asyncio.Task[None] | None = None
        self.killed = False


class InstanceHost:
    """The workers of one host, in the running event loop (see the module docstring)."""

    def __init__(self, post: Post) -> None:
        self._post = post
        self.hosted: dict[str, _Hosted] = {}
        self.bundles = BundleCache()
        self.stores = StoreCache()
        self._env: dict[str, str] = {}
        self._own_env = dict(os.environ)

    def __repr__(self) -> str:
        return f"<InstanceHost instances={len(self.hosted)} bundleLoads={self.bundles.loads}>"

    def apply_env(self, env: dict[str, str]) -> None:
        """Make ``env`` (the orchestrator's, see :func:`forwarded_env`) this process's
        environment: what a local worker inherits from the orchestrator. A variable forwarded
        before and not now gets the host's own value back, or is removed (``goondan restart``
        re-reads the .env files)."""
        for key in set(self._env) - set(env):
            if key in self._own_env:  # the host's own value, overridden while forwarded
                os.environ[key] = self._own_env[key]
            else:
                os.environ.pop(key, None)
        os.environ.update(env)
        self._env = env

    def open(self, hid: str, argv: list[str], kind: str, env: dict[str, str] | None,
             store: str | None = None) -> None:
        """Start one worker of ``kind`` (``agent`` or ``connector``) with the arguments of its
        local process; ``env``: the orchestrator's forwarded environment (``None``: unchanged);
        ``store``: the PostgreSQL URL an agent keeps its instance in (None: the JSONL state
        root)."""
        if env is not None:
            self.apply_env(env)
        parent, child = InProcessTransport.pair(hid)

        fields = _worker_fields(argv, kind)

        async def run() -> int | None:
            _fields.set(fields)
            try:
                if kind == "connector":
                    return await run_hosted_connector(argv, child)
                return await run_hosted_agent(argv, child, self.bundles, store=store,
                                              stores=self.stores)
            finally:
                await child.aclose()

        loop = asyncio.get_running_loop()
        hosted = _Hosted(parent, loop.create_task(run(), name=f"{kind}:{hid}"))
        self.hosted[hid] = hosted
        hosted.relay = loop.create_task(self._relay(hid, hosted))

    async def _relay(self, hid: str, hosted: _Hosted) -> None:
        while True:
            message = await hosted.parent.recv()
            if message is None:
                break
            self._post(hid, message, None)
        with contextlib.suppress(BaseException):
            await asyncio.shield(hosted.task)
        exit_info: JsonObject
        if hosted.killed or hosted.task.cancelled():
            exit_info = {"reason": "killed", "signal": 9}
        elif hosted.task.exception() is not None:
            _log.error("hosted worker %s failed", hid, exc_info=hosted.task.exception())
            exit_info = {"reason": "failed", "code": 1}
        else:
            exit_info = {"reason": "exited", "code": int(hosted.task.result() or 0)}
        self.hosted.pop(hid, None)
        self._post(hid, None, exit_info)

    async def deliver(self, hid: str, message: IpcMessage) -> bool:
        """Hand one frame to worker ``hid``; False when it is gone."""
        hosted = self.hosted.get(hid)
        if hosted is None or hosted.parent.closed:
            return False
        try:
            await hosted.parent.send(message)
        except GoondanError:
            return False
        return True

    async def eof(self, hid: str) -> None:
        """The orchestrator closed its end: the worker drains as on EOF of its pipe."""
        hosted = self.hosted.get(hid)
        if hosted is not None:
            await hosted.parent.aclose()

    def kill(self, hid: str) -> None:
        """Stop worker ``hid`` at once (its running turn is not folded, like SIGKILL)."""
        hosted = self.hosted.get(hid)
        if hosted is not None and not hosted.task.done():
            hosted.killed = True
            hosted.task.cancel()
