"""The durable per-Connection inbox: accepted connector events and the claims of their Turns.

The mechanism is the one of every durable input (:mod:`goondan.workspace.inbox`: one record per
accepted event, one ``O_APPEND`` write before ``ctx.emit`` returns; claim files; redelivery at
orchestrator start; compaction). This module places it per Connection and reads its records as
:class:`ConnectorEvent`.

Layout (under the bundle's workspace, so two bundles never share an inbox)::

    <state_root>/workspaces/<workspaceId>/connections/<swarm>/<connection>/
        inbox.jsonl                 one record per accepted event, in acceptance order
        started/<process>.jsonl     {"id"} per event whose Turn started (one file per agent process)
        state/                      ctx.state_dir of the connector (cursors, offsets)

Writers: the orchestrator is the only writer of ``inbox.jsonl`` (every ``ctx.emit`` reaches it
over IPC, so connector restarts or orphans never make a second writer). An event is *pending*
when it is in the inbox and not claimed: those are delivered again, in inbox order, when the
orchestrator starts (docs/connectors.md, "Delivery guarantee").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from goondan.connectors.event import ConnectorEvent
from goondan.errors import ConnectorEventError
from goondan.ipc.logs import process_name, safe_key
from goondan.types import JsonObject
from goondan.workspace.files import private_dirs
from goondan.workspace.inbox import COMPACT_MIN_CONSUMED, DurableInbox, InboxEntry
from goondan.workspace.paths import StateLayout, workspace_id_for

__all__ = ["COMPACT_MIN_CONSUMED", "ConnectionInbox", "InboxRecord", "connection_dir"]


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


def _valid(entry: InboxEntry) -> bool:
    try:
        ConnectorEvent.from_dict(entry.event)
    except (KeyError, TypeError, ConnectorEventError):
        return False
    return True


class ConnectionInbox(DurableInbox):
    """One Connection's inbox (see the module docstring); used by the orchestrator only."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, process_name, accept=_valid)
        self.state_dir = self.directory / "state"

    def _make_dirs(self) -> None:
        super()._make_dirs()
        private_dirs(self.state_dir)

    def open(self) -> list[InboxRecord]:
        """Open for appending; returns the pending records (accepted, Turn not started)."""
        return [InboxRecord.of(entry) for entry in self.open_entries()]

    def append(self, event: ConnectorEvent, agent: str, instance_key: str) -> InboxRecord:
        """Append and flush one record (a single ``write``); returns it."""
        entry = self.append_entry(event.to_dict(), agent, instance_key)
        return InboxRecord(event, agent, instance_key, entry.accepted_at)

