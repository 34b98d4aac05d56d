"""MCP transports: stdio (a child process) and Streamable HTTP (docs/mcp.md "Transports").

A transport moves JSON-RPC messages; :class:`~goondan.mcp.client.McpSession` matches requests
and responses. Both deliver every incoming message to ``on_message`` on the event loop and
report the end of the connection once to ``on_closed``.

* :class:`StdioTransport` — the server is a child process; messages are newline-delimited JSON
  on its stdin/stdout, its stderr lines go to the agent's log. Closing closes stdin (servers
  exit on EOF), then terminates and finally kills the process, so no server outlives its agent.
* :class:`HttpTransport` — each message is a POST; the server answers 202 (notifications),
  ``application/json`` or a ``text/event-stream`` carrying the response (and any notification
  sent meanwhile). The ``Mcp-Session-Id`` from ``initialize`` goes on every later request; a 404
  on a request carrying it, or a 400 that speaks of the session (:func:`session_gone`), means
  the session expired (:data:`SESSION_EXPIRED`), and the session re-initialises. Once the session is
  initialised, a daemon thread keeps the optional ``GET`` stream open for messages the server sends
  on its own (a ``tools/list_changed`` after a background change, a ``ping``), reconnecting with
  ``Last-Event-ID``; a server that answers 405 has no such stream. Requests go through the HTTP
  layer (``goondan/http/``) in daemon
  threads: a failure sending a message is ``E_MCP_CONNECTION`` (with the server's origin, never
  its path or query), one while reading the answer ``E_MCP_PROTOCOL``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from goondan.errors import McpError
from goondan.llm.sse import SseParser
from goondan.mcp.protocol import decode_message, encode_message
from goondan.secrets import mask
from goondan.tools.processes import owner_env
from goondan.tools.providers import run_in_daemon_thread
from goondan.types import JsonObject

__all__ = ["SESSION_EXPIRED", "HttpTransport", "StdioTransport", "Transport", "session_gone"]

SESSION_EXPIRED = "E_MCP_SESSION_EXPIRED"
MessageHandler = Callable[[JsonObject], None]
ClosedHandler = Callable[[str], None]
# A line longer than this (a huge tool result) is still read: the limit only bounds one chunk.
_LINE_LIMIT = 64 * 1024 * 1024
_CLOSE_GRACE_S = 2.0
# A start failure's warning quotes the server's last stderr lines, each cut to this length.
_STDERR_LINES = 20
_STDERR_LINE_CHARS = 500
# The GET stream reconnects after a drop (servers close it at will), backing off to this bound;
# it gives up after this many failed connects in a row (the POSTs report a dead server).
_LISTEN_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)
_LISTEN_MAX_FAILURES = 8


def session_gone(status: int, body: str) -> bool:
    """Whether an HTTP answer to a request that carried ``Mcp-Session-Id`` means the server no
    longer knows the session.

    The spec's answer is 404; servers built on the TypeScript SDK's examples answer 400
    "No valid session ID provided" instead. A 400 counts when its body speaks of the session.
    """
    return status == 404 or (status == 400 and "session" in body.lower())


class Transport(Protocol):
    """What :class:`~goondan.mcp.client.McpSession` needs from a connection."""

    async def start(self, on_message: MessageHandler, on_closed: ClosedHandler) -> None:
        """Connect (start the process); raise ``McpError`` ``E_MCP_START`` on failure."""
        ...

    async def send(self, message: JsonObject) -> None:
        """Send one message; responses arrive through ``on_message``."""
        ...

    def send_soon(self, message: JsonObject) -> None:
        """Send without waiting (a cancellation notice from a cancelled task)."""
        ...

    def set_protocol_version(self, version: str) -> None:
        """The negotiated revision (HTTP sends it as ``MCP-Protocol-Version``)."""
        ...

    async def close(self) -> None:
        """Disconnect and stop the process (idempotent)."""
        ...

    def status(self) -> JsonObject:
        """Transport facts for ``/tools`` and ``goondan doctor`` (pid, url, session)."""
        ...


class StdioTransport:
    """A server child process speaking newline-delimited JSON-RPC on stdin/stdout."""

    def __init__(self, command: list[str], *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, logger: logging.Logger | None = None,
                 label: str = "mcp") -> None:
        self.command = list(command)
        self.env = dict(env or {})
        self.cwd = cwd
        self.label = label
        self._log = logger or logging.getLogger("goondan.mcp")
        self._proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._stderr_lines: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._stderr_task: asyncio.Task[Any] | None = None

    def __repr__(self) -> str:
        pid = self._proc.pid if self._proc else None
        return f"<StdioTransport {self.label} pid={pid}>"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def start(self, on_message: MessageHandler, on_closed: ClosedHandler) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **self.env, **owner_env()},  # tools.processes markers
                cwd=str(self.cwd) if self.cwd else None,
                limit=_LINE_LIMIT,
                # Its own session: Ctrl-C in the terminal reaches the agent, which then closes
                # the server in order instead of the server dying mid-call.
                start_new_session=True,
            )
        except OSError as exc:
            raise McpError(f"MCP server {self.label!r}: cannot start {self.command[0]!r}: {exc}",
                           code="E_MCP_START",
                           suggestion="Check spec.mcp.command: the program must be installed "
                                      "and on PATH.") from exc
        self._tasks = [
            asyncio.create_task(self._read(on_message, on_closed), name=f"mcp-{self.label}-out"),
            asyncio.create_task(self._stderr(), name=f"mcp-{self.label}-err"),
        ]

    async def _read(self, on_message: MessageHandler, on_closed: ClosedHandler) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        reason = "the server closed its output"
        try:
            while True:
                line = await self._proc.stdout.readline()
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    message = decode_message(line)
                except McpError:
                    # Stray output on stdout (a print in the server): log it, keep reading.
                    self._log.warning("MCP server %s wrote a non-JSON line: %s",
                                      self.label, mask(line[:200].decode(errors="replace")))
                    continue
                on_message(message)
        except (ConnectionError, ValueError) as exc:
            reason = f"reading from the server failed: {exc}"
        finally:
            code = None
            with contextlib.suppress(Exception):
                code = await asyncio.wait_for(self._proc.wait(), 1.0)
            if code is not None:
                reason = f"the server process exited with code {code}"
            on_closed(reason)

    async def _stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        self._stderr_task = asyncio.current_task()
        while True:
            line = await self._proc.stderr.readline()
            if not line:
                return
            text = mask(line.decode(errors="replace").rstrip())
            self._stderr_lines.append(text[:_STDERR_LINE_CHARS])
            self._log.info("[mcp %s] %s", self.label, text)

    async def stderr_tail(self, *, exited: bool = False) -> str | None:
        """The last lines the server wrote on stderr (masked), for a start failure's warning.

        ``None`` when no process was started. ``exited``: the server is known to be gone (its
        pipes closed), so wait up to ``_CLOSE_GRACE_S`` for the process to end and its last
        stderr lines to be read (the exit can be noticed a moment after the pipe broke).
        Otherwise the lines read so far are returned at once: a hung server's are all there.
        """
        proc = self._proc
        if proc is None:
            return None
        if exited or proc.returncode is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_CLOSE_GRACE_S):
                    await asyncio.shield(proc.wait())
                    if self._stderr_task is None:
                        await asyncio.sleep(0)  # the reader has not run yet: let it start
                    if self._stderr_task is not None:
                        await asyncio.shield(self._stderr_task)
        return "\n".join(self._stderr_lines)

    async def send(self, message: JsonObject) -> None:
        self.send_soon(message)
        assert self._proc is not None and self._proc.stdin is not None
        try:
            await self._proc.stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise McpError(f"MCP server {self.label!r} is gone: {exc}",
                           code="E_MCP_CLOSED") from exc

    def send_soon(self, message: JsonObject) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            raise McpError(f"MCP server {self.label!r} is not running", code="E_MCP_CLOSED")
        proc.stdin.write(encode_message(message))

    def set_protocol_version(self, version: str) -> None:
        """Nothing to do: stdio carries no per-message version."""

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            # The stdio shutdown order of the MCP lifecycle: close stdin, wait, SIGTERM, SIGKILL.
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None:  # the whole process group: `sh -c` servers and their children
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, sig)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), _CLOSE_GRACE_S)
                    break
            # What the server left in its group (children that outlived it, or ignored SIGTERM).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        for task in self._tasks:
            if task is not asyncio.current_task():
                with contextlib.suppress(BaseException):
                    await task

    def status(self) -> JsonObject:
        return {"transport": "stdio", "command": self.command, "pid": self.pid}


class HttpTransport:
    """Streamable HTTP: one POST per message, JSON or SSE answers, ``Mcp-Session-Id``."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None,
                 timeout_s: float = 60.0, logger: logging.Logger | None = None,
                 label: str = "mcp") -> None:
        import goondan.http as http  # only when an HTTP server is used: keeps start-up light

        self.url = url
        self.headers = dict(headers or {})
        self.label = label
        self.timeout_s = timeout_s
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._log = logger or logging.getLogger("goondan.mcp")
        self._pool = http.new_pool(maxsize=8)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_message: MessageHandler | None = None
        self._closed = False
        self._background: set[asyncio.Future[Any]] = set()
        self._listener: threading.Thread | None = None
        self._listen_response: Any = None
        self._stop_listening = threading.Event()

    def __repr__(self) -> str:
        return f"<HttpTransport {self.label} {self.url} session={self.session_id!r}>"

    async def start(self, on_message: MessageHandler, on_closed: ClosedHandler) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_message = on_message

    def set_protocol_version(self, version: str) -> None:
        self.protocol_version = version

    def _request_headers(
        self, accept: str = "application/json, text/event-stream"
    ) -> dict[str, str]:
        headers = {**self.headers, "Content-Type": "application/json", "Accept": accept}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        return headers

    def _deliver(self, message: JsonObject) -> None:
        assert self._loop is not None and self._on_message is not None
        self._loop.call_soon_threadsafe(self._on_message, message)

    def _post(self, message: JsonObject) -> None:
        import goondan.http as http
        from goondan.http import failures

        is_initialize = message.get("method") == "initialize"
        had_session = self.session_id is not None
        try:
            try:
                response = self._send_post(message)
            except Exception as exc:
                failure = http.failure_of(exc)
                if failure is None or failure.kind != failures.CONNECTION:
                    raise
                # A pooled keep-alive connection the server had already closed (uvicorn does
                # after some answers): the request never got through, so send it once more on
                # a fresh connection.
                response = self._send_post(message)
        except Exception as exc:
            failure = http.failure_of(exc)
            if failure is None:
                raise
            raise McpError(
                f"MCP server {self.label!r} at {http.safe_origin(self.url)}: {failure.reason}",
                code="E_MCP_CONNECTION",
                suggestion="Check that the server is running and spec.mcp.url.",
            ) from exc
        try:
            status = response.status
            if is_initialize and response.headers.get("Mcp-Session-Id"):
                self.session_id = response.headers["Mcp-Session-Id"]
            if status >= 400:
                body = response.read(2000).decode(errors="replace")
                if had_session and not is_initialize and session_gone(status, body):
                    self.session_id = None
                    raise McpError(f"MCP server {self.label!r}: the session expired "
                                   f"(HTTP {status})", code=SESSION_EXPIRED)
                raise McpError(f"MCP server {self.label!r} answered HTTP {status}: {mask(body)}",
                               code="E_MCP_HTTP",
                               suggestion="Check spec.mcp.url and spec.mcp.headers."
                               if status in (401, 403, 404) else None)
            if status == 202 or "id" not in message:
                return
            kind = (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if kind == "text/event-stream":
                self._read_events(response)
            else:
                payload = json.loads((response.read() or b"null").decode("utf-8", "replace"))
                for item in payload if isinstance(payload, list) else [payload]:
                    if isinstance(item, dict):
                        self._deliver(item)
        except Exception as exc:
            if isinstance(exc, McpError):
                raise
            failure = http.failure_of(exc)
            if failure is None and not isinstance(exc, ValueError):
                raise
            detail = failure.reason if failure is not None else str(exc)
            raise McpError(f"MCP server {self.label!r}: bad response: {detail}",
                           code="E_MCP_PROTOCOL") from exc
        finally:
            response.release_conn()

    def _send_post(self, message: JsonObject) -> Any:
        import goondan.http as http

        return self._pool.request(
            "POST", self.url, body=encode_message(message), headers=self._request_headers(),
            preload_content=False, timeout=http.timeout(self.timeout_s),
        )

    def _read_events(self, response: Any) -> None:
        parser = SseParser()
        for chunk in response.stream(8192):
            for event in parser.feed(chunk):
                if event.data.strip():
                    self._deliver(decode_message(event.data))
        for event in parser.close():
            if event.data.strip():
                self._deliver(decode_message(event.data))

    async def send(self, message: JsonObject) -> None:
        if self._closed:
            raise McpError(f"MCP server {self.label!r}: the connection is closed",
                           code="E_MCP_CLOSED")
        await run_in_daemon_thread(self._post, message, name=f"mcp-{self.label}")
        if message.get("method") == "notifications/initialized":
            self._listen()

    # --- the GET stream ---------------------------------------------------------------------

    def _listen(self) -> None:
        """Open the server-to-client stream of the session just initialised (one at a time)."""
        if self._closed or (self._listener is not None and self._listener.is_alive()):
            return
        self._listener = threading.Thread(target=self._listen_loop, args=(self.session_id,),
                                          name=f"mcp-{self.label}-listen", daemon=True)
        self._listener.start()

    def _listen_loop(self, session_id: str | None) -> None:
        import goondan.http as http

        last_event_id: str | None = None
        failures = 0
        # One stream per session: a re-initialised session starts its own listener.
        while not self._stop_listening.is_set() and self.session_id == session_id:
            headers = self._request_headers("text/event-stream")
            headers.pop("Content-Type")
            if last_event_id is not None:
                headers["Last-Event-ID"] = last_event_id
            try:
                response = self._pool.request(
                    "GET",
                    self.url,
                    headers=headers,
                    preload_content=False,
                    timeout=http.timeout(
                        None, connect_s=min(self.timeout_s, http.CONNECT_TIMEOUT_S)
                    ),
                )
            except Exception as exc:
                failure = http.failure_of(exc)
                if failure is None:
                    raise
                failures += 1
                self._log.debug("MCP %s: GET stream connect failed: %s", self.label, failure.reason)
            else:
                self._listen_response = response
                try:
                    if self._stop_listening.is_set():
                        return  # closed while connecting: close() may have missed the response
                    kind = (response.headers.get("Content-Type") or "").split(";")[0].strip()
                    if response.status != 200 or kind.lower() != "text/event-stream":
                        # 405: the server offers no stream; 404: the session ended (the next
                        # POST finds out and re-initialises, which listens again).
                        self._log.debug("MCP %s: no GET stream (HTTP %s)", self.label,
                                        response.status)
                        return
                    failures = 0
                    last_event_id = self._read_stream(response, last_event_id)
                except RuntimeError:
                    return  # the event loop is gone: nobody is left to deliver to
                except Exception as exc:
                    failure = http.failure_of(exc)
                    if failure is None and not isinstance(exc, ValueError):
                        raise
                    self._log.debug("MCP %s: GET stream ended: %s", self.label,
                                    failure.reason if failure is not None else exc)
                finally:
                    self._listen_response = None
                    with contextlib.suppress(Exception):
                        response.release_conn()
            if failures >= _LISTEN_MAX_FAILURES:
                return
            self._stop_listening.wait(_LISTEN_BACKOFF_S[min(failures, len(_LISTEN_BACKOFF_S) - 1)])

    def _read_stream(self, response: Any, last_event_id: str | None) -> str | None:
        """Deliver every message of one GET stream; returns the last event id seen."""
        parser = SseParser()
        for chunk in response.stream(8192):
            for event in parser.feed(chunk):
                last_event_id = event.id or last_event_id
                if event.data.strip():
                    self._deliver(decode_message(event.data))
        return last_event_id

    def send_soon(self, message: JsonObject) -> None:
        future = asyncio.ensure_future(self.send(message))
        self._background.add(future)
        future.add_done_callback(self._settled)

    def _settled(self, future: asyncio.Future[Any]) -> None:
        self._background.discard(future)
        if not future.cancelled() and future.exception() is not None:
            self._log.debug("MCP %s: background send failed: %s", self.label, future.exception())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_listening.set()
        response = self._listen_response
        if response is not None:
            # Unblocks the listener's read; it then sees the stop flag and ends.
            with contextlib.suppress(Exception):
                response.shutdown()
        if self.session_id:
            # Ends the session on the server (the spec's DELETE); a 405 or an error is fine.
            headers = self._request_headers()
            await run_in_daemon_thread(self._delete, headers, name=f"mcp-{self.label}-close")
        listener = self._listener
        if listener is not None and listener.is_alive():
            await run_in_daemon_thread(listener.join, _CLOSE_GRACE_S, name=f"mcp-{self.label}-join")
        self._pool.clear()

    def _delete(self, headers: dict[str, str]) -> None:
        import goondan.http as http

        with contextlib.suppress(Exception):
            self._pool.request("DELETE", self.url, headers=headers, timeout=http.timeout(2.0))

    def status(self) -> JsonObject:
        listening = self._listener is not None and self._listener.is_alive()
        return {"transport": "http", "url": self.url, "sessionId": self.session_id,
                "listening": listening}
