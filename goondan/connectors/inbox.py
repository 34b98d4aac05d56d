"""The durable per-Connection inbox: accepted connector events and the claims of their Turns.

The mechanism is the one of every durable input (:mod:`goondan.swarm.durable_inputs`): an
input queue of the store (``StorageBackend.queue``, scope ``connections/<swarm>/<connection>``)
holding one record per accepted event, written before ``ctx.emit`` returns; claims of the
Turns' starts; redelivery at orchestrator start; compaction (:mod:`goondan.workspace.inbox`).
This module places it per Connection, next to the connector's state directory, and reads its
records as :class:`ConnectorEvent`.

Layout on the JSONL state root (under the bundle's workspace, so two bundles never share an
inbox); with ``goondan run --store`` only ``state/`` is here, the queue is the store's::

    <state_root>/workspaces/<workspaceId>/connections/<swarm>/<connection>/
        inbox.jsonl                 one record per accepted event, in acceptance order
        started/<process>.jsonl     {"id"} per event whose Turn started (one file per agent process)
        state/                      ctx.state_dir of the connector (cursors, offsets)

Writers: the orchestrator is the only writer of the queue (every ``ctx.emit`` reaches it over
IPC, so connector restarts or orphans never make a second writer). An event is *pending* when
it is in the queue and not claimed: those are delivered again, in inbox order, when the
orchestrator starts (docs/connectors.md, "Delivery guarantee").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from goondan.connectors.event import ConnectorEvent
from goondan.errors import GoondanError
from goondan.ipc.logs import safe_key
from goondan.storage.jsonl import JsonlQueue, marker_name
from goondan.types import JsonObject
from goondan.workspace.files import private_dirs
from goondan.workspace.inbox import COMPACT_MIN_CONSUMED, InboxEntry
from goondan.workspace.paths import StateLayout, workspace_id_for

if TYPE_CHECKING:
    from goondan.storage.contract import InputQueue

__all__ = ["COMPACT_MIN_CONSUMED", "ConnectionInbox", "InboxRecord", "connection_dir",
           "valid_entry"]


def connection_dir(state_root: Path, bundle_root: Path, package_name: str | None,
                   swarm: str, connection: str) -> Path:
    """The directory of one Connection's inbox, markers and connector state."""
    workspace = StateLayout(Path(state_root)).workspace_dir(
        workspace_id_for(bundle_root, package_name)
    )
    return workspace / "connections" / safe_key(swarm) / safe_key(connection)


@dataclass(frozen=True)
class InboxRecord:
    """One accepted event and where it was routed when accepted."""

    event: ConnectorEvent
    agent: str
    instance_key: str
    accepted_at: str

    def to_dict(self) -> JsonObject:
        return {
            "event": self.event.to_dict(),
            "agent": self.agent,
            "instanceKey": self.instance_key,
            "acceptedAt": self.accepted_at,
        }

    @classmethod
    def from_dict(cls, data: JsonObject) -> InboxRecord:
        return cls(ConnectorEvent.from_dict(data["event"]), str(data["agent"]),
                   str(data["instanceKey"]), str(data.get("acceptedAt") or ""))

    @classmethod
    def of(cls, entry: InboxEntry) -> InboxRecord:
        """The record of an inbox entry (raises ``ConnectorEventError`` for an invalid event)."""
        return cls(
            ConnectorEvent.from_dict(entry.event),
            entry.agent,
            entry.instance_key,
            entry.accepted_at,
        )


def valid_entry(entry: InboxEntry) -> bool:
    """True when an entry read back holds a valid connector event (the ``accept`` of a
    Connection's queue)."""
    try:
        ConnectorEvent.from_dict(entry.event)
    except (KeyError, TypeError, GoondanError):
        return False
    return True


class ConnectionInbox:
    """One Connection's inbox (see the module docstring), used by the orchestrator only:
    ``queue`` (a store's queue of ``scope``; by default the JSONL queue of ``directory``) and the
    connector's ``ctx.state_dir``, which stays on this machine, under ``directory``."""

    def __init__(self, directory: Path, queue: InputQueue | None = None,
                 scope: str = "") -> None:
        self.directory = Path(directory)
        self.state_dir = self.directory / "state"
        self.queue: InputQueue = (
            JsonlQueue(self.directory, marker_name, valid_entry) if queue is None else queue)
        self.scope = scope

    def __repr__(self) -> str:
        return f"<ConnectionInbox {self.scope or str(self.directory)!r}>"

    def open(self) -> list[InboxRecord]:
        """Open for appending; returns the pending records (accepted, Turn not started)."""
        pending = self.queue.open_entries()
        private_dirs(self.state_dir)
        return [InboxRecord.of(entry) for entry in pending]

    def seen(self, event_id: str) -> bool:
        """True when an event with this id was accepted already."""
        return self.queue.seen(event_id)

    def append(self, event: ConnectorEvent, agent: str, instance_key: str) -> InboxRecord:
        """Store one record durably before the event is acknowledged; returns it."""
        entry = self.queue.append_entry(event.to_dict(), agent, instance_key)
        return InboxRecord(event, agent, instance_key, entry.accepted_at)

    def close(self) -> None:
        self.queue.close()
