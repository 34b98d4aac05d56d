"""The durable inbox: accepted inputs, in acceptance order, and the claims of their Turns' starts.

One mechanism for every input the orchestrator acknowledges (docs/orchestrator.md "Durable
inputs"): the per-Connection inbox of connector events (:mod:`goondan.connectors.inbox`) and
the Swarm's inbox of everything else — ``goondan send``, an agent's request or send, the
``goondan run --input``/``--input-file`` lines (:mod:`goondan.swarm.durable_inputs`).

Layout of one inbox directory::

    inbox.jsonl                 one record per accepted input, in acceptance order
    started/<process>.jsonl     the claims of the inputs whose Turn started (one file per
                                agent process, :mod:`goondan.workspace.claims`)

A record is ``{"event": {..., "id"}, "agent", "instanceKey", "acceptedAt"}``: the input's wire
form (a connector event or an agent event — both carry their ``id``) and where it was routed
when accepted. Each record is one ``O_APPEND`` write, made before the input is acknowledged,
so it survives a SIGKILL of any process from then on (not a power loss: it is not
``fsync``-ed); a crash leaves at most a torn last line, which :meth:`DurableInbox.open` cuts.

The agent process running (agent, instanceKey) claims an input's id under a file lock just
before its Turn starts and skips the Turn if the id was claimed already (by an agent process
orphaned by a killed orchestrator that started it after the new orchestrator read the claims,
say). An input is *pending* when it is in the inbox and not claimed: :meth:`DurableInbox.open`
returns those, in inbox order, for the orchestrator to deliver again.

Compaction: when :meth:`DurableInbox.open` finds at least :data:`COMPACT_MIN_CONSUMED`
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

__all__ = ["COMPACT_MIN_CONSUMED", "DurableInbox", "InboxEntry", "read_records"]

COMPACT_MIN_CONSUMED = 1000
_CONSUMED = "consumed"


@dataclass(frozen=True)
class InboxEntry:
    """One accepted input (its wire form) and where it was routed when accepted."""

    id: str
    event: JsonObject
    agent: str
    instance_key: str
    accepted_at: str

    def to_dict(self) -> JsonObject:
        return {"event": self.event, "agent": self.agent, "instanceKey": self.instance_key,
                "acceptedAt": self.accepted_at}

    @classmethod
    def from_dict(cls, data: JsonObject) -> InboxEntry:
        """Raises ``KeyError``/``TypeError`` for a record that is not one."""
        event = data["event"]
        if not isinstance(event, dict) or not isinstance(event.get("id"), str):
            raise TypeError("an inbox record's event has no id")
        return cls(event["id"], event, str(data["agent"]), str(data["instanceKey"]),
                   str(data.get("acceptedAt") or ""))


def read_records(path: Path) -> list[tuple[JsonObject, bytes]]:
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


class DurableInbox:
    """One inbox directory (see the module docstring); its one writer is the orchestrator.

    ``marker_name(agent, instance_key)`` names the claim file of that agent process
    (``goondan.ipc.logs.process_name``); ``accept(entry)`` may refuse a record read back
    (the connector inbox refuses an event that no longer parses)."""

    def __init__(self, directory: Path, marker_name: Callable[[str, str], str],
                 accept: Callable[[InboxEntry], bool] | None = None) -> None:
        self.directory = Path(directory)
        self.path = self.directory / "inbox.jsonl"
        self.started_dir = self.directory / "started"
        self._marker_name = marker_name
        self._accept = accept
        self._ids: set[str] = set()
        self._fd: int | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {str(self.directory)!r} accepted={len(self._ids)}>"

    @property
    def compact_path(self) -> Path:
        """The temp file of a compaction (renamed over ``inbox.jsonl`` when complete)."""
        return self.directory / "inbox.jsonl.compact"

    def _make_dirs(self) -> None:
        for sub in (self.directory, self.started_dir):
            private_dirs(sub)

    def open_entries(self) -> list[InboxEntry]:
        """Open for appending; returns the pending entries (accepted, Turn not started), in
        order."""
        try:
            self._make_dirs()
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
            pending: list[InboxEntry] = []
            kept: list[bytes] = []  # the lines of a compacted inbox
            tombstones: set[str] = set()  # ids already cut to {"consumed": id}
            consumed: set[str] = set()  # whole records whose start is final
            for raw, line in read_records(self.path):
                if isinstance(raw.get(_CONSUMED), str):
                    self._ids.add(raw[_CONSUMED])
                    tombstones.add(raw[_CONSUMED])
                    kept.append(line)
                    continue
                try:
                    entry = InboxEntry.from_dict(raw)
                except (KeyError, TypeError):
                    continue
                if self._accept is not None and not self._accept(entry):
                    continue
                self._ids.add(entry.id)
                if entry.id in final:
                    consumed.add(entry.id)
                    kept.append(json.dumps({_CONSUMED: entry.id}, ensure_ascii=False,
                                           separators=(",", ":")).encode())
                else:
                    kept.append(line)
                    if entry.id not in started:
                        pending.append(entry)
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

    def seen(self, input_id: str) -> bool:
        """True when an input with this id was already accepted."""
        return input_id in self._ids

    def append_entry(self, event: JsonObject, agent: str, instance_key: str) -> InboxEntry:
        """Append one record (a single ``write``) for ``event`` (its wire dict, with an ``id``);
        returns it. Raises ``WorkspaceError`` when it cannot be written (nothing accepted)."""
        if self._fd is None:
            raise RuntimeError(f"{self!r} is not open")
        entry = InboxEntry(str(event["id"]), event, agent, instance_key, now_iso())
        line = (
            json.dumps(entry.to_dict(), ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        )
        try:
            append_or_undo(self._fd, line)
        except OSError as exc:
            raise io_error(exc, self.path, "append to") from exc
        self._ids.add(entry.id)
        return entry

    def marker_path(self, agent: str, instance_key: str) -> Path:
        """The claim file the agent process of (agent, instance_key) appends to."""
        return self.started_dir / f"{self._marker_name(agent, instance_key)}.jsonl"

    def close(self) -> None:
        """Close the append descriptor."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
