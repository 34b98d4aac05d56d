"""The durable per-Connection inbox: accepted events and the markers of started Turns.

Layout (under the bundle's workspace, so two bundles never share an inbox)::

    <state_root>/workspaces/<workspaceId>/connections/<swarm>/<connection>/
        inbox.jsonl                 one record per accepted event, in acceptance order
        started/<process>.jsonl     {"id"} per event whose Turn started (one file per agent process)
        state/                      ctx.state_dir of the connector (cursors, offsets)

Writers: the orchestrator is the only writer of ``inbox.jsonl`` (every ``ctx.emit`` reaches it
over IPC, so connector restarts or orphans never make a second writer). The ``started`` files
are claim files (:mod:`goondan.workspace.claims`): the agent process running (agent,
instanceKey) claims an event's id under a file lock just before its Turn starts and skips the
Turn if the id was claimed already — by an agent process orphaned by a killed orchestrator
that started it after the new orchestrator read the claims, say. Each record is one
``O_APPEND`` write, so a crash leaves at most a torn last line, which readers drop.

An event is *pending* when it is in the inbox and not claimed: those are delivered again, in
inbox order, when the orchestrator starts (docs/connectors.md, "Delivery guarantee").

Compaction: when :meth:`ConnectionInbox.open` finds at least :data:`COMPACT_MIN_CONSUMED`
*consumed* records (their Turn's start is final) and they are at least half the file, it
rewrites ``inbox.jsonl`` keeping every pending record whole and each consumed one as a
``{"consumed": id}`` line — the id alone, so a repeated id is still refused. The rewrite is a
temp file (``inbox.jsonl.compact``), fsync, rename, directory fsync: a crash at any point
leaves either the old file or the new one, and a stray temp file is removed at the next open.
Then, and only then, each claim file with that many final claims of ids the inbox now marks
consumed drops those lines (:func:`goondan.workspace.claims.compact`, the same way, under the
claim file's lock).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from goondan.connectors.event import ConnectorEvent
from goondan.errors import ConnectorEventError
from goondan.ipc.logs import process_name, safe_key
from goondan.types import JsonObject, now_iso
from goondan.workspace.claims import STARTED, claim_states, owner_alive
from goondan.workspace.claims import compact as compact_claims
from goondan.workspace.files import (
    append_or_undo,
    fsync_dir,
    io_error,
    private_dirs,
    read_bytes,
    write_all,
)
from goondan.workspace.paths import StateLayout, workspace_id_for

__all__ = ["COMPACT_MIN_CONSUMED", "ConnectionInbox", "InboxRecord", "connection_dir"]

COMPACT_MIN_CONSUMED = 1000
_CONSUMED = "consumed"


def connection_dir(state_root: Path, bundle_root: Path, package_name: str | None,
                   swarm: str, connection: str) -> Path:
    """The directory of one Connection's inbox, markers and connector state."""
    workspace = StateLayout(Path(state_root)).workspace_dir(workspace_id_for(bundle_root, package_name))
    return workspace / "connections" / safe_key(swarm) / safe_key(connection)


@dataclass(frozen=True)
class InboxRecord:
    """One accepted event and where it was routed when accepted."""

    event: ConnectorEvent
    agent: str
    instance_key: str
    accepted_at: str

    def to_dict(self) -> JsonObject:
        return {"event": self.event.to_dict(), "agent": self.agent, "instanceKey": self.instance_key,
                "acceptedAt": self.accepted_at}

    @classmethod
    def from_dict(cls, data: JsonObject) -> InboxRecord:
        return cls(ConnectorEvent.from_dict(data["event"]), str(data["agent"]),
                   str(data["instanceKey"]), str(data.get("acceptedAt") or ""))


def _read_records(path: Path) -> list[tuple[JsonObject, bytes]]:
    """Every complete JSON line of ``path`` (value, raw line); a torn last line is dropped."""
    data = read_bytes(path)
    out: list[tuple[JsonObject, bytes]] = []
    for line in data.split(b"\n")[:-1] if data else []:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue  # only a crash mid-write makes one; never in the middle for O_APPEND writers
        if isinstance(value, dict):
            out.append((value, line))
    return out


class ConnectionInbox:
    """One Connection's inbox (see the module docstring); used by the orchestrator only."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "inbox.jsonl"
        self.started_dir = self.directory / "started"
        self.state_dir = self.directory / "state"
        self._ids: set[str] = set()
        self._fd: int | None = None

    def __repr__(self) -> str:
        return f"<ConnectionInbox {str(self.directory)!r} accepted={len(self._ids)}>"

    def open(self) -> list[InboxRecord]:
        """Open for appending; returns the pending records (accepted, Turn not started)."""
        try:
            for sub in (self.directory, self.started_dir, self.state_dir):
                private_dirs(sub)
            self.compact_path.unlink(missing_ok=True)  # a compaction that crashed before its rename
            for stray in self.started_dir.glob("*.jsonl.compact"):  # the same, of a claim file
                stray.unlink(missing_ok=True)
            self._truncate_torn_tail()
            started: set[str] = set()
            finals: dict[Path, set[str]] = {}  # per claim file: the ids whose start is final
            for marker in sorted(self.started_dir.glob("*.jsonl")):
                finals[marker] = set()
                for claim_id, state in claim_states(marker).items():
                    if state == STARTED:
                        finals[marker].add(claim_id)
                    elif owner_alive(state):
                        started.add(claim_id)  # reserved by a process that runs it now
            final = set().union(*finals.values())
            started |= final
            pending: list[InboxRecord] = []
            kept: list[bytes] = []  # the lines of a compacted inbox
            tombstones: set[str] = set()  # ids already cut to {"consumed": id}
            consumed: set[str] = set()  # whole records whose start is final
            for raw, line in _read_records(self.path):
                if isinstance(raw.get(_CONSUMED), str):
                    self._ids.add(raw[_CONSUMED])
                    tombstones.add(raw[_CONSUMED])
                    kept.append(line)
                    continue
                try:
                    record = InboxRecord.from_dict(raw)
                except (KeyError, TypeError, ConnectorEventError):
                    continue
                self._ids.add(record.event.id)
                if record.event.id in final:
                    consumed.add(record.event.id)
                    kept.append(json.dumps({_CONSUMED: record.event.id}, ensure_ascii=False,
                                           separators=(",", ":")).encode())
                else:
                    kept.append(line)
                    if record.event.id not in started:
                        pending.append(record)
            if len(consumed) >= COMPACT_MIN_CONSUMED and len(consumed) * 2 >= len(kept):
                self._compact(kept)
                tombstones |= consumed
            # Only then: a final claim may go once the inbox itself says "consumed".
            for marker, ids in finals.items():
                if len(ids & tombstones) >= COMPACT_MIN_CONSUMED:
                    compact_claims(marker, tombstones)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise io_error(exc, self.path, "open") from exc
        return pending

    @property
    def compact_path(self) -> Path:
        """The temp file of a compaction (renamed over ``inbox.jsonl`` when complete)."""
        return self.directory / "inbox.jsonl.compact"

    def _compact(self, lines: list[bytes]) -> None:
        """Replace ``inbox.jsonl`` with ``lines`` atomically (see the module docstring)."""
        fd = os.open(self.compact_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, b"".join(line + b"\n" for line in lines))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.compact_path, self.path)
        fsync_dir(self.directory)

    def _truncate_torn_tail(self) -> None:
        """Cut an unterminated last line (a crash mid-append), so the next record starts clean."""
        data = read_bytes(self.path)
        if data and not data.endswith(b"\n"):
            with open(self.path, "r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)

    def seen(self, event_id: str) -> bool:
        """True when an event with this id was already accepted."""
        return event_id in self._ids

    def append(self, event: ConnectorEvent, agent: str, instance_key: str) -> InboxRecord:
        """Append and flush one record (a single ``write``); returns it."""
        if self._fd is None:
            raise RuntimeError(f"{self!r} is not open")
        record = InboxRecord(event, agent, instance_key, now_iso())
        line = json.dumps(record.to_dict(), ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        try:
            append_or_undo(self._fd, line)
        except OSError as exc:
            raise io_error(exc, self.path, "append to") from exc
        self._ids.add(event.id)
        return record

    def marker_path(self, agent: str, instance_key: str) -> Path:
        """The start-marker file the agent process of (agent, instance_key) appends to."""
        return self.started_dir / f"{process_name(agent, instance_key)}.jsonl"

    def close(self) -> None:
        """Close the append descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
