"""The HTTP transport shared by every provider adapter, on the HTTP layer (``goondan/http/``).

One abortable pool per process (:func:`pool_manager`). A :class:`HttpTransport`
posts JSON and either returns the decoded JSON body (:meth:`HttpTransport.post_json`) or yields
Server-Sent Events (:meth:`HttpTransport.stream_sse`). Around that it owns:

* **timeouts** — ``timeout_ms`` (Model ``spec.timeoutMs``) is both the connect timeout and the
  per-read idle timeout; without it, 10 s to connect and 600 s between bytes.
* **retries** — :class:`goondan.http.RetryPolicy` (re-exported here): exponential backoff
  with full jitter on connection
  errors, timeouts, 408, 409, 429 and 5xx, honouring ``Retry-After`` / ``retry-after-ms``
  (seconds or an HTTP date, capped). 400/401/403/404 are never retried. A stream is retried only
  while opening it: once a 2xx status arrived, nothing is re-sent (part of it may already have
  reached the user). The policy takes an injectable ``sleep`` and ``random`` so tests assert the
  retry count and every computed delay without waiting.
* **error mapping** — :func:`map_urllib3_errors` turns the HTTP layer's failure kinds
  (:func:`goondan.http.failure_of`) into ``goondan.errors`` ``Llm*`` classes, and
  :func:`error_for_status` turns an HTTP error status plus the provider's error JSON into
  ``E_LLM_AUTH`` / ``E_LLM_RATE_LIMIT`` / ``E_LLM_HTTP``. Every message passes through
  :func:`goondan.secrets.mask`.
* **cancellation** — blocking urllib3 calls run in a worker thread (``asyncio.to_thread``).
  When the awaiting task is cancelled, the transport shuts the request's socket down from the
  event-loop side (:class:`goondan.http.AbortHandle`), so the worker unblocks at once and the
  server sees the connection close.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from typing import Any

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
from goondan.http import (
    AbortHandle,
    RetryPolicy,
    abortable,
    close_response,
    failure_of,
    new_pool,
    parse_retry_after,
    safe_origin,
    timeout,
)
from goondan.http import failures as kinds
from goondan.http.pool import PoolManager
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
            suggestion=auth_suggestion
            or "Check the Model's apiKey and that it may use this model.",
        )
    if status == 429:
        return LlmRateLimitError(
            message,
            retry_after=parse_retry_after(headers, now=now),
            suggestion="The provider is rate limiting; wait, "
            "lower the request rate or raise the quota.",
        )
    if is_context_length_error(status, body):
        return LlmContextLengthError(
            message, status=status, retryable=False, suggestion=CONTEXT_LENGTH_SUGGESTION
        )
    suggestion = None
    retryable: bool | None = None
    if status == 404:
        suggestion = (
            "Check the Model's model name and "
            "spec.endpoint (it must include the version, e.g. /v1)."
        )
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


# What each failure kind of the HTTP layer is for a model call: class, message, suggestion.
_CHECK_ENDPOINT = "Check the network and the Model's spec.endpoint."
_FAILURES: dict[str, tuple[type[LlmError], str, str]] = {
    kinds.CONNECT: (
        LlmConnectionError,
        "cannot connect to {label} at {where}: {reason}",
        _CHECK_ENDPOINT,
    ),
    kinds.CONNECT_TIMEOUT: (
        LlmTimeoutError,
        "timed out connecting to {label} at {where}",
        "Check the network, or raise the Model's spec.timeoutMs.",
    ),
    kinds.READ_TIMEOUT: (
        LlmTimeoutError,
        "timed out waiting for {label} at {where}",
        "Raise the Model's spec.timeoutMs, or ask for shorter replies.",
    ),
    kinds.BAD_RESPONSE: (
        LlmBadResponseError,
        "{label} sent a malformed HTTP response: {reason}",
        "Check that spec.endpoint points at the provider's API.",
    ),
    kinds.INVALID_URL: (
        LlmConnectionError,
        "invalid {label} endpoint {where}: {reason}",
        "Set the Model's spec.endpoint to an http(s) URL such as https://host/v1.",
    ),
    kinds.CONNECTION: (
        LlmConnectionError,
        "connection to {label} at {where} failed: {reason}",
        _CHECK_ENDPOINT,
    ),
}


@contextlib.contextmanager
def map_urllib3_errors(label: str, url: str) -> Iterator[None]:
    """Translate urllib3 / socket failures raised inside the block into ``Llm*`` errors."""
    try:
        yield
    except LlmError:
        raise
    except Exception as exc:
        failure = failure_of(exc)
        if failure is None:
            raise
        cls, template, suggestion = _FAILURES[failure.kind]
        error = cls(
            mask(template.format(label=label, where=safe_origin(url), reason=failure.reason)),
            suggestion=suggestion,
        )
        if isinstance(error, LlmTimeoutError) and failure.kind == kinds.READ_TIMEOUT:
            error.waiting_for_reply = True  # the request went out; the server went silent
        raise error from exc


# --------------------------------------------------------------------------- pool


_pool_lock = threading.Lock()
_pool: PoolManager | None = None


def pool_manager() -> PoolManager:
    """The process-wide pool of the model adapters (created on first use; abortable)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = new_pool(num_pools=16, maxsize=8, abortable=True)
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
        pool: PoolManager | None = None,
    ) -> None:
        self.label = label
        self.retry_policy = retry_policy or RetryPolicy()
        self.auth_suggestion = auth_suggestion
        self._pool = pool
        if timeout_ms is not None and timeout_ms > 0:
            seconds = timeout_ms / 1000.0
            self.timeout = timeout(seconds, connect_s=seconds)
        else:
            self.timeout = timeout(DEFAULT_READ_TIMEOUT, connect_s=DEFAULT_CONNECT_TIMEOUT)
        self.attempts = 0

    def __repr__(self) -> str:
        return f"HttpTransport(label={self.label!r}, timeout={self.timeout!r})"

    @property
    def pool(self) -> PoolManager:
        return self._pool if self._pool is not None else pool_manager()

    async def post_json(
        self, url: str, body: JsonObject | bytes | list[bytes], headers: Mapping[str, str]
    ) -> JsonObject:
        """POST ``body`` (an object, or its encoded bytes, whole or in chunks) and return the
        JSON object the server answered (retrying as allowed)."""
        payload = _payload(body)

        async def attempt() -> JsonObject:
            status, response_headers, data = await self._run(
                self._blocking_request, url, payload, headers
            )
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
        abort = AbortHandle()

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
                await asyncio.to_thread(close_response, response, reuse=False)
            else:
                close_response(response)

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
        abort: AbortHandle | None = None,
    ) -> Any:
        """Run blocking ``fn(*args, abort)`` in a worker thread; on cancellation, abort its
        socket."""
        handle = abort or AbortHandle()
        try:
            return await asyncio.to_thread(fn, *args, handle)
        except asyncio.CancelledError:
            handle.abort()
            raise

    def _blocking_request(
        self, url: str, payload: bytes | list[bytes], headers: Mapping[str, str], abort: AbortHandle
    ) -> tuple[int, dict[str, str], bytes]:
        with abortable(abort), map_urllib3_errors(self.label, url):
            response = self._urlopen(url, payload, headers)
            try:
                data = response.read()
                return response.status, dict(response.headers), data
            finally:
                response.release_conn()

    def _blocking_open(
        self, url: str, payload: bytes | list[bytes], headers: Mapping[str, str], abort: AbortHandle
    ) -> Any:
        with abortable(abort), map_urllib3_errors(self.label, url):
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

    def _blocking_read(self, response: Any, url: str, abort: AbortHandle) -> bytes:
        with map_urllib3_errors(self.label, url):
            try:
                chunk: bytes = response.read1(_READ_CHUNK)
            except Exception as exc:
                failure = failure_of(exc)
                if failure is None or failure.kind != kinds.CONNECTION:
                    raise
                if abort.aborted:
                    return b""
                # ProtocolError's text is a tuple repr ("('Connection broken: ...', ...)"):
                # say what happened in a sentence instead.
                raise LlmBadResponseError(
                    f"{self.label} stream was cut off: the connection "
                    "closed before the reply was complete.",
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
    # encode_json cleans lone surrogates: one that slipped into a request must not make it
    # unsendable.
    return encode_json(body)
