"""The Connections of one running Swarm: ingress, connector processes and the ``cli`` feed.

:class:`ConnectionRuntime` is what :class:`goondan.swarm.service.SwarmService` starts after the
orchestrator: it opens the inboxes (delivering events accepted before a crash), starts one
supervised connector process per Connection of the running Swarm and stops them on shutdown.

A Connection of the built-in ``cli`` connector gets no process: a child process has no
terminal. ``goondan run`` feeds it instead — terminal chat, piped stdin, ``--input`` and
``--input-file`` lines go through :meth:`ConnectionRuntime.cli_event`, so the Connection's
ingress rules apply exactly as for any connector. Connections bound to another Swarm are
logged as not started; none is ignored silently.

Before anything is spawned, a listening Connection (``webhook``, ``github``, ``slack``,
``discord``) without a signing secret in the environment refuses the whole start with
``E_CONNECTOR_UNSIGNED`` unless it sets ``ALLOW_UNSIGNED: "true"``
(:mod:`goondan.connectors.signing`), so
``goondan run`` and ``goondan run -d`` print it on the terminal instead of in a log file.

Under ``goondan run --watch`` :meth:`ConnectionRuntime.reload` applies a new bundle: a
Connection whose spec or connector entry file changed gets the new rules and its process is
restarted, an added one is opened and started, a removed one is stopped (docs/connectors.md
"Processes and supervision").
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from goondan.connectors.cli import parse_cli_line
from goondan.connectors.inbox import ConnectionInbox, connection_dir, valid_entry
from goondan.connectors.signing import check_connections_signed
from goondan.connectors.spec import (
    ConnectionSpec,
    connections_for_swarm,
    fingerprint,
    other_connections,
)
from goondan.storage.jsonl import JsonlBackend
from goondan.swarm.connector_supervisor import ConnectorSupervisor
from goondan.swarm.durable_inputs import connection_scope
from goondan.swarm.ingress import Ingress
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import Spawner
from goondan.types import AgentEvent, JsonObject
from goondan.workspace.paths import workspace_id_for

__all__ = ["ConnectionRuntime"]

_log = logging.getLogger("goondan.connectors")

# How long a connector may take to finish its run(ctx) after ``shutdown`` before SIGKILL.
CONNECTOR_GRACE_MS = 5_000


class ConnectionRuntime:
    """Ingress + connector supervision for the Swarm ``swarm`` of ``bundle``."""

    def __init__(
        self,
        bundle: Any,
        swarm: Any,
        orchestrator: Orchestrator,
        spawner: Spawner,
        *,
        state_root: Path,
        grace_period_ms: int = CONNECTOR_GRACE_MS,
        logger: logging.Logger | None = None,
        storage: Any = None,
    ) -> None:
        self.logger = logger or _log
        self.swarm_name: str = swarm.name
        self.connections: list[ConnectionSpec] = connections_for_swarm(bundle, swarm.name)
        self.skipped: list[ConnectionSpec] = other_connections(bundle, swarm.name)
        check_connections_signed(self.connections, os.environ)
        dirs = {
            c.name: connection_dir(state_root, bundle.root, bundle.package_name, swarm.name, c.name)
            for c in self.connections
        }
        # the inboxes are queues of the store: the state root's (JSONL) or ``storage``
        store = storage if storage is not None else JsonlBackend(state_root)
        workspace = workspace_id_for(bundle.root, bundle.package_name)

        def inbox_of(name: str, directory: Path) -> ConnectionInbox:
            scope = connection_scope(swarm.name, name)
            return ConnectionInbox(directory, store.queue(workspace, scope, valid_entry), scope)

        self.ingress = Ingress(orchestrator, self.connections, dirs, entry_agent=swarm.entry_agent,
                               logger=self.logger, inbox_of=inbox_of)
        self.cli: ConnectionSpec | None = next((c for c in self.connections if c.is_cli), None)
        self.supervisor = ConnectorSupervisor(
            spawner, self.ingress, [c for c in self.connections if not c.is_cli],
            grace_period_ms=grace_period_ms, logger=self.logger,
        )
        self._cli_line = 0
        self._state_root = Path(state_root)
        self._fingerprints = {c.name: fingerprint(c) for c in self.connections}

    def __repr__(self) -> str:
        return (
            f"<ConnectionRuntime swarm={self.swarm_name!r} "
            f"connections={[c.name for c in self.connections]}>"
        )

    async def start(self) -> None:
        """Deliver what the inboxes hold, then start the connector processes."""
        for spec in self.skipped:
            self.logger.info(
                "Connection %s is bound to Swarm %s, not %s: not started",
                spec.name,
                spec.swarm,
                self.swarm_name,
                extra={"event": "connector.otherSwarm", "connection": spec.name},
            )
        if self.cli is not None:
            self.logger.info(
                "Connection %s (cli) is fed by goondan run's terminal, piped stdin, --input "
                "and --input-file",
                self.cli.name,
                extra={"event": "connector.cliFrontEnd", "connection": self.cli.name},
            )
        await self.ingress.open()
        self.supervisor.start()

    async def stop(self) -> None:
        """Stop every connector process, then close the inboxes."""
        await self.supervisor.shutdown()
        self.ingress.close()

    async def reload(self, bundle: Any) -> dict[str, list[str]]:
        """Apply a reloaded bundle (``--watch``); returns the Connections ``restarted``,
        ``updated`` (a ``cli`` Connection's rules: it has no process), ``added`` and ``removed``."""
        new = {c.name: c for c in connections_for_swarm(bundle, self.swarm_name)}
        prints = {name: fingerprint(c) for name, c in new.items()}
        old = {c.name: c for c in self.connections}
        changes: dict[str, list[str]] = {"restarted": [], "updated": [], "added": [], "removed": []}
        # The cli Connection is fed by goondan run itself: it cannot appear, vanish or change
        # kind while running. Such a change keeps the running state and says so.
        for name in sorted(set(old) | set(new)):
            was, now = old.get(name), new.get(name)
            if (was is not None and was.is_cli) == (now is not None and now.is_cli):
                continue
            self.logger.warning(
                "Connection %s: a cli Connection was added, removed or changed kind; restart "
                "goondan run to apply it",
                name,
                extra={"event": "connector.reloadDeferred", "connection": name},
            )
            if was is None:
                del new[name], prints[name]
            else:
                new[name], prints[name] = was, self._fingerprints[name]
        for name in [n for n in old if n not in new]:
            await self.supervisor.remove(name)
            self.ingress.remove_connection(name)
            changes["removed"].append(name)
        for name, spec in new.items():
            if name in old and prints[name] != self._fingerprints[name]:
                self.ingress.update_connection(spec)
                if spec.is_cli:  # no process: the new rules are all there is to apply
                    changes["updated"].append(name)
                else:
                    await self.supervisor.replace(spec)
                    changes["restarted"].append(name)
            elif name not in old:
                directory = connection_dir(self._state_root, bundle.root, bundle.package_name,
                                           self.swarm_name, name)
                await self.ingress.add_connection(spec, directory)
                self.supervisor.add(spec)
                changes["added"].append(name)
        self.connections = list(new.values())
        self.skipped = other_connections(bundle, self.swarm_name)
        self._fingerprints = {name: prints[name] for name in new}
        if self.cli is not None:
            self.cli = new.get(self.cli.name, self.cli)
        for kind, names in changes.items():
            if names:
                self.logger.info("Connections %s: %s", kind, ", ".join(names),
                                 extra={"event": f"connector.{kind}", "connections": names})
        return changes

    def snapshot(self) -> list[JsonObject]:
        """Status rows of the connector processes."""
        return self.supervisor.snapshot()

    async def cli_event(self, line: str) -> tuple[str, AgentEvent] | None:
        """Accept one terminal line on the ``cli`` Connection: ``(agent, event)`` to send as a
        request, or ``None`` for a blank line or a line no ingress rule matches (dropped). Only
        valid when :attr:`cli` is set."""
        assert self.cli is not None
        index, self._cli_line = self._cli_line, self._cli_line + 1
        event = parse_cli_line(line, index)
        if event is None:
            return None
        accepted = await self.ingress.accept(self.cli.name, event, submit=False)
        if accepted.agent is None or accepted.event is None:
            return None  # matched no ingress rule: dropped, the ingress logged why
        return accepted.agent, accepted.event
