"""The studio's server-sent event streams: a conversation while its turn runs, and the overview.

A conversation is followed by polling its files' sizes (one ``stat`` each every
:data:`POLL_S`): bytes appended to ``events.jsonl`` are the running turn's events (sent as
``message`` with ``pending: true``, or ``remove`` / ``reset``); bytes appended to ``base.jsonl``
are committed messages (``pending: false``; the page replaces a pending message of the same id);
a rewritten ``base.jsonl`` (another inode, or shorter) is a ``reset`` (the page fetches the list
again); a change of ``metadata.json`` sends the instance's ``status``. Nothing is parsed twice
and nothing is read while the files do not change.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from goondan.conversation.codec import decode_record
from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import GoondanError
from goondan.studio.data import event_doc, masked, message_doc
from goondan.types import JsonObject
from goondan.workspace.catalog import InstanceInfo
from goondan.workspace.store import read_metadata

__all__ = ["PING_S", "POLL_S", "ConversationFollower", "overview_events"]

POLL_S = 0.25
PING_S = 15.0
OVERVIEW_POLL_S = 1.0

Event = tuple[str, JsonObject]


def _stat(path: Path) -> tuple[int, int]:
    """``(inode, size)``; ``(0, 0)`` for a missing file."""
    try:
        st = os.stat(path)
    except OSError:
        return 0, 0
    return st.st_ino, st.st_size


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


_HEAD = 256  # bytes of a file's start kept to notice that it was emptied and written again


class _Tail:
    """The complete lines appended to one file since the last read.

    A file replaced (another inode), cut shorter, or emptied and written again between two reads
    (its first bytes differ: a commit cleared ``events.jsonl`` and the next turn appended) is
    read again from its start, and the read says so."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inode, self.offset = _stat(path)
        self.partial = b""
        self.head = self._head(self.offset)

    def __repr__(self) -> str:
        return f"<_Tail {self.path} at {self.offset}>"

    def _head(self, size: int) -> bytes:
        try:
            with self.path.open("rb") as handle:
                return handle.read(min(size, _HEAD))
        except OSError:
            return b""

    def read(self) -> tuple[list[bytes], bool]:
        """``(new complete lines, the file was replaced or cut)``."""
        inode, size = _stat(self.path)
        if size == self.offset and inode == self.inode:
            return [], False
        head = self._head(size)
        reset = (inode != self.inode or size < self.offset
                 or head[:len(self.head)] != self.head)
        if reset:
            self.inode, self.offset, self.partial = inode, 0, b""
        self.head = head
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


class ConversationFollower:
    """The stream events of one instance since it was created ("now")."""

    def __init__(self, info: InstanceInfo) -> None:
        self.paths = info.paths
        self.base = _Tail(info.paths.base)
        self.events = _Tail(info.paths.events)
        self.meta_mtime = _mtime(info.paths.metadata)
        self.status = info.status

    def __repr__(self) -> str:
        return f"<ConversationFollower {self.paths.dir}>"

    def poll(self) -> list[Event]:
        """The events since the last poll (an empty list when nothing changed)."""
        out: list[Event] = []
        lines, cut = self.events.read()
        # A commit empties events.jsonl (cut) and appends to base.jsonl: nothing to send for the
        # cut itself, the committed messages follow from base.jsonl below.
        del cut
        for line in lines:
            try:
                event = decode_record(line, MessageEvent.from_dict, file=str(self.events.path),
                                      line_no=0)
            except GoondanError:
                continue
            found = event_doc(event)
            if found is not None:
                out.append(found)
        lines, replaced = self.base.read()
        if replaced:
            out.append(("reset", {}))
        else:
            for line in lines:
                try:
                    message = decode_record(line, Message.from_dict, file=str(self.base.path),
                                            line_no=0)
                except GoondanError:
                    continue
                out.append(("message", masked(message_doc(message, pending=False))))
        mtime = _mtime(self.paths.metadata)
        if mtime != self.meta_mtime:
            self.meta_mtime = mtime
            try:
                meta = read_metadata(self.paths) or {}
            except GoondanError:
                meta = {}
            status = str(meta.get("status", self.status))
            if status != self.status:
                self.status = status
                out.append(("status", {"status": status}))
        return out


def sse(event: str, data: JsonObject) -> bytes:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def stream(poll: Callable[[], list[Event]], stop: threading.Event, *,
           alive: Callable[[], bool] = lambda: True, interval: float = POLL_S,
           ping: float = PING_S) -> Iterator[bytes]:
    """Chunks to write: the events ``poll`` finds at once and then every ``interval``, and a
    ``: ping`` comment every ``ping`` quiet seconds, until ``stop`` is set (the server shuts
    down) or ``alive`` says the client went away."""
    yield b": open\n\n"
    quiet = 0.0
    while True:
        events = poll()
        if events:
            quiet = 0.0
            yield b"".join(sse(name, data) for name, data in events)
        else:
            quiet += interval
            if quiet >= ping:
                quiet = 0.0
                yield b": ping\n\n"
        if stop.wait(interval) or not alive():
            return


def overview_events(build: Callable[[], JsonObject]) -> Callable[[], list[Event]]:
    """A poll function: ``overview`` with the whole document when it changed."""
    last: list[Any] = [None]

    def poll() -> list[Event]:
        doc = build()
        if doc != last[0]:
            last[0] = doc
            return [("overview", doc)]
        return []

    # the first poll (when the stream opens) sends the document: whatever changed since the
    # page fetched it
    return poll
