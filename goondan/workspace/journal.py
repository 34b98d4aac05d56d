"""The turn journal: where a running turn records its durable points (docs/conversations.md
"Durability").

One file per instance, ``<instance dir>/turn.jsonl``, JSON lines with camelCase keys. Each
record is ONE ``write`` on an ``O_APPEND`` descriptor, like ``events.jsonl``: it reaches the
kernel before :meth:`TurnJournal.append` returns, which is all a SIGKILL needs; it is fsync-ed
only when the journal was opened with ``fsync=True`` (the store's ``fsync_events`` policy).
A torn last line (the process died mid-write) is dropped on read and cut off at open.

Records (``type`` and fields):

* ``turn.started`` — ``turnId``, ``input`` (the AgentEvent's wire dict), ``inputMessageId``
  (the message that holds the input, or null), ``at``;
* ``toolCall.started`` — ``turnId``, ``toolCallId``, ``toolName``, ``idempotencyKey``,
  ``idempotent``, ``at``: written right before a tool handler runs;
* ``approval.requested`` — ``turnId``, ``approvalId``, ``toolCallId``, ``toolName``, ``args``,
  ``reason``, ``expiresAt``, ``at``;
* ``turn.parked`` — ``turnId``, ``reason``, ``at``;
* ``turn.resumed`` — ``turnId``, ``attempt``, ``cause`` (``crash`` or ``decision``), ``at``;
* ``turn.ended`` — ``turnId``, ``finishReason``, ``at``: after the turn's fold-commit, then the
  file is emptied (:meth:`TurnJournal.clear`).

A turn is *open* while the journal has its ``turn.started`` and no ``turn.ended``. Turns of one
instance run one at a time, so there is at most one. This module only reads and writes the
file; what a resumed turn does with an :class:`OpenTurn` is the runtime's business
(``goondan/runtime/resume.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from goondan.conversation.codec import encode_json_line
from goondan.errors import WorkspaceCorruptError
from goondan.types import JsonObject
from goondan.workspace.files import FILE_MODE, append_or_undo, io_error, read_bytes

__all__ = [
    "JOURNAL_FILE",
    "OpenTurn",
    "TurnJournal",
    "idempotency_key",
    "interrupted_instances",
    "open_turns",
]

JOURNAL_FILE = "turn.jsonl"


def idempotency_key(agent: str, instance_key: str, turn_id: str, tool_call_id: str) -> str:
    """The key of one tool call, stable across resumes: ``gdn_`` + 40 hex of a sha256."""
    digest = hashlib.sha256(
        f"{agent}\0{instance_key}\0{turn_id}\0{tool_call_id}".encode()
    ).hexdigest()
    return "gdn_" + digest[:40]


@dataclass(frozen=True)
class OpenTurn:
    """The journal's view of a turn that started and has not ended."""

    turn_id: str
    input: JsonObject
    started_calls: dict[str, JsonObject] = field(default_factory=dict)  # toolCallId -> record
    # toolCallId -> approval.requested
    approvals: dict[str, JsonObject] = field(default_factory=dict)
    parked: bool = False
    crash_resumes: int = 0  # turn.resumed records with cause "crash"
    resumes: int = 0  # all turn.resumed records
    # The id of the message holding the turn's input (``inputMessageId`` of turn.started), so a
    # resume knows whether the input was written and where the turn's own messages begin.
    input_message_id: str | None = None


class TurnJournal:
    """``turn.jsonl`` of one instance; the owner (the store, under its lock) is the only writer."""

    def __init__(self, path: Path, fd: int, *, fsync: bool) -> None:
        self.path = path
        self._fd: int | None = fd
        self._fsync = fsync

    @classmethod
    def open(cls, instance_dir: Path, *, fsync: bool = False) -> TurnJournal:
        """Open (creating if needed) ``<instance_dir>/turn.jsonl`` and cut off a torn last line."""
        path = Path(instance_dir) / JOURNAL_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise io_error(exc, path, "open") from exc
        journal = cls(path, fd, fsync=fsync)
        try:
            journal._heal()
        except BaseException:
            journal.close()
            raise
        return journal

    def _heal(self) -> None:
        data = read_bytes(self.path)
        if not data or data.endswith(b"\n"):
            return
        # A record is one write, so a last line without its newline is a torn write: it never
        # happened. Cut it before the next append buries it in the middle of the file.
        cut = data.rfind(b"\n") + 1
        try:
            os.ftruncate(self._require_fd(), cut)
        except OSError as exc:
            raise io_error(exc, self.path, "repair the end of") from exc

    # -- writing -----------------------------------------------------------------------------------
    def append(self, record: JsonObject) -> None:
        """Append ``record`` as one line in one write (fsync-ed if the journal was opened so)."""
        fd = self._require_fd()
        try:
            append_or_undo(fd, encode_json_line(record), fsync=self._fsync)
        except OSError as exc:
            raise io_error(exc, self.path, "append to") from exc

    def clear(self) -> None:
        """Empty the file (the turn ended and its conversation is committed)."""
        try:
            os.ftruncate(self._require_fd(), 0)
        except OSError as exc:
            raise io_error(exc, self.path, "clear") from exc

    # -- reading -----------------------------------------------------------------------------------
    def records(self) -> list[JsonObject]:
        """Every record, oldest first; a torn last line is dropped."""
        return parse_records(read_bytes(self.path), str(self.path))

    def open_turn(self) -> OpenTurn | None:
        """The open turn (``turn.started`` without ``turn.ended``), or None."""
        return open_turn_of(self.records())

    # -- closing -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __enter__(self) -> TurnJournal:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _require_fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"{self.path}: the journal is closed")
        return self._fd

    def __repr__(self) -> str:
        return f"TurnJournal({str(self.path)!r}, open={not self.closed})"


def parse_records(data: bytes, file: str) -> list[JsonObject]:
    """Decode journal lines; a torn last line is dropped, any other bad line is an error."""
    lines = data.split(b"\n")
    lines.pop()  # b"" after the last newline, else a torn write that never completed
    records: list[JsonObject] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
        except (UnicodeDecodeError, ValueError) as exc:
            raise _corrupt(file, number, f"invalid JSON ({exc})") from exc
        if not isinstance(record, dict) or not isinstance(record.get("type"), str):
            raise _corrupt(file, number, "expected an object with a string type")
        records.append(record)
    return records


def _corrupt(file: str, line: int, what: str) -> WorkspaceCorruptError:
    return WorkspaceCorruptError(
        f"{file}:{line}: {what}", location=f"{file}:{line}",
        suggestion="fix the line, or remove turn.jsonl: an interrupted turn is then closed with "
        "E_TURN_INTERRUPTED results instead of resumed",
    )


def open_turn_of(records: list[JsonObject]) -> OpenTurn | None:
    """The open turn described by ``records`` (the last ``turn.started`` not ended), or None."""
    start: int | None = None
    for index, record in enumerate(records):
        kind = record.get("type")
        if kind == "turn.started":
            start = index
        elif kind == "turn.ended" and start is not None and (
                record.get("turnId") == records[start].get("turnId")):
            start = None
    if start is None:
        return None
    first = records[start]
    turn_id = str(first.get("turnId", ""))
    raw_input = first.get("input")
    started: dict[str, JsonObject] = {}
    approvals: dict[str, JsonObject] = {}
    parked = False
    crash_resumes = resumes = 0
    for record in records[start + 1:]:
        if record.get("turnId") != turn_id:
            continue
        kind = record.get("type")
        if kind == "toolCall.started":
            started[str(record.get("toolCallId"))] = record
        elif kind == "approval.requested":
            approvals[str(record.get("toolCallId"))] = record
        elif kind == "turn.parked":
            parked = True
        elif kind == "turn.resumed":
            parked = False
            resumes += 1
            if record.get("cause") == "crash":
                crash_resumes += 1
    message_id = first.get("inputMessageId")
    return OpenTurn(turn_id=turn_id, input=raw_input if isinstance(raw_input, dict) else {},
                    started_calls=started, approvals=approvals, parked=parked,
                    crash_resumes=crash_resumes, resumes=resumes,
                    input_message_id=message_id if isinstance(message_id, str) else None)


def open_turns(state_root: Path, workspace_id: str) -> list[tuple[str, str, OpenTurn]]:
    """(agent, instanceKey, open turn) of every instance of the workspace whose journal has an
    open turn, parked or not.

    Read without the instance lock (nothing is written); an unreadable journal is skipped here
    and reported when the instance opens."""
    from goondan.errors import GoondanError
    from goondan.workspace.catalog import iter_instances

    found: list[tuple[str, str, OpenTurn]] = []
    for info in iter_instances(Path(state_root), workspace_id=workspace_id):
        path = info.paths.dir / JOURNAL_FILE
        if info.agent_name is None or not path.exists():
            continue
        try:
            turn = open_turn_of(parse_records(read_bytes(path), str(path)))
        except (GoondanError, OSError):
            continue
        if turn is not None:
            found.append((info.agent_name, info.instance_key, turn))
    return found


def interrupted_instances(state_root: Path, workspace_id: str) -> list[tuple[str, str]]:
    """(agent, instanceKey) of every instance of the workspace whose journal has an open turn
    that is not parked: ``goondan run`` spawns them at start so those turns finish."""
    return [(agent, key) for agent, key, turn in open_turns(state_root, workspace_id)
            if not turn.parked]


def journal_bytes(records: list[JsonObject]) -> bytes:
    """The file content holding ``records`` (tests and tools that write a journal by hand)."""
    return b"".join(encode_json_line(r) for r in records)
