"""Incremental Server-Sent Events parser (the WHATWG ``text/event-stream`` rules).

Feed raw bytes as they arrive, in chunks of any size; complete events come out::

    parser = SseParser()
    for chunk in chunks:
        for event in parser.feed(chunk):
            ...
    tail = parser.close()      # a last event whose blank-line terminator never came

Handled: ``\\n``, ``\\r\\n`` and lone ``\\r`` line ends (also split across chunks), several
``data:`` lines joined with ``\\n``, the optional single space after the colon, comment lines
(``: keep-alive``), ``event:`` / ``id:`` fields, fields without a colon, and UTF-8 split across
chunk boundaries (bytes are decoded one complete event at a time). ``[DONE]`` is ordinary data
here; the OpenAI adapter gives it meaning.

The parser works on whole buffers with ``bytes.split`` rather than byte by byte, which keeps it
well above the 50 MB/s target of ``scripts/bench_llm.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SseEvent", "SseParser"]


@dataclass(slots=True)
class SseEvent:
    """One dispatched event; ``event`` is None when the stream gave no ``event:`` field."""

    data: str
    event: str | None = None
    id: str | None = None


class SseParser:
    """Turns a byte stream into :class:`SseEvent` values; keeps only the unfinished tail."""

    __slots__ = ("_buffer", "_last_id", "_pending_cr")

    def __init__(self) -> None:
        self._buffer = b""
        self._pending_cr = False  # chunk ended in "\r": a "\n" may follow in the next chunk
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Add ``chunk`` and return every event it completes, in order."""
        if not chunk:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            if chunk[-1:] == b"\r":
                self._pending_cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer + chunk if self._buffer else chunk
        cut = buffer.rfind(b"\n\n")
        if cut < 0:
            self._buffer = buffer
            return []
        self._buffer = buffer[cut + 2 :]
        out: list[SseEvent] = []
        for block in buffer[:cut].split(b"\n\n"):
            if block:
                event = self._parse_block(block)
                if event is not None:
                    out.append(event)
        return out

    def close(self) -> list[SseEvent]:
        """End of stream: dispatch a last event if all its lines were complete.

        The spec discards an event missing its blank line; servers that end with a single
        newline are common enough that a fully terminated last line is accepted. A partial last
        line (the connection died mid-line) is always dropped.
        """
        buffer, self._buffer = self._buffer, b""
        if self._pending_cr:
            self._pending_cr = False
            buffer += b"\n"
        if not buffer.endswith(b"\n"):
            return []
        event = self._parse_block(buffer.strip(b"\n"))
        return [event] if event is not None else []

    @property
    def has_partial(self) -> bool:
        """True when bytes of an unfinished event are buffered."""
        return bool(self._buffer.strip(b"\n"))

    def _parse_block(self, block: bytes) -> SseEvent | None:
        data: list[bytes] = []
        event_type: bytes | None = None
        for line in block.split(b"\n"):
            # The common shapes first: "data: ..." then "event: ...".
            if line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value[:1] == b" " else value)
                continue
            if not line or line[:1] == b":":
                continue
            name, sep, value = line.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if name == b"event":
                event_type = value
            elif name == b"data":  # "data" with no colon: an empty data line
                data.append(b"")
            elif name == b"id" and b"\0" not in value:
                self._last_id = value.decode("utf-8", "replace")
        if not data:
            return None
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        return SseEvent(
            data=payload.decode("utf-8", "replace"),
            event=event_type.decode("utf-8", "replace") if event_type is not None else None,
            id=self._last_id,
        )
