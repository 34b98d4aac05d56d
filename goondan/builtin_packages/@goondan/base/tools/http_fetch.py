"""Tool ``http-fetch`` of ``@goondan/base``: HTTP GET and POST (base-package.md §2).

Exports ``get`` and ``post``. Only ``http``/``https`` URLs are accepted. Header values may be
strings, numbers or booleans (stringified). An HTTP error status (404, 500 …) is a normal
output; a network failure or a timeout (``timeoutMs``, default 30000, for the whole exchange)
fails the call. At most ``maxBytes`` (default 500000) bytes of the body are read; the rest is
dropped and ``truncated`` is true. Redirects are followed (at most 5) and ``url`` is the final
URL. Environment proxy variables are not used.

The request runs with urllib3 in a worker thread, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import time
from typing import Any
from urllib.parse import urljoin, urlsplit

import urllib3

from goondan.tools import ToolContext, ToolFailure

from ._inputs import invalid, primitive

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_BYTES = 500_000
MAX_REDIRECTS = 5
_CHUNK = 65536

# One pool for the process: tool modules are shared by every instance of a process.
_pool = urllib3.PoolManager(num_pools=8, maxsize=4)
_retries = urllib3.Retry(total=None, connect=0, read=0, status=0, other=0,
                         redirect=MAX_REDIRECTS, raise_on_redirect=False)


def _url(input: dict[str, Any]) -> str:
    url = input.get("url")
    if url is None:
        raise invalid("'url' is required")
    if not isinstance(url, str) or not url.strip():
        raise invalid("'url' must be a non-empty string")
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise invalid(f"only absolute http:// and https:// URLs are allowed, got {url!r}")
    return url.strip()


def _positive(input: dict[str, Any], name: str, default: int) -> int:
    value = input.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise invalid(f"'{name}' must be a positive number")
    return int(value) if value >= 1 else 1


def _headers(input: dict[str, Any]) -> dict[str, str]:
    value = input.get("headers")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid("'headers' must be an object of string, number or boolean values")
    headers: dict[str, str] = {}
    for name, item in value.items():
        if item is None:
            continue
        if not isinstance(item, str | int | float):
            raise invalid(f"header '{name}' must be a string, number or boolean")
        headers[str(name)] = primitive(item)
    return headers


def _body(input: dict[str, Any], headers: dict[str, str]) -> bytes | None:
    body = input.get("body")
    if body is not None:
        if isinstance(body, str):
            return body.encode("utf-8")
        if not any(name.lower() == "content-type" for name in headers):
            headers["content-type"] = "application/json"
        return json.dumps(body, ensure_ascii=False).encode("utf-8")
    text = input.get("bodyString")
    if text is None:
        return None
    if not isinstance(text, str):
        raise invalid("'bodyString' must be a string")
    return text.encode("utf-8")


def _fetch(method: str, url: str, headers: dict[str, str], body: bytes | None,
           timeout_ms: int, max_bytes: int) -> dict[str, Any]:
    """Blocking part, run in a worker thread."""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000.0

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timeout(url, timeout_ms)
        return left

    try:
        response = _pool.request(
            method, url, headers=headers, body=body, retries=_retries,
            timeout=urllib3.Timeout(connect=remaining(), read=remaining()),
            preload_content=False, redirect=True,
        )
        try:
            chunks: list[bytes] = []
            received = 0
            truncated = complete = False
            while True:
                remaining()  # the read timeout applies per read; the deadline to the whole body
                chunk = response.read(_CHUNK)
                if not chunk:
                    complete = True
                    break
                chunks.append(chunk)
                received += len(chunk)
                if received > max_bytes:
                    truncated = True
                    break
        finally:
            if complete:
                response.release_conn()
            else:
                # Truncated or failed: don't drain the rest just to reuse the connection.
                response.close()
    except urllib3.exceptions.MaxRetryError as exc:
        raise _network_failure(url, timeout_ms, exc.reason or exc) from None
    except urllib3.exceptions.HTTPError as exc:
        raise _network_failure(url, timeout_ms, exc) from None
    except OSError as exc:
        raise _network_failure(url, timeout_ms, exc) from None
    data = b"".join(chunks)[:max_bytes]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return {
        "url": _final_url(url, response),
        "method": method,
        "status": response.status,
        "statusText": response.reason or "",
        "headers": {name.lower(): value for name, value in response.headers.items()},
        # A cut inside a multi-byte character drops that character instead of adding U+FFFD.
        "body": decoder.decode(data, final=not truncated),
        "truncated": truncated,
        "durationMs": round((time.monotonic() - started) * 1000),
    }


def _final_url(url: str, response: urllib3.BaseHTTPResponse) -> str:
    # response.url holds only the last request path; rebuild it from the redirect history.
    final = url
    for step in response.retries.history if response.retries else ():
        if step.redirect_location:
            final = urljoin(final, step.redirect_location)
    return final


def _timeout(url: str, timeout_ms: int) -> ToolFailure:
    return ToolFailure(f"request to {url} timed out after {timeout_ms} ms",
                       code="E_BASE_HTTP_TIMEOUT",
                       suggestion="Retry later or raise timeoutMs.")


def _network_failure(url: str, timeout_ms: int, exc: BaseException) -> ToolFailure:
    if isinstance(exc, ToolFailure):
        return exc
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2: a refusal is no timeout.
    timed_out = isinstance(exc, urllib3.exceptions.TimeoutError | TimeoutError)
    if timed_out and not isinstance(exc, urllib3.exceptions.NewConnectionError):
        return _timeout(url, timeout_ms)
    reason = str(exc) or type(exc).__name__
    return ToolFailure(f"request to {url} failed: {reason}", code="E_BASE_HTTP",
                       suggestion="Check the URL and that the server is reachable.")


async def _request(method: str, input: dict[str, Any], *, with_body: bool) -> dict[str, Any]:
    url = _url(input)
    headers = _headers(input)
    body = _body(input, headers) if with_body else None
    timeout_ms = _positive(input, "timeoutMs", DEFAULT_TIMEOUT_MS)
    max_bytes = _positive(input, "maxBytes", DEFAULT_MAX_BYTES)
    return await asyncio.to_thread(_fetch, method, url, headers, body, timeout_ms, max_bytes)


async def get(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """GET ``url``: ``{url, method, status, statusText, headers, body, truncated, durationMs}``."""
    return await _request("GET", input, with_body=False)


async def post(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` (as JSON) or ``bodyString`` to ``url``; same output as ``get``."""
    return await _request("POST", input, with_body=True)


handlers = {"get": get, "post": post}
