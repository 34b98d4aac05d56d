"""A minimal HTTP/1.1 server on asyncio streams, shared by the ``webhook``, ``github`` and
``slack`` connectors (docs/base-connectors.md, "HTTP servers").

It serves one POST path and nothing else, which keeps it small enough to reason about:

* request line + headers at most ``max_header_bytes`` (16 KiB) and ``max_headers`` (100)
  → 431; they must arrive within ``header_timeout`` (10 s) or the connection is dropped
  (slowloris) — a new connection that sends nothing is closed after ``header_timeout`` too;
  a malformed request line → 400;
* another path (than ``path``, ``extra_paths`` and those under ``prefixes``) → 404, another
  method → 405, both answered
  before the body is read;
* ``Content-Length`` over ``max_body_bytes`` → 413 before reading; ``Transfer-Encoding:
  chunked`` bodies are read chunk by chunk and refused with 413 as soon as they grow past the
  limit; both headers together, or another transfer coding → 400; the body must arrive within
  ``body_timeout`` (30 s);
* ``Expect: 100-continue`` is answered once the request passed those checks (curl sends it
  for bodies over 1 KiB and would otherwise wait a second);
* keep-alive (HTTP/1.1 default, HTTP/1.0 with ``Connection: keep-alive``); a connection idle
  between requests is closed after ``idle_timeout`` (60 s). A refusal sent before the body
  was read closes the connection (the unread body would be parsed as the next request), after
  a short lingering close so the client still reads the answer;
* at most ``max_connections`` (1024) connections at once, and ``max_connections_per_ip`` (128)
  from one address. Idle connections (waiting for a request line: new ones that sent nothing
  yet, keep-alive ones between requests) must not starve requests: when a new connection
  would pass a limit, the connection idle the longest (from the same address, for the
  per-address limit) is closed to make room. Only when every counted connection is busy with
  a request is the new one answered 503 ``too_many_connections`` and closed;
* :meth:`HttpServer.serve_forever` runs until cancelled; then the listener closes, idle
  connections close at once and requests being handled get ``stop_grace`` (5 s) to finish.

The handler sees a :class:`Request` with the raw body and returns a :class:`Response`. A
response with a ``stream`` (an async iterator of bytes: server-sent events) is sent with
``Transfer-Encoding: chunked``, one chunk per item, as the items come; a client that goes away
meanwhile closes the iterator (``aclose``), so its ``finally`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HttpServer", "Request", "Response"]

_REASONS = {
    100: "Continue", 200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized",
    403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
    413: "Content Too Large", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 503: "Service Unavailable",
}


@dataclass(frozen=True)
class Request:
    """One parsed request: header names are lower-case, ``body`` is the raw bytes."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes = b""

    def header(self, name: str, default: str = "") -> str:
        """The value of header ``name`` (case-insensitive)."""
        return self.headers.get(name.lower(), default)


@dataclass(frozen=True)
class Response:
    """What a handler answers; :meth:`json` and :meth:`text` build the common ones."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    stream: AsyncIterator[bytes] | None = None

    @classmethod
    def json(cls, status: int, data: Any) -> Response:
        """A JSON response."""
        return cls(status, json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())

    @classmethod
    def text(cls, status: int, text: str) -> Response:
        """A ``text/plain`` response."""
        return cls(status, text.encode(), "text/plain; charset=utf-8")

    @classmethod
    def error(cls, status: int, reason: str) -> Response:
        """``{"ok": false, "error": reason}`` with ``status``."""
        return cls.json(status, {"ok": False, "error": reason})


Handler = Callable[[Request], Awaitable[Response]]
LINGER_SECONDS = 2.0
LINGER_MAX_BYTES = 32 * 1024 * 1024


class _Refused(Exception):
    """A request answered without calling the handler (then the connection closes)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class HttpServer:
    """Serve ``handler`` for POST requests on ``path`` at ``host:port`` (0 = any free port)."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int,
        path: str = "/",
        extra_paths: tuple[str, ...] = (),
        prefixes: tuple[str, ...] = (),
        methods: tuple[str, ...] = ("POST",),
        max_body_bytes: int = 1024 * 1024,
        max_header_bytes: int = 16 * 1024,
        max_headers: int = 100,
        header_timeout: float = 10.0,
        body_timeout: float = 30.0,
        idle_timeout: float = 60.0,
        stop_grace: float = 5.0,
        max_connections: int = 1024,
        max_connections_per_ip: int = 128,
        logger: logging.Logger | None = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.path = path
        self.extra_paths = extra_paths  # served too (the A2A agent card's well-known path)
        self.prefixes = prefixes  # and every path under these (webhook's <PATH>/approvals/)
        self.methods = methods
        self.max_body_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes
        self.max_headers = max_headers
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.idle_timeout = idle_timeout
        self.stop_grace = stop_grace
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.logger = logger or logging.getLogger("goondan.connector.http")
        self._server: asyncio.Server | None = None
        self._peers: dict[asyncio.Task[None], str] = {}  # every counted connection -> its address
        self._per_ip: Counter[str] = Counter()
        # connections waiting for a request line, the longest waiting first: the ones closed
        # to make room (a dict keeps insertion order; a connection going idle is re-inserted)
        self._idle: dict[asyncio.Task[None], None] = {}
        self._stopping = False

    def __repr__(self) -> str:
        state = "serving" if self._server is not None else "stopped"
        return (
            f"<HttpServer {self.host}:{self.port}{self.path} "
            f"{state} connections={len(self._peers)} "
            f"idle={len(self._idle)}>"
        )

    async def start(self) -> None:
        """Bind and listen; afterwards :attr:`port` is the bound port."""
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, limit=self.max_header_bytes + 2, backlog=512,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def serve_forever(self) -> None:
        """Serve until cancelled, then stop gracefully (see the module docstring)."""
        if self._server is None:
            await self.start()
        try:
            await asyncio.Future()  # until cancelled
        finally:
            await asyncio.shield(self.stop())

    async def stop(self) -> None:
        """Close the listener and every connection, letting busy ones finish their request."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._idle):
            task.cancel()
        busy = [task for task in self._peers if not task.done()]
        if busy:
            _, pending = await asyncio.wait(busy, timeout=self.stop_grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)

    # -- one connection ------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            if self._stopping:
                return
            if not self._admit(task, _peer_host(writer)):  # keep file descriptors for the others
                await self._send(writer, Response.error(503, "too_many_connections"), close=True)
                await self._linger(reader, writer)
                return
            await self._serve_connection(task, reader, writer)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:  # a bug here must not kill the server
            self.logger.exception("HTTP connection failed")
        finally:
            self._forget(task)
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()

    async def _serve_connection(self, task: asyncio.Task[None], reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
        wait = self.header_timeout  # a new connection must send its request line soon
        while not self._stopping:
            self._idle[task] = None  # the longest idle is the first one closed to make room
            try:
                # asyncio.timeout, not wait_for: no extra task per request on the hot path
                async with asyncio.timeout(wait):
                    first = await reader.readline()
            except TimeoutError:
                return
            except ValueError:  # a request line longer than the stream limit
                await self._send(writer, Response.error(431, "headers_too_large"), close=True)
                return
            finally:
                self._idle.pop(task, None)
            if not first:
                return  # the client closed
            wait = self.idle_timeout
            try:
                request, keep_alive = await self._read_request(first, reader, writer)
            except _Refused as refused:
                response = Response.error(refused.status, refused.reason)
                if refused.status == 405:
                    response.headers["Allow"] = ", ".join(self.methods)
                await self._send(writer, response, close=True)
                await self._linger(reader, writer)
                return
            except TimeoutError:
                await self._send(writer, Response.error(408, "timeout"), close=True)
                return
            try:
                response = await self.handler(request)
            except Exception:
                self.logger.exception("request handler failed")
                response = Response.error(500, "internal_error")
            keep_alive = keep_alive and not self._stopping
            await self._send(writer, response, close=not keep_alive)
            if not keep_alive:
                return

    def _admit(self, task: asyncio.Task[None], peer: str) -> bool:
        """Count a new connection, closing idle ones to make room; ``False`` when every
        connection that would have to make room is busy (see the module docstring)."""
        if self._per_ip[peer] >= self.max_connections_per_ip and not self._close_idle(peer):
            return False
        if len(self._peers) >= self.max_connections and not self._close_idle(None):
            return False
        self._peers[task] = peer
        self._per_ip[peer] += 1
        return True

    def _close_idle(self, peer: str | None) -> bool:
        """Close the connection idle the longest (of ``peer``, or of anyone)."""
        victim = next((t for t in self._idle if peer is None or self._peers.get(t) == peer), None)
        if victim is None:
            return False
        self._forget(victim)  # uncounted now: its slot is the new connection's
        victim.cancel()
        return True

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._idle.pop(task, None)
        peer = self._peers.pop(task, None)
        if peer is not None:
            self._per_ip[peer] -= 1
            if not self._per_ip[peer]:
                del self._per_ip[peer]

    async def _read_request(self, first: bytes, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> tuple[Request, bool]:
        async with asyncio.timeout(self.header_timeout):
            method, target, version = _request_line(first, self.max_header_bytes)
            headers = await self._read_headers(reader, len(first))
        parts = urlsplit(target)
        if (parts.path != self.path and parts.path not in self.extra_paths
                and not parts.path.startswith(self.prefixes)):
            raise _Refused(404, "not_found")
        if method not in self.methods:
            raise _Refused(405, "method_not_allowed")
        connection = headers.get("connection", "").lower()
        keep_alive = (
            "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        )
        length = _content_length(headers, self.max_body_bytes)
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        async with asyncio.timeout(self.body_timeout):
            if length is None:
                body = await self._read_chunked(reader)
            else:
                body = await reader.readexactly(length) if length else b""
        return Request(method, parts.path, parts.query, headers, body), keep_alive

    async def _read_headers(self, reader: asyncio.StreamReader, used: int) -> dict[str, str]:
        headers: dict[str, str] = {}
        count = 0
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # longer than the stream limit
                raise _Refused(431, "headers_too_large") from None
            if not line:
                raise asyncio.IncompleteReadError(b"", None)
            used += len(line)
            if used > self.max_header_bytes:
                raise _Refused(431, "headers_too_large")
            if line in (b"\r\n", b"\n"):
                return headers
            count += 1
            if count > self.max_headers:
                raise _Refused(431, "too_many_headers")
            name, sep, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if not sep or not name or name != name.strip() or " " in name:
                raise _Refused(400, "bad_header")
            value = value.strip()
            if name in headers and name in ("content-length", "transfer-encoding", "host"):
                raise _Refused(400, f"duplicate_{name.replace('-', '_')}")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value

    async def _read_chunked(self, reader: asyncio.StreamReader) -> bytes:
        body = bytearray()
        while True:
            size_line = await reader.readline()
            if not size_line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(bytes(size_line), None)
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _Refused(400, "bad_chunk") from None
            if size < 0:
                raise _Refused(400, "bad_chunk")
            if size == 0:
                break
            if len(body) + size > self.max_body_bytes:
                raise _Refused(413, "payload_too_large")
            body += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                raise _Refused(400, "bad_chunk")
        trailers = 0
        while True:  # trailer section, ignored
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                return bytes(body)
            trailers += 1
            if trailers > self.max_headers:
                raise _Refused(431, "too_many_headers")

    async def _linger(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close and discard what the client still sends (a refused body) for a moment:
        closing with unread data makes the kernel send a reset, which can destroy the answer
        before the client read it."""
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(LINGER_SECONDS):
                discarded = 0
                while discarded < LINGER_MAX_BYTES:
                    chunk = await reader.read(65536)
                    if not chunk:
                        return
                    discarded += len(chunk)

    async def _send(self, writer: asyncio.StreamWriter, response: Response, *, close: bool) -> None:
        reason = _REASONS.get(response.status, "Unknown")
        head = [f"HTTP/1.1 {response.status} {reason}", f"Content-Type: {response.content_type}"]
        if response.stream is None:
            head.append(f"Content-Length: {len(response.body)}")
        else:
            head.append("Transfer-Encoding: chunked")
        head.extend(f"{name}: {value}" for name, value in response.headers.items())
        if close:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        await writer.drain()
        if response.stream is not None:
            await self._send_stream(writer, response.stream)

    async def _send_stream(
        self, writer: asyncio.StreamWriter, stream: AsyncIterator[bytes]
    ) -> None:
        try:
            async for chunk in stream:
                if chunk:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            closer = getattr(stream, "aclose", None)
            if closer is not None:
                await closer()


def _peer_host(writer: asyncio.StreamWriter) -> str:
    """The client's address (without the port), for the per-address limit."""
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"


def _request_line(line: bytes, limit: int) -> tuple[str, str, str]:
    if len(line) > limit:
        raise _Refused(431, "headers_too_large")
    parts = line.decode("latin-1").strip().split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1].startswith("/"):
        raise _Refused(400, "bad_request_line")
    return parts[0], parts[1], parts[2]


def _content_length(headers: dict[str, str], limit: int) -> int | None:
    """The body length, or ``None`` for a chunked body; refuses what we will not read."""
    coding = headers.get("transfer-encoding")
    raw = headers.get("content-length")
    if coding is not None:
        if raw is not None:
            raise _Refused(400, "conflicting_length")  # request smuggling shape
        if coding.strip().lower() != "chunked":
            raise _Refused(400, "unsupported_transfer_encoding")
        return None
    if raw is None:
        return 0
    if not raw.isdigit():
        raise _Refused(400, "bad_content_length")
    length = int(raw)
    if length > limit:
        raise _Refused(413, "payload_too_large")
    return length
