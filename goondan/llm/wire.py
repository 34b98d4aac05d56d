"""Incremental request building: each stored message is converted and encoded once.

A step sends the whole conversation again, but between two steps of a Turn (and two Turns of
an instance) the conversation usually only grows at its end. :class:`WireCache` keeps, per
model adapter, the messages it last converted, the adapter's conversion state after them
(:class:`Converter`) and the JSON bytes of every finished wire item. The next request checks
that the cached messages are still its prefix — without looking at them when the request's list
is an :class:`~goondan.conversation.state.LlmMessages` of the same append-only run (its
``lineage``), else by one C-level list comparison (the dicts are the conversation's own shared
``data``, so that check is an identity test per message) — feeds only
the new messages to the converter and encodes only the new items; the request body is then
spliced from the cached bytes (:class:`RawJson`, :func:`encode_body`).

Any other change — a step middleware ``replace``/``remove``/``truncate`` event, a new system
prompt for Anthropic/Gemini is fine (kept apart), a different conversation on the same model —
makes the prefix test fail and the conversion starts over from the first message, exactly like
the naive path. The property tests (tests/llm/test_wire_cache.py) check the spliced bytes
against ``json.dumps`` of the naive conversion for all three wire formats. See
docs/runtime.md "Request building".
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from goondan.text import clean_json, dumps_compact
from goondan.types import JsonObject

__all__ = ["Converter", "RawJson", "WireCache", "encode_body", "encode_chunks", "encode_json"]

_BLOCK = 64 * 1024  # cached bytes are kept and sent in blocks of about this size
_dumps = dumps_compact


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON of ``value``; lone surrogates become U+FFFD (docs/security.md).

    The surrogate walk (:func:`goondan.text.clean_json`) only runs when encoding failed, so the
    common case is one C-level ``dumps`` and ``encode``.
    """
    text = _dumps(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _dumps(clean_json(value)).encode("utf-8")


class RawJson:
    """Already-encoded JSON placed as a top-level value of a request body (see :func:`encode_body`).

    ``chunks`` are concatenated as they are (immutable ``bytes``: a retry may send them again).
    """

    __slots__ = ("chunks",)

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    @classmethod
    def array(cls, items: list[bytes], first: bytes | None = None) -> RawJson:
        """A JSON array of the comma-joined ``items`` (see :meth:`WireCache.convert`), with
        ``first`` (one encoded item) in front when given."""
        chunks: list[bytes] = [b"["]
        if first is not None:
            chunks.append(first)
            if any(items):
                chunks.append(b",")
        chunks.extend(items)
        chunks.append(b"]")
        return cls(chunks)


def encode_chunks(body: JsonObject) -> list[bytes]:
    """``encode_json(body)`` as chunks to send one after the other, with :class:`RawJson`
    top-level values spliced in verbatim (their cached blocks are not copied).

    The concatenation is byte-for-byte what encoding the decoded values would give, because
    the compact separators make ``{"k":v,...}`` a plain concatenation of its members. Adjacent
    small pieces are merged, so a body is a few large blocks, not one chunk per message.
    """
    if not any(isinstance(value, RawJson) for value in body.values()):
        return [encode_json(body)]
    chunks: list[bytes] = []
    pending = bytearray(b"{")
    for key, value in body.items():
        if len(pending) > 1 or chunks:
            pending += b","
        pending += encode_json(key)
        pending += b":"
        if isinstance(value, RawJson):
            for chunk in value.chunks:
                if len(chunk) >= _BLOCK:
                    if pending:
                        chunks.append(bytes(pending))
                        pending.clear()
                    chunks.append(bytes(chunk) if isinstance(chunk, bytearray) else chunk)
                else:
                    pending += chunk
        else:
            pending += encode_json(value)
    pending += b"}"
    chunks.append(bytes(pending))
    return chunks


def encode_body(body: JsonObject) -> bytes:
    """:func:`encode_chunks` joined into one ``bytes``."""
    chunks = encode_chunks(body)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class Converter(abc.ABC):
    """One adapter's conversion of canonical messages, fed one message at a time.

    ``out`` holds the wire items built so far. When ``merges`` is true, a later message may
    extend the *last* item (Anthropic and Gemini merge consecutive same-role messages into one
    turn, under ``merge_key``); every earlier item is final. ``system_texts`` collects the
    conversation's system messages for formats that move them out of the message list.
    """

    merges = False
    merge_key = ""

    def __init__(self) -> None:
        self.out: list[JsonObject] = []
        self.system_texts: list[str] = []

    @abc.abstractmethod
    def feed(self, message: JsonObject) -> None:
        """Convert one canonical message, appending to (or extending the last of) ``out``."""

    def convert(self, messages: Iterable[JsonObject]) -> Converter:
        """Feed every message; return ``self``."""
        for message in messages:
            self.feed(message)
        return self


class _Entry:
    __slots__ = ("blocks", "converter", "final", "lineage", "seen", "tail")

    def __init__(self, converter: Converter) -> None:
        self.seen: list[JsonObject] = []
        # The append-only run ``seen`` is a prefix of (see conversation/state.py LlmMessages).
        self.lineage: object | None = None
        self.converter = converter
        self.final = 0  # how many items of converter.out are encoded into blocks + tail
        # Those items' JSON, comma-separated: sealed blocks of about _BLOCK bytes (immutable,
        # so a request body may hold them without a copy) and the open tail.
        self.blocks: list[bytes] = []
        self.tail = bytearray()


class WireCache:
    """The last few conversions of one adapter (one per conversation that shares the model).

    ``factory`` builds a fresh :class:`Converter`; ``key`` (e.g. an adapter option that changes
    the conversion) must be equal for an entry to be reused. Memory: the cached wire items and
    their bytes, about twice the size of the conversations' stored content, for at most
    ``slots`` conversations.
    """

    def __init__(self, factory: Callable[[], Converter], *, slots: int = 4) -> None:
        self._factory = factory
        self._slots = slots
        self._entries: list[tuple[Hashable, _Entry]] = []
        self.hits = 0  # requests that reused a conversion (for tests and benchmarks)
        self.misses = 0

    def convert(
        self, messages: Sequence[JsonObject], key: Hashable = None
    ) -> tuple[Converter, list[bytes]]:
        """The converter state after ``messages``, and the JSON of its ``out`` items as chunks
        that concatenate to the comma-separated items (for :meth:`RawJson.array`).

        Treat both as read-only: ``out`` stays owned by the cache (a later message may extend
        its last item in place), which is why :meth:`HttpModel.to_wire` builds its own
        structures.
        """
        entry = self._find(messages, key)
        if entry is None:
            self.misses += 1
            if messages:
                # An entry that starts with the same message is this conversation before an edit
                # (a middleware replace/remove): it will not match again, so it gives its slot.
                first = messages[0]
                self._entries = [
                    (k, e) for k, e in self._entries if not (e.seen and e.seen[0] is first)
                ]
            entry = _Entry(self._factory())
            self._entries.insert(0, (key, entry))
            del self._entries[self._slots:]
        else:
            self.hits += 1
        entry.lineage = getattr(messages, "lineage", None)
        converter = entry.converter
        done = len(entry.seen)
        if len(messages) > done:
            new = messages[done:]
            converter.convert(new)
            entry.seen.extend(new)
        out = converter.out
        # With merging, the last item may still grow: it is encoded afresh at each request.
        final = len(out) - 1 if converter.merges and out else len(out)
        tail = entry.tail
        for index in range(entry.final, final):
            if index:
                tail += b","
            tail += encode_json(out[index])
            if len(tail) >= _BLOCK:
                entry.blocks.append(bytes(tail))
                tail.clear()
        entry.final = max(entry.final, final)
        chunks = [*entry.blocks, bytes(tail)]
        if final < len(out):
            chunks.append(b"," + encode_json(out[-1]) if final else encode_json(out[-1]))
        return converter, chunks

    def _find(self, messages: Sequence[JsonObject], key: Hashable) -> _Entry | None:
        lineage = getattr(messages, "lineage", None)
        if lineage is not None:
            # The conversation's list only grew since the entry saw it: no comparison, which is
            # what keeps a step independent of the history's length.
            for position, (entry_key, entry) in enumerate(self._entries):
                if (
                    entry.lineage is lineage
                    and entry_key == key
                    and len(entry.seen) <= len(messages)
                ):
                    if position:
                        self._entries.insert(0, self._entries.pop(position))
                    return entry
        for position, (entry_key, entry) in enumerate(self._entries):
            seen = entry.seen
            if entry_key != key or len(seen) > len(messages):
                continue
            # Identity short-cuts the comparison of each shared dict; an equal copy is as good.
            if seen and (messages[0] is not seen[0] and messages[0] != seen[0]):
                continue
            if messages[: len(seen)] == seen:
                if position:
                    self._entries.insert(0, self._entries.pop(position))
                return entry
        return None
