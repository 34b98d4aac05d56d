"""The Swarm's durable inbox: every input the orchestrator accepts that no Connection stored.

``goondan send`` (a control ``request``), a ``goondan run --input``/``--input-file`` line, the
chat, an agent's ``ctx.agents.request``/``send``: each reaches
:meth:`Orchestrator.submit <goondan.swarm.orchestrator.Orchestrator.submit>` or arrives as an
agent event and is queued by the orchestrator's ``_enqueue``. Before it is queued — so before a
``send`` is acknowledged — :meth:`SwarmInbox.record` appends it to the Swarm's inbox (the
mechanism of :mod:`goondan.workspace.inbox`, the same as the connector inboxes') and gives it a
start marker (:attr:`AgentEvent.start_marker`): the agent process claims its id just before
the Turn starts and skips a Turn whose id was claimed already. A connector event already has a
marker (its Connection's inbox) and is not stored twice.

:meth:`SwarmInbox.open` (at orchestrator start, before anything new is accepted) queues every
pending input again, in acceptance order, so each input runs exactly once, in order per
(agent, instanceKey), across orchestrator SIGKILLs (docs/orchestrator.md "Durable inputs").

Layout::

    <state_root>/workspaces/<workspaceId>/inputs/<swarm>/
        inbox.jsonl, started/<process>.jsonl      (goondan.workspace.inbox)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from goondan.errors import GoondanError
from goondan.ipc.logs import process_name, safe_key
from goondan.types import AgentEvent
from goondan.workspace.inbox import DurableInbox
from goondan.workspace.paths import StateLayout, workspace_id_for

if TYPE_CHECKING:
    from goondan.swarm.orchestrator import Orchestrator

__all__ = ["SwarmInbox", "inputs_dir"]

_log = logging.getLogger("goondan.swarm.durable_inputs")


def inputs_dir(state_root: Path, bundle_root: Path, package_name: str | None, swarm: str) -> Path:
    """The directory of a Swarm's durable inbox."""
    workspace = StateLayout(Path(state_root)).workspace_dir(
        workspace_id_for(bundle_root, package_name)
    )
    return workspace / "inputs" / safe_key(swarm)


class SwarmInbox(DurableInbox):
    """The Swarm's inbox (see the module docstring); written by the orchestrator only."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, process_name)

    def _mark(self, agent: str, event: AgentEvent) -> None:
        event.start_marker = {
            "path": str(self.marker_path(agent, event.instance_key or "default")), "id": event.id}

    def record(self, agent: str, event: AgentEvent) -> None:
        """Store ``event`` (to be queued on ``agent``) unless it is stored already (it has a
        start marker); raises ``WorkspaceError`` when it cannot be (it is not accepted)."""
        if event.start_marker is not None:
            return
        wire = event.to_dict()
        wire.pop("stream", None)  # nobody streams a redelivery
        self.append_entry(wire, agent, event.instance_key or "default")
        self._mark(agent, event)

    async def open(self, orchestrator: Orchestrator) -> int:
        """Open, then queue every pending input again, in order; returns how many."""
        pending = self.open_entries()
        for entry in pending:
            try:
                event = AgentEvent.from_dict(entry.event)
            except (KeyError, TypeError, ValueError):
                _log.warning("undecodable input %s in %s; skipped", entry.id, self.path)
                continue
            event.instance_key = entry.instance_key
            self._mark(entry.agent, event)
            try:
                await orchestrator.submit(entry.agent, event)
            except GoondanError as err:  # its agent left the Swarm: it waits here for it
                _log.warning(
                    "input %s for %s not delivered: %s", entry.id, entry.agent, err.message
                )
        if pending:
            _log.info("%d accepted input(s) had not started; delivering them", len(pending),
                      extra={"event": "inputs.replayed", "count": len(pending)})
        return len(pending)
