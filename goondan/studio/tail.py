"""Reading what is appended to a conversation's files, and where a read stopped.

:class:`Tail` gives the complete lines appended to one file since its last read; a file replaced
(another inode), cut shorter, or emptied and written again between two reads (its first bytes
differ: a commit cleared ``events.jsonl`` and the next turn appended) is read again from its
start, and the read says so.

A *cursor* (:func:`cursor`) names the state of an instance's ``base.jsonl`` and ``events.jsonl``
when the studio read its conversation; the page hands it to the conversation's stream, which
then starts there instead of at "now" — nothing written between the page's fetch and the
stream's start is missed (what was written during the fetch may come twice, with the same ids).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from goondan.workspace.paths import InstancePaths

__all__ = ["Position", "Tail", "cursor", "mtime", "parse_cursor"]

HEAD = 256  # bytes of a file's start kept to notice that it was emptied and written again

Position = tuple[int, int, int]  # inode, size, crc32 of the first min(size, HEAD) bytes


def _stat(path: Path) -> tuple[int, int]:
    """``(inode, size)``; ``(0, 0)`` for a missing file."""
    try:
        st = os.stat(path)
    except OSError:
        return 0, 0
    return st.st_ino, st.st_size


def mtime(path: Path) -> int:
    """Modification time in ns (0 for a missing file)."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


def _head(path: Path, size: int) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(min(size, HEAD))
    except OSError:
        return b""


def _position(path: Path) -> Position:
    inode, size = _stat(path)
    return inode, size, zlib.crc32(_head(path, size))


def cursor(paths: InstancePaths) -> str:
    """The cursor of an instance's files now (take it *before* reading them)."""
    return ":".join(str(n) for n in (*_position(paths.base), *_position(paths.events)))


def parse_cursor(text: str) -> tuple[Position, Position]:
    """``(base, events)`` positions of a :func:`cursor` string; ``ValueError`` if malformed."""
    numbers = [int(part) for part in text.split(":")]
    if len(numbers) != 6 or min(numbers) < 0:
        raise ValueError(f"not a cursor: {text!r}")
    return (numbers[0], numbers[1], numbers[2]), (numbers[3], numbers[4], numbers[5])


class Tail:
    """The complete lines appended to ``path`` since ``start`` (a position; default now)."""

    def __init__(self, path: Path, start: Position | None = None) -> None:
        self.path = path
        self.partial = b""
        self.inode, size = _stat(path)
        self.moved = False  # the file is not the one ``start`` named: read from its start
        if start is None:
            self.offset = size
        else:
            inode, offset, crc = start
            same = (inode == self.inode and offset <= size
                    and zlib.crc32(_head(path, offset)) == crc)
            self.offset, self.moved = (offset, False) if same else (0, True)
        self.head = _head(path, self.offset)

    def __repr__(self) -> str:
        return f"<Tail {self.path} at {self.offset}>"

    def read(self) -> tuple[list[bytes], bool]:
        """``(new complete lines, the file was replaced or cut)``."""
        inode, size = _stat(self.path)
        moved, self.moved = self.moved, False
        if size == self.offset and inode == self.inode and not moved:
            return [], False
        head = _head(self.path, size)
        reset = moved or (inode != self.inode or size < self.offset
                          or head[:len(self.head)] != self.head)
        if reset and not moved:
            self.offset, self.partial = 0, b""
        self.inode, self.head = inode, head
        if size <= self.offset:
            return [], reset
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read(size - self.offset)
        except OSError:
            return [], reset
        self.offset += len(chunk)
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        return [line for line in lines if line.strip()], reset
