"""The studio's server-sent event streams: a conversation while its turn runs, and the overview.

A conversation is followed by polling its files' sizes (one ``stat`` each every
:data:`POLL_S`): bytes appended to ``events.jsonl`` are the running turn's events (sent as
``message`` with ``pending: true``, or ``remove`` / ``reset``); bytes appended to ``base.jsonl``
are committed messages (``pending: false``; the page replaces a pending message of the same id);
a rewritten ``base.jsonl`` (another inode, or shorter) is a ``reset`` (the page fetches the list
again); a change of ``metadata.json`` sends the instance's ``status``. Nothing is parsed twice
and nothing is read while the files do not change. The stream starts at the ``cursor`` of the
conversation the page fetched (:mod:`goondan.studio.tail`), else at "now".
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from goondan.conversation.codec import decode_record
from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import GoondanError
from goondan.studio.data import event_doc, masked, message_doc
from goondan.studio.tail import Tail, mtime, parse_cursor
from goondan.types import JsonObject
from goondan.workspace.catalog import InstanceInfo
from goondan.workspace.store import read_metadata

__all__ = ["PING_S", "POLL_S", "ConversationFollower", "overview_events"]

POLL_S = 0.25
PING_S = 15.0
OVERVIEW_POLL_S = 1.0

Event = tuple[str, JsonObject]


class ConversationFollower:
    """The stream events of one instance since ``cursor`` (from the conversation the page
    fetched; ``ValueError`` if malformed), else since it was created ("now")."""

    def __init__(self, info: InstanceInfo, cursor: str | None = None) -> None:
        base, events = parse_cursor(cursor) if cursor else (None, None)
        self.paths = info.paths
        self.base = Tail(info.paths.base, base)
        self.events = Tail(info.paths.events, events)
        self.meta_mtime = mtime(info.paths.metadata)
        self.status = info.status

    def __repr__(self) -> str:
        return f"<ConversationFollower {self.paths.dir}>"

    def poll(self) -> list[Event]:
        """The events since the last poll (an empty list when nothing changed)."""
        out: list[Event] = []
        # base.jsonl first: committed messages come before the next turn's pending ones.
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
        # A commit empties events.jsonl (the read says "cut"): nothing to send for that, its
        # messages came from base.jsonl.
        lines, _ = self.events.read()
        for line in lines:
            try:
                event = decode_record(line, MessageEvent.from_dict, file=str(self.events.path),
                                      line_no=0)
            except GoondanError:
                continue
            found = event_doc(event)
            if found is not None:
                out.append(found)
        changed = mtime(self.paths.metadata)
        if changed != self.meta_mtime:
            self.meta_mtime = changed
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
