"""Transports: an ordered, duplex channel of :class:`IpcMessage` between two ends.

Two implementations share one interface:

* :class:`PipeTransport` wraps one end of a ``multiprocessing.Pipe()`` and sends each message
  as one ``send_bytes``-framed UTF-8 JSON frame (never pickles), non-blocking on the event loop
  (no threads).
* :class:`InProcessTransport` is a pair of asyncio queues in one event loop, used by the
  embedding API and by tests that run many instances cheaply. It still encodes and decodes every
  message, so the JSON-only rule holds in both modes.

``recv()`` returns ``None`` once the peer has closed its end; messages sent before that are
always delivered first, in order.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import struct
from multiprocessing.connection import Connection

from goondan.errors import IpcError
from goondan.ipc.protocol import IpcMessage, decode, encode

__all__ = ["InProcessTransport", "PipeTransport", "QueueTransport", "Transport"]

_HEADER = struct.Struct("!i")  # multiprocessing.connection framing
_BIG_HEADER = struct.Struct("!Q")
_READ_SIZE = 256 * 1024
_HIGH_WATER = 8 * 1024 * 1024  # unsent bytes above which send() waits for the peer
_EOF = object()


class Transport(abc.ABC):
    """One end of an ordered duplex channel of IPC messages."""

    @abc.abstractmethod
    async def send(self, message: IpcMessage) -> None:
        """Queue ``message`` for the peer; raises ``E_IPC_CLOSED`` if the channel is closed."""

    @abc.abstractmethod
    async def recv(self) -> IpcMessage | None:
        """The next message from the peer, or ``None`` once the peer closed the channel."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close this end; the peer's ``recv()`` then returns ``None``."""

    @property
    @abc.abstractmethod
    def closed(self) -> bool:
        """True once this end was closed or the peer went away."""


def _closed_error() -> IpcError:
    return IpcError(
        "the IPC channel is closed (the peer process exited)",
        code="E_IPC_CLOSED",
        suggestion="the orchestrator respawns crashed agent processes; retry the request",
    )


class PipeTransport(Transport):
    """A :class:`Transport` over one end of a ``multiprocessing.Pipe()``.

    Frames use ``Connection.send_bytes`` framing (a 4-byte big-endian length, or ``-1`` plus an
    8-byte length for huge frames) around UTF-8 JSON, so the peer may equally use
    ``recv_bytes``. The descriptor is switched to non-blocking mode and driven by the event
    loop (``add_reader``/``add_writer``): a slow or stuck peer can fill the pipe, but never
    block this process's loop (two loops each blocked writing to the other would deadlock).
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._fd = conn.fileno()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inbox: asyncio.Queue[object] = asyncio.Queue()
        self._rbuf = bytearray()
        self._wbuf = bytearray()
        self._drained = asyncio.Event()
        self._drained.set()
        self._writing = False
        self._eof = False
        self._closed = False
        self._write_error: OSError | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("eof" if self._eof else "open")
        return f"<PipeTransport fd={self._fd} {state} unsent={len(self._wbuf)}>"

    @property
    def closed(self) -> bool:
        return self._closed or self._eof or self._write_error is not None

    def _attach(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            os.set_blocking(self._fd, False)
            if not self._eof and not self._closed:
                self._loop.add_reader(self._fd, self._on_readable)
        return self._loop

    # -- reading ---------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        try:
            while True:
                chunk = os.read(self._fd, _READ_SIZE)
                if not chunk:
                    self._mark_eof()
                    break
                self._rbuf += chunk
                if len(chunk) < _READ_SIZE:
                    break
        except BlockingIOError:
            pass
        except OSError:
            self._mark_eof()
        self._parse_frames()

    def _parse_frames(self) -> None:
        buf = self._rbuf
        while len(buf) >= 4:
            (size,) = _HEADER.unpack_from(buf)
            start = 4
            if size == -1:
                if len(buf) < 12:
                    return
                (size,) = _BIG_HEADER.unpack_from(buf, 4)
                start = 12
            if len(buf) < start + size:
                return
            self._inbox.put_nowait(bytes(buf[start:start + size]))
            del buf[:start + size]

    def _mark_eof(self) -> None:
        if self._eof:
            return
        self._eof = True
        if self._loop is not None:
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                self._loop.remove_reader(self._fd)
        self._parse_frames()
        self._inbox.put_nowait(_EOF)

    async def recv(self) -> IpcMessage | None:
        """The next message, or ``None`` at EOF."""
        data = await self.recv_bytes()
        return None if data is None else decode(data)

    async def recv_bytes(self) -> bytes | None:
        """The next frame's bytes, or ``None`` at EOF (a peer that frames its own JSON)."""
        self._attach()
        if self._closed and self._inbox.empty():
            return None
        item = await self._inbox.get()
        if item is _EOF:
            self._inbox.put_nowait(_EOF)  # every later recv() also sees EOF
            return None
        assert isinstance(item, bytes)
        return item

    # -- writing ---------------------------------------------------------------------------------
    async def send(self, message: IpcMessage) -> None:
        """Queue one frame; frames leave in ``send`` order. Waits only above a high-water mark."""
        await self.send_bytes(encode(message))

    async def send_bytes(self, data: bytes) -> None:
        """Queue one frame of ``data`` (see :meth:`send`)."""
        loop = self._attach()
        if self._closed or self._write_error is not None:
            raise _closed_error()
        header = (
            _HEADER.pack(len(data))
            if len(data) <= 0x7FFFFFFF
            else _HEADER.pack(-1) + _BIG_HEADER.pack(len(data))
        )
        self._wbuf += header
        self._wbuf += data
        self._flush_some()
        if self._wbuf and not self._writing and self._write_error is None:
            loop.add_writer(self._fd, self._on_writable)
            self._writing = True
            self._drained.clear()
        if len(self._wbuf) > _HIGH_WATER:
            await self.flush(timeout=None)
        if self._write_error is not None:
            raise _closed_error() from self._write_error

    def _flush_some(self) -> None:
        while self._wbuf:
            try:
                written = os.write(self._fd, self._wbuf)
            except BlockingIOError:
                return
            except OSError as exc:  # EPIPE / ECONNRESET: the peer is gone
                self._write_error = exc
                self._wbuf.clear()
                return
            del self._wbuf[:written]

    def _on_writable(self) -> None:
        self._flush_some()
        if not self._wbuf:
            assert self._loop is not None
            self._loop.remove_writer(self._fd)
            self._writing = False
            self._drained.set()

    async def flush(self, timeout: float | None = 5.0) -> None:
        """Wait until every queued frame was handed to the OS (or the peer is gone)."""
        if not self._wbuf or self._write_error is not None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._drained.wait()

    async def aclose(self) -> None:
        """Flush queued frames (up to 5 s), then close the connection."""
        if self._closed:
            return
        if self._loop is not None:
            await self.flush()
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                self._loop.remove_reader(self._fd)
            if self._writing:
                with contextlib.suppress(OSError, ValueError, RuntimeError):
                    self._loop.remove_writer(self._fd)
        self._closed = True
        self._conn.close()
        self._inbox.put_nowait(_EOF)


class QueueTransport(Transport):
    """A transport whose received messages wait in a queue that its reader fills with
    :meth:`feed`: the peer of an in-process pair, or the reader of a host that runs many
    instances (``goondan/swarm/spawner.py`` :class:`HostedTransport`). Subclasses send, and
    say in :meth:`_after_close` whom else their close concerns."""

    def __init__(self) -> None:
        self._inbox: asyncio.Queue[object] = asyncio.Queue()
        self._closed = False
        self._eof = False

    @property
    def closed(self) -> bool:
        return self._closed or self._eof

    def feed(self, item: IpcMessage | bytes | None) -> None:
        """A message (or its encoded frame) for :meth:`recv`; ``None``: the end of the channel,
        after what was fed before."""
        self._inbox.put_nowait(_EOF if item is None else item)

    async def recv(self) -> IpcMessage | None:
        """The next message, or ``None`` once the peer closed."""
        if self._closed:
            return None
        item = await self._inbox.get()
        if item is _EOF:
            self._eof = True
            self._inbox.put_nowait(_EOF)
            return None
        if isinstance(item, IpcMessage):
            return item
        assert isinstance(item, bytes)
        return decode(item)

    async def aclose(self) -> None:
        """Close this end (its :meth:`recv` returns ``None``), then :meth:`_after_close`."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put_nowait(_EOF)
        await self._after_close()

    async def _after_close(self) -> None:
        """What closing this end tells the other one."""


class InProcessTransport(QueueTransport):
    """One end of an in-process channel; build both ends with :meth:`pair`."""

    def __init__(self, name: str = "in-process") -> None:
        super().__init__()
        self.name = name
        self._peer: InProcessTransport | None = None

    def __repr__(self) -> str:
        return (
            f"<InProcessTransport {self.name!r} closed={self._closed} queued={self._inbox.qsize()}>"
        )

    @classmethod
    def pair(cls, name: str = "in-process") -> tuple[InProcessTransport, InProcessTransport]:
        """Two connected ends (like ``multiprocessing.Pipe()``)."""
        a, b = cls(f"{name}/a"), cls(f"{name}/b")
        a._peer, b._peer = b, a
        return a, b

    async def send(self, message: IpcMessage) -> None:
        """Encode, then deliver to the peer's inbox (JSON-only like the pipe transport)."""
        data = encode(message)
        peer = self._peer
        if self._closed or self._eof or peer is None or peer._closed:
            raise _closed_error()
        peer.feed(data)

    async def _after_close(self) -> None:
        """The peer sees EOF after the frames already sent."""
        if self._peer is not None and not self._peer._closed:
            self._peer.feed(None)
