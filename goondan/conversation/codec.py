"""JSONL codec for ``base.jsonl`` (Message records) and ``events.jsonl`` (MessageEvent records).

One record per line, UTF-8, ``\\n``-terminated, compact JSON with non-ASCII kept as is (the
reference runtime's ``JSON.stringify`` form), keys in the order of ``to_dict`` with unknown keys
last. Event records carry the extra ``"turnId"`` field (docs/conversations.md "Record format").

Decoding rules (docs/conversations.md "Recovery at start"):

* blank lines are skipped;
* a final line without its ``\\n`` that does not parse is a *torn* write (the process died
  mid-append): it is dropped and reported as warning ``W_WORKSPACE_TORN_LINE``;
* any other line that is not valid JSON, not an object, or not a valid record raises
  :class:`~goondan.errors.WorkspaceCorruptError` naming ``file:line`` — never silently skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import Diagnostic, WorkspaceCorruptError
from goondan.text import dumps_compact
from goondan.types import JsonObject

__all__ = [
    "TORN_LINE",
    "DecodedFile",
    "decode_events",
    "decode_messages",
    "decode_record",
    "encode_event",
    "encode_json_line",
    "encode_message",
]

TORN_LINE = "W_WORKSPACE_TORN_LINE"
T = TypeVar("T")


def encode_json_line(record: JsonObject) -> bytes:
    """One compact JSON line (``\\n`` included) in the reference runtime's style."""
    try:
        return dumps_compact(record).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        # Lone surrogates cannot be written as UTF-8; escaping them keeps the line valid JSON.
        return json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"


def encode_message(message: Message) -> bytes:
    """A ``base.jsonl`` line for ``message``."""
    return encode_json_line(message.to_dict())


def encode_event(event: MessageEvent, turn_id: str | None = None) -> bytes:
    """An ``events.jsonl`` line for ``event``; ``turn_id`` sets the ``turnId`` field."""
    record = event.to_dict()
    if turn_id is not None:
        record["turnId"] = turn_id
    return encode_json_line(record)


@dataclass
class DecodedFile(Generic[T]):
    """The records of one JSONL file with their 1-based line numbers.

    ``valid_size`` is the byte length of the well-formed prefix (everything but a torn tail);
    ``missing_newline`` is True when the last record parsed but lacks its ``\\n``.
    """

    records: list[T] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    valid_size: int = 0
    missing_newline: bool = False

    @property
    def torn(self) -> bool:
        return any(d.code == TORN_LINE for d in self.diagnostics)


def decode_record(line: bytes, parse: Callable[[object], T], *, file: str, line_no: int) -> T:
    """Parse one line with ``parse``; raise ``WorkspaceCorruptError`` naming ``file:line``."""
    try:
        raw = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _corrupt(file, line_no, f"invalid JSON ({_short(exc)})") from exc
    try:
        return parse(raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise _corrupt(file, line_no, f"not a valid record ({_short(exc)})") from exc


def _decode(data: bytes, parse: Callable[[object], T], file: str) -> DecodedFile[T]:
    out: DecodedFile[T] = DecodedFile(valid_size=len(data))
    if not data:
        return out
    chunks = data.split(b"\n")
    tail = chunks.pop()  # b"" when the file ends with a newline
    offset = 0
    for line_no, chunk in enumerate(chunks, start=1):
        offset += len(chunk) + 1
        if not chunk.strip():
            continue
        out.records.append(decode_record(chunk, parse, file=file, line_no=line_no))
        out.lines.append(line_no)
    if tail.strip():
        line_no = len(chunks) + 1
        try:
            out.records.append(decode_record(tail, parse, file=file, line_no=line_no))
            out.lines.append(line_no)
            out.missing_newline = True
        except WorkspaceCorruptError:
            out.valid_size = offset
            out.diagnostics.append(
                Diagnostic(
                    code=TORN_LINE,
                    message=f"dropped an incomplete last line ({len(tail)} bytes), "
                    "left by a write that was interrupted",
                    severity="warning",
                    file=file,
                    line=line_no,
                    extra={"bytes": len(tail)},
                )
            )
    return out


def decode_messages(data: bytes, *, file: str) -> DecodedFile[Message]:
    """Decode ``base.jsonl`` content."""
    return _decode(data, Message.from_dict, file)


def decode_events(data: bytes, *, file: str) -> DecodedFile[MessageEvent]:
    """Decode ``events.jsonl`` content (``turnId`` stays in ``event.extra``)."""
    return _decode(data, MessageEvent.from_dict, file)


def _corrupt(file: str, line_no: int, why: str) -> WorkspaceCorruptError:
    return WorkspaceCorruptError(
        f"{file}:{line_no}: {why}",
        location=f"{file}:{line_no}",
        suggestion="fix or remove that line by hand (keep a copy of the file first); "
        "goondan never skips a damaged record silently",
    )


def _short(exc: BaseException, limit: int = 120) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "..."
