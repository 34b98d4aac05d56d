"""``goondan run`` on a store other than its JSONL state root (``--store postgresql://…``,
docs/storage.md, docs/orchestrator.md "The store").

With the JSONL state root (no ``--store``) nothing here is used: the Swarm's inbox is
:class:`goondan.swarm.durable_inputs.SwarmInbox`, a Connection's is
:class:`goondan.connectors.inbox.ConnectionInbox`, and an input's start marker names a claim
file (``{"path", "id"}``), exactly as before.

With a store backend (:class:`~goondan.storage.contract.StorageBackend`) the same inputs go to
the backend's queues (:meth:`StorageBackend.queue`) under the scopes the JSONL layout uses as
directories — ``inputs/<swarm>`` and ``connections/<swarm>/<connection>`` — and a start marker
names the queue instead of a file: ``{"queue": scope, "id"}``. The agent process that runs the
input claims and confirms its start in that queue (:func:`claim_in_queue`), so each input
still starts exactly once. What stays on the machine (the connector's ``ctx.state_dir``, logs,
the control socket, pid files) stays under the local state root.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.connectors.event import ConnectorEvent
from goondan.connectors.inbox import InboxRecord
from goondan.errors import GoondanError
from goondan.ipc.logs import safe_key
from goondan.storage.url import ENV_STORE, StoreLocation
from goondan.types import AgentEvent, JsonObject
from goondan.workspace.files import private_dirs
from goondan.workspace.inbox import InboxEntry

if TYPE_CHECKING:
    from goondan.storage.contract import InputQueue, StorageBackend
    from goondan.swarm.orchestrator import Orchestrator

__all__ = [
    "QueueConnectionInbox", "QueueSwarmInbox", "check_same_store", "claim_in_queue",
    "connection_scope",
    "inputs_scope", "queue_marker", "resume_interrupted", "turn_origin_in",
]

_log = logging.getLogger("goondan.swarm.durable_inputs")

QUEUE_KEY = "queue"  # the start marker's key naming a store queue (vs "path": a claim file)


def inputs_scope(swarm: str) -> str:
    """The queue scope of a Swarm's inbox (the JSONL directory ``inputs/<swarm>``)."""
    return f"inputs/{safe_key(swarm)}"


def connection_scope(swarm: str, connection: str) -> str:
    """The queue scope of a Connection's inbox (``connections/<swarm>/<connection>``)."""
    return f"connections/{safe_key(swarm)}/{safe_key(connection)}"


def queue_marker(marker: JsonObject | None) -> tuple[str, str] | None:
    """``(scope, input id)`` of a start marker that names a store queue, else None."""
    if marker is None:
        return None
    scope, ident = marker.get(QUEUE_KEY), marker.get("id")
    if isinstance(scope, str) and isinstance(ident, str):
        return scope, ident
    return None


def claim_in_queue(queue: InputQueue, agent: str, instance_key: str, input_id: str,
                   written: bool) -> bool:
    """Reserve the start of ``input_id`` for this process (the agent process side of
    :meth:`InputQueue.claim`); False when another process started it or runs it. A store that
    cannot be reached is logged and the Turn runs, as with a claim file that cannot be used."""
    from goondan.workspace.claims import owner_token

    try:
        return queue.claim(agent, instance_key, input_id, owner=owner_token(), written=written)
    except GoondanError as err:
        _log.warning("cannot record the start of event %s: %s", input_id, err.message)
        return True


def confirm_in_queue(queue: InputQueue, agent: str, instance_key: str, input_id: str) -> None:
    """Make the start of ``input_id`` final (logged when the store cannot be reached)."""
    try:
        queue.confirm(agent, instance_key, input_id)
    except GoondanError as err:
        _log.warning("cannot record the start of event %s: %s", input_id, err.message)


class QueueSwarmInbox:
    """The Swarm's inbox in a store queue: :class:`~goondan.swarm.durable_inputs.SwarmInbox`'s
    ``record``/``open``/``close``, the inputs written to ``storage.queue(...)``."""

    def __init__(self, storage: StorageBackend, workspace_id: str, swarm: str) -> None:
        self.scope = inputs_scope(swarm)
        self.queue = storage.queue(workspace_id, self.scope)

    def __repr__(self) -> str:
        return f"<QueueSwarmInbox {self.scope!r}>"

    def _mark(self, event: AgentEvent) -> None:
        event.start_marker = {QUEUE_KEY: self.scope, "id": event.id}

    def record(self, agent: str, event: AgentEvent) -> None:
        """Store ``event`` (committed before it is acknowledged) unless it is stored already."""
        if event.start_marker is not None:
            return
        wire = event.to_dict()
        wire.pop("stream", None)  # nobody streams a redelivery
        self.queue.append_entry(wire, agent, event.instance_key or "default")
        self._mark(event)

    async def open(self, orchestrator: Orchestrator) -> int:
        """Queue every pending input again, in acceptance order; returns how many."""
        import asyncio

        pending = await asyncio.to_thread(self.queue.open_entries)
        for entry in pending:
            try:
                event = AgentEvent.from_dict(entry.event)
            except (KeyError, TypeError, ValueError):
                _log.warning("undecodable input %s in %s; skipped", entry.id, self.scope)
                continue
            event.instance_key = entry.instance_key
            self._mark(event)
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


def _valid(entry: InboxEntry) -> bool:
    try:
        ConnectorEvent.from_dict(entry.event)
    except (KeyError, TypeError, GoondanError):
        return False
    return True


class QueueConnectionInbox:
    """A Connection's inbox in a store queue, with the interface of
    :class:`~goondan.connectors.inbox.ConnectionInbox` that the ingress uses; ``state_dir`` (the
    connector's ``ctx.state_dir``) stays on this machine, under ``directory``."""

    def __init__(self, storage: StorageBackend, workspace_id: str, swarm: str, connection: str,
                 directory: Path) -> None:
        self.scope = connection_scope(swarm, connection)
        self.queue = storage.queue(workspace_id, self.scope)
        self.state_dir = Path(directory) / "state"

    def __repr__(self) -> str:
        return f"<QueueConnectionInbox {self.scope!r}>"

    def open(self) -> list[InboxRecord]:
        private_dirs(self.state_dir)
        return [InboxRecord.of(e) for e in self.queue.open_entries() if _valid(e)]

    def seen(self, event_id: str) -> bool:
        return self.queue.seen(event_id)

    def append(self, event: ConnectorEvent, agent: str, instance_key: str) -> InboxRecord:
        entry = self.queue.append_entry(event.to_dict(), agent, instance_key)
        return InboxRecord(event, agent, instance_key, entry.accepted_at)

    def marker_path(self, agent: str, instance_key: str) -> JsonObject:
        """The start marker's location (the event id is added): this queue."""
        return {QUEUE_KEY: self.scope}

    def close(self) -> None:
        self.queue.close()


def _database(url: str) -> tuple[str, int, str]:
    """(host, port, database) of a PostgreSQL URL: two URLs of one database may differ in
    their user, password or options."""
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    try:
        port = parts.port or int(query.get("port") or 5432)
    except ValueError:
        port = 0
    return (parts.hostname or query.get("host") or "", port,
            parts.path.lstrip("/") or query.get("dbname") or "")


def check_same_store(active: Any, location: StoreLocation, *, where: str) -> None:
    """``E_STORE_MISMATCH`` unless ``location`` (a parsed ``--store``/``GOONDAN_STORE``) may
    talk to the running swarm ``active`` (its :class:`~goondan.swarm.state.ActiveRuntime`):
    a PostgreSQL store must be the swarm's; a swarm on PostgreSQL needs its URL when ``where``
    is ``GOONDAN_STORE`` (a restart starts it again from that variable)."""
    from goondan.errors import ConfigError

    store = getattr(active, "store", None)
    if location.kind != "postgres" and (store is None or where != ENV_STORE):
        return
    if location.kind == "postgres" and store is not None and (
            _database(store) == _database(location.display)):
        return
    runs_on = store or "its JSONL state root"
    given = location.display if location.kind == "postgres" else "no PostgreSQL URL"
    raise ConfigError(
        f"the running swarm {active.swarm!r} keeps its state in {runs_on}; {where} gives "
        f"{given}", code="E_STORE_MISMATCH", location=where,
        suggestion="give the store the swarm was started with (its runtime record shows it, "
        "masked)")


def turn_origin_in(storage: StorageBackend, workspace_id: str, agent: str,
                   instance_key: str) -> dict[str, Any] | None:
    """:func:`goondan.swarm.approval_relay.turn_origin` read from a store backend."""
    for found_agent, key, opened in storage.open_turns(workspace_id):
        if (found_agent, key) == (agent, instance_key):
            metadata = opened.input.get("metadata")
            props = metadata.get("properties") if isinstance(metadata, dict) else None
            return dict(props) if isinstance(props, dict) else {}
    return None


async def resume_interrupted(orchestrator: Orchestrator, state_root: Path, workspace_id: str,
                             storage: StorageBackend | None) -> None:
    """Spawn every instance whose last Turn was cut short (every process killed): its new
    process resumes the Turn (docs/orchestrator.md "Crashes"). ``storage`` None: the JSONL
    state root ``state_root``."""
    import asyncio

    from goondan.workspace.journal import interrupted_instances

    if storage is None:
        found = await asyncio.to_thread(interrupted_instances, state_root, workspace_id)
    else:
        found = await asyncio.to_thread(storage.interrupted_instances, workspace_id)
    for agent, key in found:
        if agent in orchestrator.agents:
            _log.info("resuming the interrupted turn of %s@%s", agent, key,
                      extra={"event": "orchestrator.resumeAtStart", "agentName": agent,
                             "instanceKey": key})
            await orchestrator.spawn_instance(agent, key)
