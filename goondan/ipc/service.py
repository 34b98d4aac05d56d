"""``goondan run``'s runtime: orchestrator + Connections + runtime files + control socket + ``--watch``.

:class:`SwarmService` assembles, for one bundle and Swarm, a :class:`ProcessSpawner`, the
:class:`Orchestrator`, the log directory, ``runtime/active.json``, the status snapshot, the
control socket (``goondan restart``, ``goondan send``), the Connections of the Swarm
(:class:`~goondan.connectors.runtime.ConnectionRuntime`: ingress and connector processes) and
optionally the :class:`BundleWatcher`. The command
module only parses options and picks a front-end (one-shot, interactive console, headless).

Control protocol (unix socket ``runtime/control/<key>.sock``): one JSON line in, one out.
``{"command": "restart", "agent": null|name, "fresh": bool}`` →
``{"ok": true, "restarted": [process…]}``; ``{"command": "status"}`` → the status document
plus ``connections`` (one row per connector process);
``{"command": "request", "input": …, "agent"?, "instanceKey"?}`` → ``{"ok", "response"}``;
``{"command": "stop"}`` → ``{"ok": true, "pid"}``, then the process stops as on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from goondan.config.dotenv import load_env_files, parse_env_file
from goondan.errors import AgentError, ConfigError, GoondanError, IpcError
from goondan.ipc.logs import JsonLineFormatter, log_dir_for, log_files
from goondan.ipc.orchestrator import Orchestrator
from goondan.ipc.spawner import ProcessSpawner, Spawner
from goondan.ipc.state import (
    ActiveRuntime,
    clear_active,
    control_socket_path,
    read_active,
    runtime_key,
    status_path,
    write_active,
)
from goondan.runtime.budget import TraceBudgets
from goondan.runtime.eventlog import RuntimeEventLog, max_bytes_from_env
from goondan.runtime.ledger import Budget, UsageLedger
from goondan.secrets import SecretMaskingFilter
from goondan.types import JsonObject, now_iso
from goondan.workspace.files import private_dirs, private_opener
from goondan.workspace.record import record_bundle_workspace

__all__ = ["SwarmService", "load_env_files", "parse_env_file", "send_control"]

_log = logging.getLogger("goondan.ipc.service")


async def send_control(socket_path: Path, request: JsonObject, *, timeout_s: float = 120.0) -> JsonObject:
    """Send one control request to a running orchestrator and return its answer."""
    # A socket that cannot be reached is a communication failure (IpcError, exit 1), not a
    # configuration problem.
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
    except OSError as exc:
        raise IpcError(
            f"cannot reach the running orchestrator at {socket_path}: {exc.strerror or exc}",
            code="E_IPC_CONTROL", suggestion="check that the swarm runs ('goondan instance list'), "
            "or start it with 'goondan run'",
        ) from exc
    try:
        writer.write(json.dumps(request).encode() + b"\n")
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            line = await reader.readline()
    except (OSError, TimeoutError) as exc:
        raise IpcError(
            f"the orchestrator at {socket_path} did not answer: {getattr(exc, 'strerror', None) or 'timed out'}",
            code="E_IPC_CONTROL", suggestion="see 'goondan logs' for what the orchestrator is doing",
        ) from exc
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if not line:
        raise IpcError("the orchestrator closed the control connection", code="E_IPC_CONTROL",
                       suggestion="see 'goondan logs' for what the orchestrator is doing")
    answer: JsonObject = json.loads(line)
    return answer


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
    ) -> None:
        self.bundle = bundle
        self.state_root = Path(state_root)
        self.swarm = bundle.swarm_spec(swarm)
        from goondan.workspace.paths import workspace_id_for

        # Files are keyed by instanceKey *and* workspace: two bundles never collide.
        self.instance_key = self.swarm.instance_key
        self.key = runtime_key(self.instance_key, workspace_id_for(bundle.root, bundle.package_name))
        self.watch = watch
        self.env_file = env_file
        self.real_env = dict(real_env if real_env is not None else os.environ)
        self.log_dir = log_dir_for(self.state_root, self.key)
        self.socket_path = control_socket_path(self.state_root, self.key)
        self.status_file = status_path(self.state_root, self.key)
        self.active: ActiveRuntime | None = None
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
        from goondan.connectors.runtime import ConnectionRuntime

        # One supervised connector process per Connection of this Swarm (docs/connectors.md).
        self.connections = ConnectionRuntime(bundle, self.swarm, self.orchestrator, spawner,
                                             state_root=self.state_root)
        self._server: asyncio.AbstractServer | None = None
        self._watcher: Any = None
        self._log_handler: logging.Handler | None = None
        self._log_to_file = log_to_file
        # Ingress events happen here, not in an agent process: they get the orchestrator's own
        # runtime-events.jsonl in the logs directory (docs/observability.md).
        self.event_log: RuntimeEventLog | None = None
        self.exporter: Any = None  # goondan.otlp.exporter.OtlpExporter when configured
        # Tokens and cost per agent instance, for `goondan status` and /usage.
        self.ledger = UsageLedger()
        self.orchestrator.add_event_sink(self.ledger)
        self.budgets = _trace_budgets(bundle, self.swarm)
        if self.budgets.active:
            self.orchestrator.admit = self.budgets.admit
            self.orchestrator.add_event_sink(self.budgets)  # llm.completed costs per trace
        max_bytes = max_bytes_from_env()
        if max_bytes:
            self.event_log = RuntimeEventLog(self.log_dir, max_bytes=max_bytes,
                                             only=frozenset({"ingress.received"}))
            self.orchestrator.add_event_sink(self.event_log)

    def _make_spawner(self, engine: str, ray_address: str | None) -> Spawner:
        """The engine's spawner: local processes, or Ray host actors (docs/scaling.md)."""
        if engine == "ray":
            # Imported here only: the core never imports Ray (an optional extra).
            from goondan.engines.ray.spawner import RaySpawner

            return RaySpawner(self.bundle.root, state_root=self.state_root, swarm=self.swarm.name,
                              log_dir=self.log_dir, hosts=self.swarm.ray_hosts, address=ray_address)
        if engine != "local":
            raise ValueError(f"unknown engine {engine!r}; known: local, ray")
        return ProcessSpawner(self.bundle.root, state_root=self.state_root, swarm=self.swarm.name,
                              log_dir=self.log_dir)

    def __repr__(self) -> str:
        return f"<SwarmService swarm={self.swarm.name!r} key={self.key!r} watch={self.watch}>"

    def check_not_running(self) -> None:
        """Refuse a second orchestrator for the same key (exit 3)."""
        current = read_active(self.state_root, self.key)
        if current is not None and current.alive and current.pid != os.getpid():
            raise ConfigError(
                f"swarm {self.swarm.name!r} of {self.bundle.root} (instanceKey {self.instance_key!r}) "
                f"already runs as pid {current.pid}",
                code="E_RUN_ALREADY_RUNNING",
                suggestion=f"talk to it with 'goondan send --bundle {self.bundle.root} TEXT', restart it with "
                f"'goondan restart --bundle {self.bundle.root}' or stop it with 'goondan stop --bundle "
                f"{self.bundle.root}'",
            )

    async def start(self) -> None:
        """Start logging, the orchestrator, the control socket, the watcher; write active.json."""
        self.check_not_running()
        from goondan.otlp import endpoint_configured

        # OTLP export (docs/observability.md): spans of every agent process, sent from a thread.
        if endpoint_configured(os.environ):
            from goondan.otlp.exporter import exporter_from_env

            self.exporter = exporter_from_env(resource_attributes={"goondan.swarm": self.swarm.name})
        if self.exporter is not None:
            self.orchestrator.add_event_sink(self.exporter)
        private_dirs(self.log_dir)
        if self._log_to_file:
            self._install_log_file()
        await self.orchestrator.start()
        await self.connections.start()
        private_dirs(self.socket_path.parent)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(self._on_control, path=str(self.socket_path))
        if self.watch:
            from goondan.ipc.watch import BundleWatcher

            self._watcher = BundleWatcher(self.bundle, self._reload, state_root=self.state_root,
                                          swarm=self.swarm.name)
            self._watcher.start()
        files = log_files(self.log_dir, "orchestrator")
        self.active = ActiveRuntime(
            instance_key=self.instance_key, runtime_key=self.key, log_dir=str(self.log_dir), bundle_path=str(self.bundle.root / "goondan.yaml"), swarm=self.swarm.name,
            pid=os.getpid(), started_at=now_iso(), watch=self.watch,
            logs=[{"process": "orchestrator", "stdout": str(files["stdout"]), "stderr": str(files["stderr"])}],
            control_socket=str(self.socket_path), status_file=str(self.status_file),
        )
        await asyncio.to_thread(write_active, self.state_root, self.active)
        # inspect from another directory masks this bundle's secrets (docs/security.md).
        await asyncio.to_thread(record_bundle_workspace, self.bundle, self.state_root)
        _log.info("orchestrator started (swarm=%s, instanceKey=%s)", self.swarm.name, self.key,
                  extra={"event": "orchestrator.started"})

    def _install_log_file(self) -> None:
        path = log_files(self.log_dir, "orchestrator")["stderr"]
        for log in (path, log_files(self.log_dir, "orchestrator")["stdout"]):
            os.close(private_opener(str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND))  # 0600, as the agents'
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setFormatter(JsonLineFormatter(process="orchestrator", swarm=self.swarm.name, pid=os.getpid()))
        handler.addFilter(SecretMaskingFilter())
        logger = logging.getLogger("goondan")
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.addHandler(handler)
        self._log_handler = handler

    async def stop(self) -> None:
        """Graceful shutdown of every agent process, then remove the runtime records."""
        if self._watcher is not None:
            await self._watcher.stop()
        if self._server is not None:
            self._server.close()
        await self.connections.stop()
        await self.orchestrator.shutdown()
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
            for meta in directory.glob("*/metadata.json") if directory.is_dir() else []:
                with contextlib.suppress(OSError, ValueError):
                    if json.loads(meta.read_text(encoding="utf-8")).get("agentName") == agent:
                        shutil.rmtree(meta.parent)

        await asyncio.to_thread(clear)
        _log.info("cleared the history of agent %s", agent, extra={"event": "orchestrator.historyCleared"})

    async def _reload(self, bundle: Any, changed_agents: list[str]) -> None:
        """``--watch``: new configuration; restart only the agents whose inputs changed."""
        self.bundle = bundle
        swarm = bundle.swarm_spec(self.swarm.name)
        self.swarm = swarm
        await self.orchestrator.update_agents(swarm.agents, entry_agent=swarm.entry_agent)
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
        what = (f"; changed: {', '.join(changed)}; restarted: {', '.join(processes) or 'none running'}"
                " (history kept)" if changed else "; no agent changed")
        what += "".join(f"; Connections {kind}: {', '.join(names)}" for kind, names in connections.items() if names)
        _log.info("bundle reloaded%s", what, extra={"event": "orchestrator.bundleReloaded"})

    async def _control_request(self, request: JsonObject) -> JsonObject:
        """``{"command": "request", "input", "agent"?, "instanceKey"?, "timeoutMs"?}``: one
        message to an agent (default: the entry agent), for scripts and headless runs."""
        from goondan.types import AgentEvent

        agent = request.get("agent") or self.swarm.entry_agent
        key = str(request.get("instanceKey") or "control")
        event = AgentEvent(type="message", input=str(request.get("input") or ""), instance_key=key,
                           source={"kind": "connector", "name": "control"})
        timeout = request.get("timeoutMs")
        answer = await self.orchestrator.request(
            str(agent), event, instance_key=key, timeout_ms=int(timeout) if timeout else None
        )
        error = answer.metadata.get("error")
        if isinstance(error, dict):
            return {"ok": False, "code": error.get("code"), "message": error.get("message")}
        return {"ok": True, "agent": agent, "instanceKey": key, "response": answer.input or ""}

    async def _on_control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await reader.readline()
            request = json.loads(line or b"{}")
            command = request.get("command")
            if command == "restart":
                agent, key = request.get("agent"), request.get("instanceKey")
                restarted = await self.restart(agent if isinstance(agent, str) else None,
                                               fresh=bool(request.get("fresh")),
                                               instance_key=key if isinstance(key, str) else None)
                answer: JsonObject = {"ok": True, "restarted": restarted}
            elif command == "stop":
                # The front-end owns the stop (headless: its SIGTERM handler; chat: leaves the
                # prompt), so the graceful path is the one SIGTERM already takes.
                answer = {"ok": True, "pid": os.getpid()}
                asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
            elif command == "request":
                answer = await self._control_request(request)
            elif command == "status":
                answer = {"ok": True, **self.orchestrator.status_document(),
                          "connections": self.connections.snapshot(), "instanceKey": self.instance_key,
                          "runtimeKey": self.key, "bundle": str(self.bundle.root), "watch": self.watch,
                          "logDir": str(self.log_dir), "usage": self.ledger.to_dict()}
            else:
                answer = {"ok": False, "code": "E_RUN_CONTROL", "message": f"unknown command {command!r}"}
        except AgentError as err:
            answer = {"ok": False, "code": err.code, "message": err.message, "suggestion": err.suggestion}
        except (ValueError, AttributeError) as exc:
            answer = {"ok": False, "code": "E_RUN_CONTROL", "message": str(exc)}
        with contextlib.suppress(OSError):
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
            writer.close()
