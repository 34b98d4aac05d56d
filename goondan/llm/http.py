"""The urllib3 transport shared by every provider adapter — the only module that imports urllib3.

One :class:`urllib3.PoolManager` per process (:func:`pool_manager`). A :class:`HttpTransport`
posts JSON and either returns the decoded JSON body (:meth:`HttpTransport.post_json`) or yields
Server-Sent Events (:meth:`HttpTransport.stream_sse`). Around that it owns:

* **timeouts** — ``timeout_ms`` (Model ``spec.timeoutMs``) is both the connect timeout and the
  per-read idle timeout; without it, 10 s to connect and 600 s between bytes.
* **retries** — :class:`RetryPolicy`: exponential backoff with full jitter on connection
  errors, timeouts, 408, 409, 429 and 5xx, honouring ``Retry-After`` / ``retry-after-ms``
  (seconds or an HTTP date, capped). 400/401/403/404 are never retried. A stream is retried only
  while opening it: once a 2xx status arrived, nothing is re-sent (part of it may already have
  reached the user). The policy takes an injectable ``sleep`` and ``random`` so tests assert the
  retry count and every computed delay without waiting.
* **error mapping** — :func:`map_urllib3_errors` turns urllib3/socket failures into
  ``goondan.errors`` ``Llm*`` classes in one place (most specific first, ``raise … from``), and
  :func:`error_for_status` turns an HTTP error status plus the provider's error JSON into
  ``E_LLM_AUTH`` / ``E_LLM_RATE_LIMIT`` / ``E_LLM_HTTP``. Every message passes through
  :func:`goondan.secrets.mask`.
* **cancellation** — blocking urllib3 calls run in a worker thread (``asyncio.to_thread``).
  When the awaiting task is cancelled, the transport shuts the request's socket down from the
  event-loop side, so the worker unblocks at once and the server sees the connection close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import re
import socket
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from urllib3 import exceptions as u3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from goondan.errors import (
    LlmAuthError,
    LlmBadResponseError,
    LlmConnectionError,
    LlmContextLengthError,
    LlmError,
    LlmHttpError,
    LlmRateLimitError,
    LlmTimeoutError,
)
from goondan.llm.sse import SseEvent, SseParser
from goondan.llm.wire import encode_json
from goondan.secrets import mask
from goondan.text import clean_json
from goondan.types import JsonObject

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_READ_TIMEOUT",
    "HttpTransport",
    "RetryPolicy",
    "error_for_status",
    "extract_error_message",
    "is_context_length_error",
    "map_urllib3_errors",
    "parse_retry_after",
    "pool_manager",
    "shorten",
]

logger = logging.getLogger("goondan.llm")

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 600.0
_ERROR_BODY_LIMIT = 64 * 1024
_READ_CHUNK = 64 * 1024


# --------------------------------------------------------------------------- retry policy


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before re-sending a failed request (immutable).

    ``max_retries`` counts re-sends (so at most ``max_retries + 1`` attempts). The n-th retry
    (0-based) waits ``random() * min(max_delay, base_delay * 2**n)`` ("full jitter"), or the
    server's ``Retry-After`` capped at ``max_retry_after`` when it sent one.
    """

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    retry_statuses: frozenset[int] = frozenset({408, 409, 429})
    sleep: Callable[[float], Awaitable[Any]] = field(default=asyncio.sleep, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)
    clock: Callable[[], float] = field(default=time.time, compare=False)  # for HTTP-date headers

    def is_retryable_status(self, status: int) -> bool:
        """408, 409, 429 and every 5xx (the statuses a later identical request may pass)."""
        return status in self.retry_statuses or 500 <= status <= 599

    def is_retryable(self, error: LlmError) -> bool:
        """Whether ``error`` is worth another attempt: the error says it may pass later
        (``LlmError.retryable``: connection trouble, timeouts, 408/409/429/5xx that are not a
        validation report) and, for HTTP errors, its status is one this policy retries."""
        if not error.retryable:
            return False
        if isinstance(error, LlmHttpError):
            return self.is_retryable_status(error.status)
        return True

    def delay_for(self, retry_index: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry_index`` (0-based)."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after))
        ceiling = min(self.max_delay, self.base_delay * (2.0**retry_index))
        return self.random() * ceiling


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms``, then ``Retry-After``.

    ``Retry-After`` is either delay-seconds or an HTTP date (RFC 9110 §10.2.3); unparsable
    values are ignored.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms:
        with contextlib.suppress(ValueError):
            return max(0.0, float(raw_ms) / 1000.0)
    raw = lowered.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    with contextlib.suppress(ValueError):
        return max(0.0, float(raw))
    import email.utils  # rare (an HTTP-date Retry-After): not imported at every start

    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


# --------------------------------------------------------------------------- errors


def _error_object(body: bytes) -> Any:
    """The decoded error JSON (the ``error`` member when present), or None."""
    try:
        data = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]  # Gemini sometimes wraps the error object in a list
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data["error"]
    return data


def extract_error_message(body: bytes) -> str | None:
    """The provider's human message from an error body (OpenAI, Anthropic and Gemini shapes)."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        data = clean_json(json.loads(text))  # the U+FFFD rule: error text is printed
    except ValueError:
        return text[:500]
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]  # Gemini sometimes wraps the error object in a list
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            for key in ("message", "detail", "error"):
                value = error.get(key)
                if isinstance(value, str) and value:
                    return value
        if isinstance(error, str) and error:
            return error
        for key in ("message", "detail"):
            value = data.get(key)
            if isinstance(value, str) and value:
                return value
    return text[:500]


# How the servers we know say "the prompt does not fit": OpenAI and llama-cpp-python use the
# code ``context_length_exceeded``, llama.cpp's server the type ``exceed_context_size_error``,
# Anthropic only a message ("prompt is too long: N tokens > M maximum"), Gemini "input token
# count (N) exceeds the maximum number of tokens allowed".
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_PHRASES = re.compile(
    r"prompt is too long|maximum context length|context length exceeded|context window"
    r"|exceeds the available context size|exceeds the maximum number of tokens"
    r"|input is too long|too many tokens",
    re.IGNORECASE,
)
# A 5xx whose body is a request validation error (llama-cpp-python answers a message it cannot
# parse with HTTP 500 and a pydantic report): the same request would fail again.
_VALIDATION_PHRASES = re.compile(
    r"validation error|input should be|field required|is not of type|invalid request",
    re.IGNORECASE,
)
_MESSAGE_LIMIT = 300
CONTEXT_LENGTH_SUGGESTION = (
    "The conversation no longer fits the model's context window. The failed turn was not kept; "
    "send a shorter message, start over with /clear (goondan repl), or keep the history short "
    "with the message-window or message-compaction extension (docs/base-extensions.md)."
)


def is_context_length_error(status: int, body: bytes) -> bool:
    """Whether an error answer says that the prompt exceeds the model's context window."""
    if status not in (400, 413, 422, 500):
        return False
    error = _error_object(body)
    if isinstance(error, dict):
        for key in ("code", "type", "status"):
            if str(error.get(key) or "") in _CONTEXT_CODES:
                return True
    message = extract_error_message(body) or ""
    return bool(_CONTEXT_PHRASES.search(message))


def shorten(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    """``text`` on one line, cut to ``limit`` characters (server messages can be stack traces)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def error_for_status(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    *,
    label: str,
    auth_suggestion: str | None = None,
    now: float | None = None,
) -> LlmError:
    """Map an HTTP error status to the matching ``Llm*`` error, with the provider's message."""
    detail = extract_error_message(body)
    message = mask(f"{label} returned HTTP {status}" + (f": {shorten(detail)}" if detail else ""))
    if status in (401, 403):
        return LlmAuthError(
            message,
            suggestion=auth_suggestion or "Check the Model's apiKey and that it may use this model.",
        )
    if status == 429:
        return LlmRateLimitError(
            message,
            retry_after=parse_retry_after(headers, now=now),
            suggestion="The provider is rate limiting; wait, lower the request rate or raise the quota.",
        )
    if is_context_length_error(status, body):
        return LlmContextLengthError(
            message, status=status, retryable=False, suggestion=CONTEXT_LENGTH_SUGGESTION
        )
    suggestion = None
    retryable: bool | None = None
    if status == 404:
        suggestion = "Check the Model's model name and spec.endpoint (it must include the version, e.g. /v1)."
    elif status == 400:
        suggestion = "The provider rejected the request; check spec.options and modelConfig.params."
    elif status >= 500 and detail and _VALIDATION_PHRASES.search(detail):
        retryable = False
        suggestion = (
            "The server could not process the request (it reported a validation error, so "
            "retrying cannot help); check that spec.provider matches the server and see "
            "docs/models.md for servers that need other request options."
        )
    elif status >= 500:
        suggestion = "The provider had a server error and retrying did not help; try again later."
    return LlmHttpError(message, status=status, retryable=retryable, suggestion=suggestion)


@contextlib.contextmanager
def map_urllib3_errors(label: str, url: str) -> Iterator[None]:
    """Translate urllib3 / socket failures raised inside the block into ``Llm*`` errors."""
    where = _safe_origin(url)
    try:
        yield
    except LlmError:
        raise
    except u3.MaxRetryError as exc:  # only if someone passes retries through; unwrap the cause
        with map_urllib3_errors(label, url):
            raise (exc.reason or exc) from exc
    except u3.NewConnectionError as exc:  # before ConnectTimeoutError: it is a subclass of it
        raise LlmConnectionError(
            mask(f"cannot connect to {label} at {where}: {_reason(exc)}"),
            suggestion="Check the network and the Model's spec.endpoint.",
        ) from exc
    except u3.ConnectTimeoutError as exc:
        raise LlmTimeoutError(
            mask(f"timed out connecting to {label} at {where}"),
            suggestion="Check the network, or raise the Model's spec.timeoutMs.",
        ) from exc
    except (u3.ReadTimeoutError, TimeoutError) as exc:
        error = LlmTimeoutError(
            mask(f"timed out waiting for {label} at {where}"),
            suggestion="Raise the Model's spec.timeoutMs, or ask for shorter replies.",
        )
        error.waiting_for_reply = True
        raise error from exc
    except (u3.DecodeError, u3.InvalidChunkLength, u3.InvalidHeader) as exc:
        raise LlmBadResponseError(
            mask(f"{label} sent a malformed HTTP response: {_reason(exc)}"),
            suggestion="Check that spec.endpoint points at the provider's API.",
        ) from exc
    except (u3.LocationValueError, u3.URLSchemeUnknown) as exc:
        raise LlmConnectionError(
            mask(f"invalid {label} endpoint {where}: {_reason(exc)}"),
            suggestion="Set the Model's spec.endpoint to an http(s) URL such as https://host/v1.",
        ) from exc
    except (u3.HTTPError, OSError) as exc:  # ProtocolError, SSLError, ProxyError, resets ...
        raise LlmConnectionError(
            mask(f"connection to {label} at {where} failed: {_reason(exc)}"),
            suggestion="Check the network and the Model's spec.endpoint.",
        ) from exc


# urllib3 2.x starts messages with the connection's repr: "HTTPConnection(host='h', port=1): "
# (1.x: "<urllib3.connection.HTTPConnection object at 0x...>: ").
_CONNECTION_REPR = re.compile(r"^<?[\w.]*Connection(?:Pool)?\b[^:]*?(?:\)|>): ")


def _reason(exc: BaseException) -> str:
    """The operating system's reason (``Connection refused``) when there is one, else urllib3's
    message without the connection object's repr."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return current.strerror[:300]
        current = current.__cause__ or current.__context__
    text = str(exc) or type(exc).__name__
    text = _CONNECTION_REPR.sub("", text)
    text = text.removeprefix("Failed to establish a new connection: ")
    return text[:300]


def _safe_origin(url: str) -> str:
    """scheme://host:port only — never the path or query, which might carry a key."""
    try:
        parsed = urllib3.util.parse_url(url)
    except u3.LocationParseError:
        return "<invalid URL>"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme or 'http'}://{parsed.host or ''}{port}"


# --------------------------------------------------------------------------- pool + abort


_local = threading.local()


class _AbortHandle:
    """Lets the event loop shut down the socket a worker thread is blocked on.

    The socket object itself is remembered: ``http.client`` drops ``conn.sock`` once a
    ``Connection: close`` response starts, while the response keeps reading from it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self.aborted = False

    def attach(self, conn: HTTPConnection) -> None:
        with self._lock:
            self._conn = conn
            sock = getattr(conn, "sock", None)
            if sock is not None:
                self._sock = sock
            aborted = self.aborted
        if aborted:
            self._shutdown()

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
        self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            sock = self._sock
            if sock is None and self._conn is not None:
                sock = getattr(self._conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _attach_current(conn: HTTPConnection) -> None:
    handle: _AbortHandle | None = getattr(_local, "abort", None)
    if handle is not None:
        handle.attach(conn)


class _TrackedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _attach_current(self)

    def request(self, *args: Any, **kwargs: Any) -> None:  # reused connections skip connect()
        _attach_current(self)
        super().request(*args, **kwargs)


class _TrackedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _attach_current(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach_current(self)
        super().request(*args, **kwargs)


class _TrackedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


_pool_lock = threading.Lock()
_pool: urllib3.PoolManager | None = None


def pool_manager() -> urllib3.PoolManager:
    """The process-wide PoolManager (created on first use; its connections are abortable)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            manager = urllib3.PoolManager(num_pools=16, maxsize=8, block=False)
            manager.pool_classes_by_scheme = {
                "http": _TrackedHTTPConnectionPool,
                "https": _TrackedHTTPSConnectionPool,
            }
            _pool = manager
        return _pool


# --------------------------------------------------------------------------- transport


class HttpTransport:
    """POST JSON to one provider, with timeouts, retries, error mapping and cancellation.

    ``label`` names the provider in messages ("OpenAI"); ``auth_suggestion`` is attached to
    401/403 errors (it names the API key variable). ``attempts`` counts HTTP attempts of the
    last call, for tests and diagnostics.
    """

    def __init__(
        self,
        *,
        label: str = "the model provider",
        timeout_ms: int | None = None,
        retry_policy: RetryPolicy | None = None,
        auth_suggestion: str | None = None,
        pool: urllib3.PoolManager | None = None,
    ) -> None:
        self.label = label
        self.retry_policy = retry_policy or RetryPolicy()
        self.auth_suggestion = auth_suggestion
        self._pool = pool
        if timeout_ms is not None and timeout_ms > 0:
            seconds = timeout_ms / 1000.0
            self.timeout = urllib3.Timeout(connect=seconds, read=seconds)
        else:
            self.timeout = urllib3.Timeout(connect=DEFAULT_CONNECT_TIMEOUT, read=DEFAULT_READ_TIMEOUT)
        self.attempts = 0

    def __repr__(self) -> str:
        return f"HttpTransport(label={self.label!r}, timeout={self.timeout!r})"

    @property
    def pool(self) -> urllib3.PoolManager:
        return self._pool if self._pool is not None else pool_manager()

    async def post_json(
        self, url: str, body: JsonObject | bytes | list[bytes], headers: Mapping[str, str]
    ) -> JsonObject:
        """POST ``body`` (an object, or its encoded bytes, whole or in chunks) and return the
        JSON object the server answered (retrying as allowed)."""
        payload = _payload(body)

        async def attempt() -> JsonObject:
            status, response_headers, data = await self._run(self._blocking_request, url, payload, headers)
            if status >= 400:
                raise error_for_status(
                    status, data, response_headers, label=self.label,
                    auth_suggestion=self.auth_suggestion, now=self.retry_policy.clock(),
                )
            return self._decode_json(data)

        result: JsonObject = await self._with_retries(url, attempt, resend_after_silence=1)
        return result

    async def stream_sse(
        self, url: str, body: JsonObject | bytes | list[bytes], headers: Mapping[str, str]
    ) -> AsyncGenerator[SseEvent, None]:
        """POST ``body`` and yield the response's Server-Sent Events as they arrive.

        Opening the stream is retried like :meth:`post_json`; after the 2xx status nothing is
        retried. Use with ``contextlib.aclosing`` so an early exit releases the connection.
        """
        payload = _payload(body)
        stream_headers = {**headers, "Accept": "text/event-stream", "Accept-Encoding": "identity"}
        abort = _AbortHandle()

        async def attempt() -> Any:
            return await self._run(self._blocking_open, url, payload, stream_headers, abort=abort)

        response = await self._with_retries(url, attempt)
        parser = SseParser()
        try:
            while True:
                chunk = await self._run(self._blocking_read, response, url, abort=abort)
                if not chunk:
                    break
                for event in parser.feed(chunk):
                    yield event
            for event in parser.close():
                yield event
        finally:
            if abort.aborted:
                await asyncio.to_thread(_discard, response)
            else:
                _release(response)

    # -- internals -------------------------------------------------------------------------

    async def _with_retries(
        self,
        url: str,
        attempt: Callable[[], Awaitable[Any]],
        *,
        resend_after_silence: int | None = None,
    ) -> Any:
        """Run ``attempt`` under the retry policy.

        The server's message is logged once, at the first retry (the final error repeats it
        only if every attempt failed). ``resend_after_silence`` caps re-sends after a read
        timeout: a server that went silent is usually still generating the first answer, and
        every re-send of a non-streamed request queues the same work again behind it.
        """
        policy = self.retry_policy
        self.attempts = 0
        retry_index = 0
        silences = 0
        while True:
            self.attempts += 1
            try:
                return await attempt()
            except LlmError as error:
                if retry_index >= policy.max_retries or not policy.is_retryable(error):
                    raise
                if isinstance(error, LlmTimeoutError) and error.waiting_for_reply:
                    silences += 1
                    if resend_after_silence is not None and silences > resend_after_silence:
                        raise
                retry_after = getattr(error, "retry_after", None)
                delay = policy.delay_for(retry_index, retry_after)
                if retry_index == 0:
                    logger.warning("%s; retrying (up to %d more attempts)",
                                   shorten(error.message), policy.max_retries)
                logger.info(
                    "%s: %s; retry %d/%d in %.2fs",
                    self.label, error.code, retry_index + 1, policy.max_retries, delay,
                )
                retry_index += 1
                await policy.sleep(delay)

    async def _run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        abort: _AbortHandle | None = None,
    ) -> Any:
        """Run blocking ``fn(*args, abort)`` in a worker thread; on cancellation, abort its socket."""
        handle = abort or _AbortHandle()
        try:
            return await asyncio.to_thread(fn, *args, handle)
        except asyncio.CancelledError:
            handle.abort()
            raise

    def _blocking_request(
        self, url: str, payload: bytes | list[bytes], headers: Mapping[str, str], abort: _AbortHandle
    ) -> tuple[int, dict[str, str], bytes]:
        _local.abort = abort
        try:
            with map_urllib3_errors(self.label, url):
                response = self._urlopen(url, payload, headers)
                try:
                    data = response.read()
                    return response.status, dict(response.headers), data
                finally:
                    response.release_conn()
        finally:
            _local.abort = None

    def _blocking_open(
        self, url: str, payload: bytes | list[bytes], headers: Mapping[str, str], abort: _AbortHandle
    ) -> Any:
        _local.abort = abort
        try:
            with map_urllib3_errors(self.label, url):
                response = self._urlopen(url, payload, headers)
                if response.status >= 400:
                    try:
                        data = response.read(_ERROR_BODY_LIMIT)
                    finally:
                        response.release_conn()
                    raise error_for_status(
                        response.status, data, dict(response.headers), label=self.label,
                        auth_suggestion=self.auth_suggestion, now=self.retry_policy.clock(),
                    )
                return response
        finally:
            _local.abort = None

    def _blocking_read(self, response: Any, url: str, abort: _AbortHandle) -> bytes:
        with map_urllib3_errors(self.label, url):
            try:
                chunk: bytes = response.read1(_READ_CHUNK)
            except u3.ProtocolError as exc:
                if abort.aborted:
                    return b""
                # ProtocolError's text is a tuple repr ("('Connection broken: ...', ...)"):
                # say what happened in a sentence instead.
                raise LlmBadResponseError(
                    f"{self.label} stream was cut off: the connection closed before the reply was complete.",
                    suggestion="The connection or the server stopped mid-reply; try again.",
                ) from exc
            return chunk

    def _urlopen(self, url: str, payload: bytes | list[bytes], headers: Mapping[str, str]) -> Any:
        all_headers = {"Content-Type": "application/json", **headers}
        if isinstance(payload, list):
            # Chunks are written one after the other; the length keeps the body unchunked.
            all_headers["Content-Length"] = str(sum(map(len, payload)))
        return self.pool.urlopen(
            "POST", url, body=payload, headers=all_headers, timeout=self.timeout,
            retries=False, redirect=False, preload_content=False,
        )

    def _decode_json(self, data: bytes) -> JsonObject:
        try:
            # A "\\udcff" escape is valid JSON for a lone surrogate: the U+FFFD rule applies.
            value = clean_json(json.loads(data))
        except ValueError as exc:
            raise LlmBadResponseError(
                f"{self.label} returned a body that is not valid JSON ({len(data)} bytes)",
                suggestion="Check that spec.endpoint points at the provider's API.",
            ) from exc
        if not isinstance(value, dict):
            raise LlmBadResponseError(
                f"{self.label} returned JSON {type(value).__name__}, expected an object",
                suggestion="Check that spec.endpoint points at the provider's API.",
            )
        return value


def _payload(body: JsonObject | bytes | list[bytes]) -> bytes | list[bytes]:
    if isinstance(body, bytes):
        return body
    if isinstance(body, list):
        return body[0] if len(body) == 1 else body
    return _encode(body)


def _encode(body: JsonObject) -> bytes:
    # encode_json cleans lone surrogates: one that slipped into a request must not make it unsendable.
    return encode_json(body)


def _release(response: Any) -> None:
    """Give the connection back if the body was fully read, else close it (it is mid-stream)."""
    try:
        if response.closed or getattr(response, "length_remaining", None) == 0:
            response.release_conn()
        else:
            response.close()
            response.release_conn()
    except Exception:  # pragma: no cover - best effort cleanup
        logger.debug("closing a streamed response failed", exc_info=True)


def _discard(response: Any) -> None:
    with contextlib.suppress(Exception):
        response.close()
        response.release_conn()
