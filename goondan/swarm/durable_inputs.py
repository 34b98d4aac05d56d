"""Durable inputs: the Swarm's inbox and the start markers of every queued input
(docs/orchestrator.md "Durable inputs").

Every input the orchestrator acknowledges is in an input queue of the store
(:class:`~goondan.storage.contract.InputQueue`, ``StorageBackend.queue``) before it is
acknowledged: a connector event in its Connection's (``connections/<swarm>/<connection>``,
:class:`goondan.connectors.inbox.ConnectionInbox`, written by the ingress), everything else —
``goondan send`` (a control ``request``), a ``goondan run --input``/``--input-file`` line, the
chat, an agent's ``ctx.agents.request``/``send`` — in the Swarm's (``inputs/<swarm>``,
:class:`SwarmInbox`). The same code runs on both backends: on the JSONL state root the queue is
the :class:`~goondan.storage.jsonl.JsonlQueue` of that directory under the workspace
(``inbox.jsonl``, ``started/<process>.jsonl``), on PostgreSQL rows of ``goondan_inbox``.

A queued input carries a *start marker* (:attr:`AgentEvent.start_marker`, :func:`start_marker`)
saying where the agent process that runs it claims its start (:func:`claim_in_queue`, just
before the Turn) and makes it final (:func:`confirm_in_queue`, after), so each input starts
exactly once:

* a JSONL queue: ``{"path": <claim file>, "id"}`` — the claim file itself, so whatever runs the
  instance claims it without being told the store (an agent process, an instance of a pooled
  or Ray host on the shared state root); the marker every version wrote;
* a store queue: ``{"queue": <scope>, "id"}`` — the agent process claims it in the store it
  opened (``AgentWorker.queues``).

:meth:`SwarmInbox.open` (at orchestrator start, before anything new is accepted) queues every
pending input again, in acceptance order, so each input runs exactly once, in order per
(agent, instanceKey), across orchestrator SIGKILLs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from goondan.errors import GoondanError
from goondan.ipc.logs import safe_key
from goondan.storage.jsonl import JsonlQueue
from goondan.types import AgentEvent, JsonObject

if TYPE_CHECKING:
    from goondan.storage.contract import InputQueue, StorageBackend
    from goondan.swarm.orchestrator import Orchestrator

__all__ = [
    "QUEUE_KEY", "SwarmInbox", "claim_in_queue", "confirm_in_queue", "connection_scope",
    "inputs_scope", "marker_queue", "start_marker",
]

_log = logging.getLogger("goondan.swarm.durable_inputs")

QUEUE_KEY = "queue"  # a start marker's key naming a store queue
PATH_KEY = "path"  # a start marker's key naming a JSONL claim file


def inputs_scope(swarm: str) -> str:
    """The queue scope of a Swarm's inbox (the JSONL directory ``inputs/<swarm>``)."""
    return f"inputs/{safe_key(swarm)}"


def connection_scope(swarm: str, connection: str) -> str:
    """The queue scope of a Connection's inbox (``connections/<swarm>/<connection>``)."""
    return f"connections/{safe_key(swarm)}/{safe_key(connection)}"


def start_marker(queue: InputQueue, scope: str, agent: str, instance_key: str,
                 input_id: str) -> JsonObject:
    """Where the start of ``input_id`` (queued in ``queue``, of ``scope``, for (agent,
    instanceKey)) is claimed: a JSONL queue's claim file, else the store queue's scope."""
    if isinstance(queue, JsonlQueue):
        return {PATH_KEY: str(queue.marker_path(agent, instance_key)), "id": input_id}
    return {QUEUE_KEY: scope, "id": input_id}


def marker_queue(marker: JsonObject | None,
                 queues: Callable[[str], InputQueue] | None) -> tuple[InputQueue, str] | None:
    """``(queue, input id)`` of a start marker: the JSONL queue of its claim file, or the store
    queue of its scope (``queues``, None when this process has no store); None for no marker."""
    ident = None if marker is None else marker.get("id")
    if marker is None or not isinstance(ident, str):
        return None
    path, scope = marker.get(PATH_KEY), marker.get(QUEUE_KEY)
    if isinstance(path, str):
        return JsonlQueue.of_claim_file(Path(path)), ident
    if isinstance(scope, str) and queues is not None:
        return queues(scope), ident
    return None


def claim_in_queue(queue: InputQueue, agent: str, instance_key: str, input_id: str,
                   written: bool) -> bool:
    """Reserve the start of ``input_id`` for this process (the agent process side of
    :meth:`InputQueue.claim`); False when another process started it or runs it (``written``:
    this process's conversation already holds the input). A queue that cannot be used is
    logged and the Turn runs (the input may then run again after a crash)."""
    from goondan.workspace.claims import owner_token

    try:
        return queue.claim(agent, instance_key, input_id, owner=owner_token(), written=written)
    except GoondanError as err:
        _log.warning("cannot record the start of event %s: %s", input_id, err.message)
        return True


def confirm_in_queue(queue: InputQueue, agent: str, instance_key: str, input_id: str) -> None:
    """Make the start of ``input_id`` final (logged when the queue cannot be used)."""
    try:
        queue.confirm(agent, instance_key, input_id)
    except GoondanError as err:
        _log.warning("cannot record the start of event %s: %s", input_id, err.message)


class SwarmInbox:
    """The Swarm's inbox (see the module docstring); written by the orchestrator only."""

    def __init__(self, queue: InputQueue, scope: str) -> None:
        self.queue = queue
        self.scope = scope

    @classmethod
    def of(cls, storage: StorageBackend, workspace_id: str, swarm: str) -> SwarmInbox:
        """The inbox of Swarm ``swarm`` in the store ``storage``."""
        scope = inputs_scope(swarm)
        return cls(storage.queue(workspace_id, scope), scope)

    def __repr__(self) -> str:
        return f"<SwarmInbox {self.scope!r} {self.queue!r}>"

    def _mark(self, agent: str, event: AgentEvent) -> None:
        event.start_marker = start_marker(self.queue, self.scope, agent,
                                          event.instance_key or "default", event.id)

    def record(self, agent: str, event: AgentEvent) -> None:
        """Store ``event`` (to be queued on ``agent``) unless it is stored already (it has a
        start marker); raises a ``GoondanError`` when it cannot be (it is not accepted)."""
        if event.start_marker is not None:
            return
        wire = event.to_dict()
        wire.pop("stream", None)  # nobody streams a redelivery
        self.queue.append_entry(wire, agent, event.instance_key or "default")
        self._mark(agent, event)

    async def open(self, orchestrator: Orchestrator) -> int:
        """Open, then queue every pending input again, in order; returns how many."""
        pending = await asyncio.to_thread(self.queue.open_entries)
        for entry in pending:
            try:
                event = AgentEvent.from_dict(entry.event)
            except (KeyError, TypeError, ValueError):
                _log.warning("undecodable input %s in %s; skipped", entry.id, self.scope)
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

    def close(self) -> None:
        self.queue.close()
