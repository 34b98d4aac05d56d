"""``goondan run``'s runtime: orchestrator + Connections + runtime files + control socket +
``--watch``.

:class:`SwarmService` assembles, for one bundle and Swarm, a :class:`ProcessSpawner`, the
:class:`Orchestrator`, the log directory, ``runtime/active.json``, the status snapshot, the
control socket (``goondan restart``, ``goondan send``), the Connections of the Swarm
(:class:`~goondan.swarm.connections.ConnectionRuntime`: ingress and connector processes) and
optionally the :class:`BundleWatcher`. The command
module only parses options and picks a front-end (one-shot, interactive console, headless).

Control protocol (unix socket ``runtime/control/<key>.sock``; wire format and client:
:mod:`goondan.ipc.controlwire`): one JSON line in, one out.
``{"command": "restart", "agent": null|name, "fresh": bool}`` →
``{"ok": true, "restarted": [process…]}``; ``{"command": "status"}`` → the status document
plus ``connections`` (one row per connector process);
``{"command": "request", "input": …, "agent"?, "instanceKey"?, "cli"?, "stream"?}`` →
``{"ok", "response"}`` (``cli``: routed by the Swarm's ``cli`` Connection when it has one;
``stream``: ``{"event"}`` lines first, and closing the connection cancels the Turn; ``ack``: first
``{"accepted": {"id", "agent", "instanceKey"}}`` once the message is in the Swarm's durable inbox);
``{"command": "inspect", "agent"?, "instanceKey", "what"}`` → ``{"ok", "result"}`` (a
:mod:`goondan.ipc.queries` query; ``result`` null when the process is not running);
``{"command": "stop"}`` → ``{"ok": true, "pid"}``, then the process stops as on SIGTERM;
``{"command": "approval", "id"}`` → ``{"ok", "applied"}`` (a stored decision resumes its turn).
Every answer of ``status`` carries the orchestrator's ``pid`` and ``token`` (its runtime record's).
A failed request is answered with ``{"ok": false, "code", "message", "suggestion"?}`` (a bug:
``E_INTERNAL``, traceback in the log only). Streamed events are sent as fast as the client reads
them, within :data:`STREAM_BUFFER_BYTES` and :data:`DRAIN_TIMEOUT_S` (:class:`_EventStream`);
past them the answer says how many were not sent (``eventsDropped``).

The service takes the swarm's lock (:class:`~goondan.swarm.state.SwarmLock`) before anything
starts and holds it until its process exits: one orchestrator per swarm and state root.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from goondan.config.dotenv import load_env_files, parse_env_file
from goondan.errors import ConfigError, GoondanError
from goondan.ipc.controlwire import MAX_CONTROL_BYTES, encode_line, message_too_large, send_control
from goondan.ipc.logs import JsonLineFormatter, log_dir_for, log_files
from goondan.runtime.budget import TraceBudgets
from goondan.runtime.eventlog import RuntimeEventLog, max_bytes_from_env
from goondan.runtime.ledger import Budget, UsageLedger
from goondan.runtime.span_store import span_log_for
from goondan.secrets import SecretMaskingFilter
from goondan.storage.url import mask_url
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner, Spawner
from goondan.swarm.state import (
    ActiveRuntime,
    SwarmLock,
    clear_active,
    control_socket_path,
    pid_start_time,
    runtime_key,
    status_path,
    write_active,
)
from goondan.types import JsonObject, new_id, now_iso
from goondan.workspace.files import private_dirs, private_opener
from goondan.workspace.record import record_bundle_workspace

__all__ = ["SwarmService", "already_running", "load_env_files", "parse_env_file", "send_control"]

_log = logging.getLogger("goondan.swarm.service")

STREAM_BUFFER_BYTES = MAX_CONTROL_BYTES
"""Streamed events held for one attached client that does not read (Ctrl-Z, a stuck pipe);
past it the client gets no more events of that Turn (docs/orchestrator.md "Control socket").
As large as one control line: a burst of big events (tool results) to a client that does read
does not trip it; a client that stopped reading is usually caught by DRAIN_TIMEOUT_S first."""
DRAIN_TIMEOUT_S = 30.0
"""How long the orchestrator waits for a client to read what it was sent, before it stops
streaming events to it (or, for the answer, drops the connection)."""


class _EventStream:
    """The ``{"event"}`` lines of one streamed request, written as fast as the client reads them:
    :meth:`put` (the orchestrator's synchronous listener) queues, a task writes and waits for the
    client to drain. A client that does not read within :data:`DRAIN_TIMEOUT_S`, or lets more
    than :data:`STREAM_BUFFER_BYTES` pile up, gets no more events; the Turn is not held up."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.lines: collections.deque[bytes] = collections.deque()
        self.queued = 0  # bytes in self.lines
        self.dropped = 0  # events not sent
        self.stopped = False
        self._finishing = False
        self._ready = asyncio.Event()
        self.task = asyncio.ensure_future(self._send())

    def put(self, payload: JsonObject) -> None:
        if (
            not self.stopped
            and self.queued + self.writer.transport.get_write_buffer_size() > STREAM_BUFFER_BYTES
        ):
            self._stop(f"more than {STREAM_BUFFER_BYTES} bytes of events unread")
        if self.stopped:
            self.dropped += 1
            return
        line = encode_line({"event": payload})
        self.lines.append(line)
        self.queued += len(line)
        self._ready.set()

    async def finish(self) -> None:
        """Send what is queued (within the same bounds), then end the task."""
        self._finishing = True
        self._ready.set()
        await self.task
        if self.dropped:
            _log.warning("an attached client missed %d streamed events", self.dropped,
                         extra={"event": "orchestrator.streamDropped"})

    def _stop(self, why: str) -> None:
        if not self.stopped:
            _log.warning("stopped streaming events to an attached client: %s", why,
                         extra={"event": "orchestrator.streamStopped"})
        self.stopped = True
        self.dropped += len(self.lines)
        self.lines.clear()
        self.queued = 0

    async def _send(self) -> None:
        while not self.stopped:
            if not self.lines:
                if self._finishing:
                    return
                await self._ready.wait()
                self._ready.clear()
                continue
            line = self.lines.popleft()
            self.queued -= len(line)
            try:
                self.writer.write(line)
                async with asyncio.timeout(DRAIN_TIMEOUT_S):
                    await self.writer.drain()
            except TimeoutError:
                self._stop(f"not read for {DRAIN_TIMEOUT_S:.0f} s")
            except (OSError, RuntimeError):  # the client went away: hang_up() sees it
                self._stop("connection lost")


def already_running(swarm: str, root: Path, instance_key: str, pid: int | None) -> ConfigError:
    """``E_RUN_ALREADY_RUNNING`` (exit 3) for a swarm whose orchestrator runs as ``pid``."""
    where = f" as pid {pid}" if pid else ""
    return ConfigError(
        f"swarm {swarm!r} of {root} (instanceKey {instance_key!r}) already runs{where}",
        code="E_RUN_ALREADY_RUNNING",
        suggestion=f"talk to it with 'goondan run {root}' or "
        f"'goondan send --bundle {root} TEXT', restart it "
        f"with 'goondan restart --bundle {root}' or stop it with 'goondan stop --bundle {root}'",
    )


def steering_agents(bundle: Any, swarm: Any) -> set[str]:
    """The agents of ``swarm`` whose ``inputPolicy`` is ``steer`` (docs/orchestrator.md
    "Steering")."""
    agents: set[str] = set()
    for name in swarm.agents:
        with contextlib.suppress(GoondanError):  # reported when the agent's process starts
            if bundle.agent_spec(name, swarm=swarm.name).input_policy == "steer":
                agents.add(name)
    return agents


def _trace_budgets(bundle: Any, swarm: Any) -> TraceBudgets:
    """The trace budgets of every agent of ``swarm`` (Swarm policy merged with Agent spec)."""
    budgets: dict[str, Budget] = {}
    for name in swarm.agents:
        try:
            budgets[name] = Budget.from_dicts(bundle.agent_spec(name, swarm=swarm.name).budget)
        except GoondanError:  # reported when the agent's process starts
            continue
    return TraceBudgets(budgets, default=Budget.from_dicts(swarm.budget))


class SwarmService:
    """Everything ``goondan run`` keeps alive for one Swarm (see the module docstring)."""

    def __init__(
        self, bundle: Any, *, state_root: Path, swarm: str | None = None, watch: bool = False,
        env_file: str | None = None, real_env: Mapping[str, str] | None = None,
        log_to_file: bool = True, engine: str = "local", ray_address: str | None = None,
        storage: Any = None, store_url: str | None = None,
    ) -> None:
        self.bundle = bundle
        self.state_root = Path(state_root)
        # The store of the conversations, journals, queues and approvals (docs/storage.md): None
        # is the JSONL state root; ``store_url`` (a PostgreSQL URL) goes to the agent processes.
        self.storage, self.store_url = storage, store_url
        self.swarm = bundle.swarm_spec(swarm)
        from goondan.workspace.paths import workspace_id_for

        # Files are keyed by instanceKey *and* workspace: two bundles never collide.
        self.instance_key = self.swarm.instance_key
        self.workspace_id = workspace_id_for(bundle.root, bundle.package_name)
        self.key = runtime_key(self.instance_key, self.workspace_id)
        self.watch = watch
        self.env_file = env_file
        self.real_env = dict(real_env if real_env is not None else os.environ)
        self.log_dir = log_dir_for(self.state_root, self.key)
        self.socket_path = control_socket_path(self.state_root, self.key)
        self.status_file = status_path(self.state_root, self.key)
        self.active: ActiveRuntime | None = None
        self.lock = SwarmLock(self.state_root, self.key)
        self._control_tasks: set[asyncio.Task[None]] = set()
        self.inbox: Any = None  # goondan.swarm.durable_inputs.SwarmInbox, opened by start()
        spawner = self._make_spawner(engine, ray_address)
        self.spawner = spawner
        self.orchestrator = Orchestrator(
            spawner,
            swarm_name=self.swarm.name,
            entry_agent=self.swarm.entry_agent,
            agents=self.swarm.agents,
            project_root=bundle.root,
            grace_period_ms=self.swarm.shutdown_grace_ms,
            idle_timeout_ms=self.swarm.idle_timeout_ms,
            status_path=self.status_file,
            clear_history=self._clear_history,
        )
        from goondan.swarm.connections import ConnectionRuntime

        # One supervised connector process per Connection of this Swarm (docs/connectors.md).
        self.connections = ConnectionRuntime(bundle, self.swarm, self.orchestrator, spawner,
                                             state_root=self.state_root, storage=storage)
        from goondan.swarm.approval_relay import ApprovalRelay

        # Approvals announced and decided where the conversation came from (docs/approvals.md).
        relay = ApprovalRelay(self.state_root, self.workspace_id, resume=self._approval_decided,
                              send=self.connections.supervisor.send_approval,
                              agents=tuple(self.swarm.agents), storage=storage)
        self.connections.supervisor.approvals = relay
        self.orchestrator.add_event_sink(relay)
        self._server: asyncio.AbstractServer | None = None
        self._watcher: Any = None
        self._approvals_task: asyncio.Future[None] | None = None  # _watch_approvals
        self._log_handler: logging.Handler | None = None
        self._log_to_file = log_to_file
        # Ingress events happen here, not in an agent process: they get the orchestrator's own
        # runtime-events.jsonl in the logs directory (docs/observability.md).
        self.event_log: RuntimeEventLog | None = None
        self.exporter: Any = None  # goondan.runtime.otlp_exporter.OtlpExporter when configured
        # Tokens and cost per agent instance, for `goondan status` and /usage.
        self.ledger = UsageLedger()
        self.orchestrator.add_event_sink(self.ledger)
        self.budgets = _trace_budgets(bundle, self.swarm)
        self.orchestrator.steering = steering_agents(bundle, self.swarm)
        if self.budgets.active:
            self.orchestrator.admit = self.budgets.admit
            self.orchestrator.add_event_sink(self.budgets)  # llm.completed costs per trace
        max_bytes = max_bytes_from_env()
        self.span_log = None  # on PostgreSQL the ingress spans go to its span table too
        if max_bytes:
            ingress = frozenset({"ingress.received"})
            self.event_log = RuntimeEventLog(self.log_dir, max_bytes=max_bytes, only=ingress)
            self.orchestrator.add_event_sink(self.event_log)
            self.span_log = span_log_for(storage, self.workspace_id, only=ingress)
            if self.span_log is not None:
                self.orchestrator.add_event_sink(self.span_log)

    def _make_spawner(self, engine: str, ray_address: str | None) -> Spawner:
        """The engine's spawner: local processes, or Ray host actors (docs/scaling.md)."""
        if engine == "ray":
            # Imported here only: the core never imports Ray (an optional extra).
            from goondan.engines.ray.spawner import RaySpawner

            return RaySpawner(self.bundle.root, state_root=self.state_root, swarm=self.swarm.name,
                              log_dir=self.log_dir, hosts=self.swarm.ray_hosts, address=ray_address,
                              store_url=self.store_url)
        if engine != "local":
            raise ValueError(f"unknown engine {engine!r}; known: local, ray")
        from goondan.swarm.pool import PooledSpawner, isolation_of

        if isolation_of(self.swarm, self.real_env) == "pooled":
            return PooledSpawner(self.bundle.root, state_root=self.state_root,
                                 swarm=self.swarm.name, log_dir=self.log_dir,
                                 hosts=self.swarm.pool_hosts, store_url=self.store_url)
        return ProcessSpawner(self.bundle.root, state_root=self.state_root, swarm=self.swarm.name,
                              log_dir=self.log_dir, store_url=self.store_url)

    def __repr__(self) -> str:
        return f"<SwarmService swarm={self.swarm.name!r} key={self.key!r} watch={self.watch}>"

    def claim(self) -> bool:
        """Take the swarm's lock (True), or False when another process runs this swarm."""
        return self.lock.acquire()

    async def start(self) -> None:
        """Take the swarm's lock, then start logging, the orchestrator, the control socket and
        the watcher; write active.json."""
        if not self.claim():
            raise already_running(
                self.swarm.name, self.bundle.root, self.instance_key, self.lock.holder()
            )
        from goondan.otlp import endpoint_configured

        # OTLP export (docs/observability.md): spans of every agent process, sent from a thread.
        if endpoint_configured(os.environ):
            from goondan.runtime.otlp_exporter import exporter_from_env

            self.exporter = exporter_from_env(
                resource_attributes={"goondan.swarm": self.swarm.name}
            )
        if self.exporter is not None:
            self.orchestrator.add_event_sink(self.exporter)
        private_dirs(self.log_dir)
        if self._log_to_file:
            self._install_log_file()
        # an engine with a cluster to join (Ray):
        engine_start = getattr(self.spawner, "start", None)
        # joined now, saying so, rather than silently at the first event
        if engine_start is not None:
            await engine_start()
        await self.orchestrator.start()
        from goondan.swarm.stored import resume_interrupted

        await resume_interrupted(self.orchestrator, self.state_root, self.workspace_id,
                                 self.storage)
        from goondan.storage.jsonl import JsonlBackend
        from goondan.swarm.durable_inputs import SwarmInbox

        # Inputs accepted before a crash whose Turn had not started run first, in order.
        store = self.storage if self.storage is not None else JsonlBackend(self.state_root)
        self.inbox = SwarmInbox.of(store, self.workspace_id, self.swarm.name)
        await self.inbox.open(self.orchestrator)
        self.orchestrator.store_input = self.inbox.record
        await self.connections.start()
        private_dirs(self.socket_path.parent)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(self._on_control, path=str(self.socket_path),
                                                       limit=MAX_CONTROL_BYTES)
        if self.watch:
            from goondan.swarm.watch import BundleWatcher

            self._watcher = BundleWatcher(self.bundle, self._reload, state_root=self.state_root,
                                          swarm=self.swarm.name)
            self._watcher.start()
        files = log_files(self.log_dir, "orchestrator")
        self.active = ActiveRuntime(
            instance_key=self.instance_key,
            runtime_key=self.key,
            log_dir=str(self.log_dir),
            bundle_path=str(self.bundle.root / "goondan.yaml"),
            swarm=self.swarm.name,
            pid=os.getpid(),
            pid_start=pid_start_time(os.getpid()),
            token=new_id("orch"),
            started_at=now_iso(),
            watch=self.watch,
            logs=[
                {
                    "process": "orchestrator",
                    "stdout": str(files["stdout"]),
                    "stderr": str(files["stderr"]),
                }
            ],
            control_socket=str(self.socket_path),
            status_file=str(self.status_file),
            store=mask_url(self.store_url) if self.store_url else None,
        )
        await asyncio.to_thread(write_active, self.state_root, self.active)
        # inspect from another directory masks this bundle's secrets (docs/security.md).
        await asyncio.to_thread(record_bundle_workspace, self.bundle, self.state_root)
        self._approvals_task = asyncio.ensure_future(self._watch_approvals())
        _log.info("orchestrator started (swarm=%s, instanceKey=%s)", self.swarm.name, self.key,
                  extra={"event": "orchestrator.started"})

    def _install_log_file(self) -> None:
        path = log_files(self.log_dir, "orchestrator")["stderr"]
        for log in (path, log_files(self.log_dir, "orchestrator")["stdout"]):
            # 0600, as the agents'
            os.close(private_opener(str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND))
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(
            JsonLineFormatter(process="orchestrator", swarm=self.swarm.name, pid=os.getpid())
        )
        handler.addFilter(SecretMaskingFilter())
        logger = logging.getLogger("goondan")
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        self._log_handler = handler

    async def stop(self) -> None:
        """Graceful shutdown of every agent process, then remove the runtime records."""
        if self._approvals_task is not None:
            self._approvals_task.cancel()
        if self._watcher is not None:
            await self._watcher.stop()
        if self._server is not None:
            self._server.close()
        if self._control_tasks:  # requests of attached clients (`goondan run`, `send`) finish first
            await asyncio.wait(
                set(self._control_tasks), timeout=self.swarm.shutdown_grace_ms / 1000
            )
        await self.connections.stop()
        await self.orchestrator.shutdown()
        if self.inbox is not None:
            self.inbox.close()
        if self.span_log is not None:  # before the store it writes to
            await asyncio.to_thread(self.span_log.close)
        if self.storage is not None:
            self.storage.close()
        if self.event_log is not None:
            await asyncio.to_thread(self.event_log.close)
        if self.exporter is not None:  # the shutdown flush
            await asyncio.to_thread(self.exporter.close)
        closer = getattr(self.spawner, "aclose", None)  # engines with resources of their own
        if closer is not None:
            await closer()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        if self.active is not None:
            await asyncio.to_thread(clear_active, self.state_root, self.active)
        self.lock.release()
        _log.info("orchestrator stopped", extra={"event": "orchestrator.stopped"})
        if self._log_handler is not None:
            logging.getLogger("goondan").removeHandler(self._log_handler)
            self._log_handler.close()

    async def __aenter__(self) -> SwarmService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- restart / watch ---------------------------------------------------------------------------
    def _refresh_env(self) -> None:
        """Re-read the .env files before respawning (real environment still wins)."""
        for key in list(os.environ):
            if key not in self.real_env:
                del os.environ[key]
        os.environ.update(self.real_env)
        load_env_files(self.bundle.root, self.env_file, os.environ, real_env=self.real_env)

    async def restart(self, agent: str | None = None, *, fresh: bool = False,
                      instance_key: str | None = None) -> list[str]:
        """``goondan restart``: graceful replacement of the agent's processes."""
        with contextlib.suppress(GoondanError):
            self._refresh_env()
        return await self.orchestrator.restart(agent, fresh=fresh, instance_key=instance_key)

    async def _clear_history(self, agent: str) -> None:
        import shutil

        from goondan.workspace.paths import StateLayout, workspace_id_for

        directory = StateLayout(self.state_root).instances_dir(
            workspace_id_for(self.bundle.root, self.bundle.package_name)
        )

        def clear() -> None:
            if self.storage is not None:  # the instances are stopped: nobody holds them
                for info in list(self.storage.instances(self.workspace_id)):
                    if info.get("agentName") == agent:
                        self.storage.delete_instance(self.workspace_id, agent,
                                                     str(info["instanceKey"]))
                return
            for meta in directory.glob("*/metadata.json") if directory.is_dir() else []:
                with contextlib.suppress(OSError, ValueError):
                    if json.loads(meta.read_text(encoding="utf-8")).get("agentName") == agent:
                        shutil.rmtree(meta.parent)

        await asyncio.to_thread(clear)
        _log.info(
            "cleared the history of agent %s", agent, extra={"event": "orchestrator.historyCleared"}
        )

    async def _reload(self, bundle: Any, changed_agents: list[str]) -> None:
        """``--watch``: new configuration; restart only the agents whose inputs changed."""
        self.bundle = bundle
        swarm = bundle.swarm_spec(self.swarm.name)
        self.swarm = swarm
        await self.orchestrator.update_agents(swarm.agents, entry_agent=swarm.entry_agent)
        self.orchestrator.steering = steering_agents(bundle, swarm)
        changed: list[str] = []
        processes: list[str] = []
        for agent in changed_agents:
            if agent in swarm.agents:
                restarted = await self.orchestrator.restart(agent, reason="config_change")
                changed.append(agent)
                processes.extend(restarted)
                _log.info("configuration of %s changed; restarted %s", agent, restarted,
                          extra={"event": "orchestrator.configReloaded", "agentName": agent})
        connections = await self.connections.reload(bundle)
        # one line the chat shows above its prompt (goondan.console.prompt.AbovePromptHandler)
        what = (
            f"; changed: {', '.join(changed)}; restarted: {', '.join(processes) or 'none running'}"
            " (history kept)"
            if changed
            else "; no agent changed"
        )
        what += "".join(
            f"; Connections {kind}: {', '.join(names)}"
            for kind, names in connections.items()
            if names
        )
        _log.info("bundle reloaded%s", what, extra={"event": "orchestrator.bundleReloaded"})

    async def _control_request(
        self,
        request: JsonObject,
        on_event: Callable[[JsonObject], None] | None = None,
        on_accepted: Callable[[JsonObject], None] | None = None,
    ) -> JsonObject:
        """``{"command": "request", "input", "agent"?, "instanceKey"?, "timeoutMs"?, "cli"?}``: one
        message to an agent (default: the entry agent), for scripts, headless runs and a
        ``goondan run`` attached to this swarm (``cli``: the Swarm's ``cli`` Connection routes it).
        ``on_accepted`` gets ``{"id", "agent", "instanceKey"}`` once the message is durable."""
        from goondan.runtime.approvals import APPROVAL_PENDING
        from goondan.types import AgentEvent

        text = str(request.get("input") or "")
        agent = str(request.get("agent") or self.swarm.entry_agent)
        key = str(request.get("instanceKey") or "control")
        event = AgentEvent(type="message", input=text, instance_key=key,
                           source={"kind": "connector", "name": "control"})
        if request.get("waitForApproval"):  # send --wait: answered by the turn's final answer
            event.wait_for_final = True
        if request.get("cli") and self.connections.cli is not None:
            routed = await self.connections.cli_event(text)
            if routed is None:
                return {"ok": True, "agent": None, "instanceKey": key, "response": None}
            agent, event = routed
            key = event.instance_key or key
        if self.inbox is not None and agent in self.orchestrator.agents:
            self.inbox.record(agent, event)  # durable (not again when queued), then acknowledged
            if on_accepted is not None:
                on_accepted({"id": event.id, "agent": agent, "instanceKey": key})
        timeout = request.get("timeoutMs")
        answer = await self.orchestrator.request(
            agent,
            event,
            instance_key=key,
            timeout_ms=int(timeout) if timeout else None,
            on_event=on_event,
        )
        error = answer.metadata.get("error")
        # an attached `goondan run` (cli) also gets what its console shows: the whole error,
        # the finish reason and the Turn id
        extra: JsonObject = {"finishReason": answer.metadata.get("finishReason"),
                             "turnId": answer.metadata.get("turnId")} if request.get("cli") else {}
        if isinstance(error, dict):
            if request.get("cli"):
                extra = {"error": error}
            return {
                "ok": False,
                "code": error.get("code"),
                "message": error.get("message"),
                **extra,
            }
        if answer.metadata.get("finishReason") == APPROVAL_PENDING:
            return {"ok": True, "agent": agent, "instanceKey": key, "status": "waitingForApproval",
                    "approvals": answer.metadata.get("approvals") or [], "response": None, **extra}
        return {
            "ok": True,
            "agent": agent,
            "instanceKey": key,
            "response": answer.input or "",
            **extra,
        }

    async def _streamed_request(
        self,
        request: JsonObject,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        on_accepted: Callable[[JsonObject], None] | None = None,
    ) -> JsonObject | None:
        """A ``stream`` request: runtime events as ``{"event"}`` lines, then the answer; the
        client closing the connection cancels the Turn (None: nobody to answer)."""

        events = _EventStream(writer)

        async def hang_up() -> None:  # returns once the client closed; what it sends is dropped
            while await reader.read(65536):
                pass

        work = asyncio.ensure_future(self._control_request(request, events.put, on_accepted))
        closed = asyncio.ensure_future(hang_up())
        try:
            await asyncio.wait({work, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not work.done():
                events.task.cancel()
        if work.done():
            await events.finish()  # the events before the answer
        else:
            work.cancel()  # the Turn is cancelled through runtime.cancel (Orchestrator.request)
            with contextlib.suppress(asyncio.CancelledError, GoondanError):
                await work
            return None
        answer = work.result()
        if events.dropped:  # the client's stream was cut: it shows the whole answer instead
            answer["eventsDropped"] = events.dropped
        return answer

    async def _control_answer(self, request: JsonObject, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> JsonObject | None:
        command = request.get("command")
        if command == "restart":
            agent, key = request.get("agent"), request.get("instanceKey")
            restarted = await self.restart(agent if isinstance(agent, str) else None,
                                           fresh=bool(request.get("fresh")),
                                           instance_key=key if isinstance(key, str) else None)
            return {"ok": True, "restarted": restarted}
        if command == "stop":
            # The front-end owns the stop (headless: its SIGTERM handler; chat: leaves the
            # prompt), so the graceful path is the one SIGTERM already takes.
            asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
            return {"ok": True, "pid": os.getpid()}
        if command == "request":
            def accepted(info: JsonObject) -> None:  # the ack ("ack": true): durable from here on
                writer.write(encode_line({"accepted": info}))

            ack = accepted if request.get("ack") else None
            if request.get("stream"):
                return await self._streamed_request(request, reader, writer, ack)
            return await self._control_request(request, on_accepted=ack)
        if command == "approval":
            return await self._approval_decided(str(request.get("id") or ""))
        if command == "inspect":
            from goondan.ipc.queries import inspect_agent

            agent = str(request.get("agent") or self.swarm.entry_agent)
            result = await inspect_agent(
                self.orchestrator,
                agent,
                str(request.get("instanceKey") or "control"),
                str(request.get("what") or "state"),
            )
            return {"ok": True, "result": result}
        if command == "status":
            active = self.active
            pending = await asyncio.to_thread(self.approval_store().list, status="pending")
            from goondan.swarm.procstats import pool_status, with_process_stats

            return with_process_stats({
                "ok": True,
                **self.orchestrator.status_document(),
                "approvals": [
                    a.to_dict() for a in pending if a.request.get("agent") in self.swarm.agents
                ],
                "connections": self.connections.snapshot(),
                "hosts": pool_status(self.spawner),
                "instanceKey": self.instance_key,
                "runtimeKey": self.key,
                "bundle": str(self.bundle.root),
                "watch": self.watch,
                "logDir": str(self.log_dir),
                "usage": self.ledger.to_dict(),
                "pid": os.getpid(),
                "token": active.token if active is not None else None,
                "swarm": self.swarm.name,
                "entryAgent": self.swarm.entry_agent,
                "cliConnection": self.connections.cli.name
                if self.connections.cli is not None
                else None,
            })
        return {"ok": False, "code": "E_RUN_CONTROL", "message": f"unknown command {command!r}"}

    async def _watch_approvals(self) -> None:
        """Resume parked turns whose approvals were decided while the swarm was stopped, and
        those whose approvals expire while it runs (docs/approvals.md)."""
        from goondan.runtime.approvals import approvals_due

        workspace = self.workspace_id
        woken: set[str] = set()
        startup = True
        while True:
            try:
                due, wait = await asyncio.to_thread(
                    approvals_due, self.state_root, workspace, startup=startup,
                    storage=self.storage)
                startup = False
                for found in due:
                    if found.id not in woken:
                        woken.add(found.id)
                        await self._approval_decided(found.id, force=True)
            except GoondanError as exc:
                _log.warning(
                    "approvals: %s", exc.message, extra={"event": "orchestrator.approvalsFailed"}
                )
                wait = 5.0
            await asyncio.sleep(wait)

    def approval_store(self) -> Any:
        """The approvals of this workspace, in the swarm's store."""
        from goondan.workspace.approvals import ApprovalStore

        if self.storage is not None:
            return self.storage.approvals(self.workspace_id)
        return ApprovalStore(self.state_root, self.workspace_id)

    async def _approval_decided(self, approval: str, *, force: bool = False) -> JsonObject:
        """``{"command": "approval", "id"}``: a decision was stored (``goondan approvals``); the
        instance of a decided approval gets an ``approval.decided`` event, which resumes its
        parked turn (spawning it if needed). ``applied`` is false for an approval of another
        workspace or swarm, or one still pending."""
        from goondan.runtime.approvals import APPROVAL_DECIDED_EVENT
        from goondan.types import AgentEvent

        found = await asyncio.to_thread(self.approval_store().get, approval)
        agent = str(found.request.get("agent")) if found is not None else ""
        if (
            found is None
            or (found.status == "pending" and not force)
            or agent not in self.swarm.agents
        ):
            return {"ok": True, "applied": False}
        event = AgentEvent(
            type=APPROVAL_DECIDED_EVENT,
            instance_key=str(found.request.get("instanceKey")),
            metadata={"approvalId": approval},
        )
        applied = await self.orchestrator.deliver_now(agent, event)
        return {"ok": True, "applied": applied, "status": found.status}

    async def _on_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # stop() lets running requests finish
            self._control_tasks.add(task)
            task.add_done_callback(self._control_tasks.discard)
        answer: JsonObject | None
        try:
            try:
                line = await reader.readline()
            except ValueError:  # longer than MAX_CONTROL_BYTES (asyncio's LimitOverrunError)
                raise message_too_large() from None
            request = json.loads(line or b"{}")
            if not isinstance(request, dict):
                raise ValueError("a control request is a JSON object")
            answer = await self._control_answer(request, reader, writer)
        except GoondanError as err:
            answer = {
                "ok": False,
                "code": err.code,
                "message": err.message,
                "suggestion": err.suggestion,
            }
        except (ValueError, AttributeError) as exc:  # a malformed request
            answer = {"ok": False, "code": "E_RUN_CONTROL", "message": str(exc)}
        except Exception:  # a bug: the traceback goes to the log, not to the client
            _log.exception("control request failed", extra={"event": "orchestrator.controlFailed"})
            answer = {
                "ok": False,
                "code": "E_INTERNAL",
                "message": "the orchestrator failed on this request",
                "suggestion": "see 'goondan logs' for the orchestrator's traceback and report it",
            }
        with contextlib.suppress(OSError, RuntimeError):
            if answer is not None:
                data = encode_line(answer)
                if len(data) > MAX_CONTROL_BYTES:
                    big = message_too_large(len(data))
                    data = encode_line(
                        {"ok": False, "code": big.code, "message": f"the answer: {big.message}"}
                    )
                writer.write(data)
                try:
                    async with asyncio.timeout(DRAIN_TIMEOUT_S):
                        await writer.drain()
                except TimeoutError:  # a client that does not read: its buffer is dropped
                    _log.warning(
                        "an attached client did not read its answer for %.0f s",
                        DRAIN_TIMEOUT_S,
                        extra={"event": "orchestrator.answerDropped"},
                    )
                    writer.transport.abort()
            writer.close()
