"""Tool ``http-fetch`` of ``@goondan/base``: HTTP GET and POST (docs/base-package.md).

Exports ``get`` and ``post``. Only ``http``/``https`` URLs are accepted. Header values may be
strings, numbers or booleans (stringified). An HTTP error status (404, 500 …) is a normal
output; a network failure or a timeout (``timeoutMs``, default 30000, for the whole exchange)
fails the call. At most ``maxBytes`` (default 500000) bytes of the decoded body are kept; the
rest is dropped and ``truncated`` is true. The model's ``maxBytes`` can only lower the Tool
config's hard maxima: ``maxBytes`` (decoded, default 500000) and ``maxWireBytes`` (read from the
connection, compressed, default 10 MB). gzip/deflate bodies are inflated here with a bounded
output, so a gzip bomb stops at the limit. Redirects are followed by hand (at most 5), each
target checked against the host policy (``_hosts.py``, docs/base-package.md) before it is
requested; ``url`` is the final URL; credentials headers are dropped on a cross-host redirect.
Every request is built from the policy's :class:`Target`: it connects to the checked addresses,
never to the name (so the host checked is the host contacted), with the name in ``Host`` and SNI.
Environment proxy variables are not used. ``timeoutMs`` bounds the whole exchange even for a
body that trickles in slowly: a watchdog shuts the socket down at the deadline.

The request runs through the HTTP layer (``goondan/http/``: its pool, timeout rule and failure
kinds) in a worker thread, so the event loop never blocks. Nothing is retried.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import goondan.http as http
from goondan.secrets import mask_cut
from goondan.tools import ToolContext, ToolFailure

from ._hosts import HostPolicy, Target
from ._inputs import invalid, primitive

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_BYTES = 500_000
MAX_REDIRECTS = 5
_CHUNK = 65536

# One pool for the process: tool modules are shared by every instance of a process.
_pool = http.new_pool(num_pools=8, maxsize=4)
DEFAULT_MAX_WIRE_BYTES = 10_000_000


@dataclass(frozen=True)
class _Limits:
    body: int  # decoded body bytes kept
    wire: int  # bytes read from the connection (compressed)


def _limits(ctx: ToolContext, input: dict[str, Any]) -> _Limits:
    """The model's ``maxBytes`` within the Tool config's hard maxima (it can lower, never raise)."""
    config = getattr(ctx, "config", None) or {}
    hard = config.get("maxBytes") if hasattr(config, "get") else None
    hard = (
        hard
        if isinstance(hard, int) and not isinstance(hard, bool) and hard > 0
        else DEFAULT_MAX_BYTES
    )
    wire = config.get("maxWireBytes") if hasattr(config, "get") else None
    wire = (
        wire
        if isinstance(wire, int) and not isinstance(wire, bool) and wire > 0
        else DEFAULT_MAX_WIRE_BYTES
    )
    return _Limits(body=min(_positive(input, "maxBytes", DEFAULT_MAX_BYTES), hard), wire=wire)


def _url(input: dict[str, Any]) -> str:
    url = input.get("url")
    if url is None:
        raise invalid("'url' is required")
    if not isinstance(url, str) or not url.strip():
        raise invalid("'url' must be a non-empty string")
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:  # "Invalid IPv6 URL" and the like
        raise invalid(f"{url!r} is not a valid URL ({exc})") from None
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


def _read_body(response: Any, url: str, limits: _Limits, remaining: Any) -> tuple[bytes, bool]:
    """Read at most ``limits.body`` decoded and ``limits.wire`` raw bytes of the body.

    The body is read raw (``decode_content=False``) and inflated here with a bounded output
    size, so a small gzip bomb never becomes a large buffer."""
    encoding = (response.headers.get("content-encoding") or "").strip().lower()
    inflater = _inflater(encoding)
    out = bytearray()
    wire = 0
    while True:
        remaining()  # the read timeout applies per read; the deadline to the whole body
        if inflater is not None and inflater.unconsumed_tail:
            data = inflater.unconsumed_tail
        else:
            data = response.read(_CHUNK, decode_content=False)
            if not data:
                if inflater is not None:
                    out += inflater.flush()[: limits.body + 1 - len(out)]
                break
            wire += len(data)
            if wire > limits.wire:
                return bytes(out[: limits.body]), True
        try:
            # max_length is always >= 1 here (0 would mean "unbounded").
            piece = (
                data if inflater is None else inflater.decompress(data, limits.body + 1 - len(out))
            )
        except zlib.error as exc:
            raise ToolFailure(
                f"request to {url} failed: the {encoding} body cannot be decoded ({exc})",
                code="E_BASE_HTTP",
                suggestion="Ask for an uncompressed body (accept-encoding: identity).",
            ) from None
        out += piece
        if len(out) > limits.body:
            return bytes(out[: limits.body]), True
    return bytes(out), False


def _inflater(encoding: str) -> Any:
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj(32 + zlib.MAX_WBITS)  # zlib or gzip header, detected
    return None  # identity (or an encoding asked for explicitly: returned as received)


_REDIRECTS = (301, 302, 303, 307, 308)
_CREDENTIAL_HEADERS = ("authorization", "cookie", "proxy-authorization")


def _fetch(method: str, url: str, headers: dict[str, str], body: bytes | None,
           timeout_ms: int, limits: _Limits, policy: HostPolicy) -> dict[str, Any]:
    """Blocking part, run in a worker thread. Redirects are followed here, one request at a
    time, so the host policy is checked before every request."""
    started = time.monotonic()
    deadline = started + timeout_ms / 1000.0

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timeout(url, timeout_ms)
        return left

    if not any(name.lower() == "accept-encoding" for name in headers):
        headers["accept-encoding"] = "gzip, deflate"
    headers = {k: v for k, v in headers.items() if k.lower() != "host"}  # the URL's host is sent
    target = policy.target(url)
    try:
        for hop in range(MAX_REDIRECTS + 1):
            response = _open(target, method, headers, body, remaining)
            location = response.headers.get("location")
            if response.status in _REDIRECTS and location and hop < MAX_REDIRECTS:
                response.close()  # never read a redirect's body: it may be large
                response.release_conn()
                try:
                    following = urljoin(target.url, location)
                    scheme = urlsplit(following).scheme.lower()
                except ValueError:
                    raise policy.refusal(
                        location, "the redirect target is not a valid URL"
                    ) from None
                if scheme not in ("http", "https"):
                    break
                # Checked like the first URL: the next request goes to this target's addresses.
                nxt = policy.target(following)
                if (nxt.scheme, nxt.host, nxt.port) != (target.scheme, target.host, target.port):
                    headers = {
                        k: v for k, v in headers.items() if k.lower() not in _CREDENTIAL_HEADERS
                    }
                if response.status == 303 and method != "HEAD":
                    method, body = "GET", None
                target = nxt
                continue
            break
        complete = False
        # The read timeout applies per socket read, so a body trickling in one byte at a time
        # never trips it; the watchdog shuts the socket down at the deadline instead, which
        # ends a blocked read at once (see _abort).
        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), _abort, (response,))
        watchdog.daemon = True
        watchdog.start()
        try:
            data, truncated = _read_body(response, target.url, limits, remaining)
            remaining()  # a body "ended" by the watchdog is a timeout, not the whole body
            complete = not truncated
        finally:
            watchdog.cancel()
            if complete:
                response.release_conn()
            else:
                # Truncated or failed: don't drain the rest just to reuse the connection.
                response.close()
    except Exception as exc:
        failure = http.failure_of(exc)
        if failure is None:
            raise  # a refusal of the host policy, a timeout noticed between reads
        raise _network_failure(url, timeout_ms, failure, deadline) from None
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data, final=not truncated)
    return {
        "url": target.url,
        "method": method,
        "status": response.status,
        "statusText": response.reason or "",
        "headers": {name.lower(): value for name, value in response.headers.items()},
        # A cut inside a multi-byte character drops that character instead of adding U+FFFD;
        # a cut inside a secret keeps no start of it.
        "body": mask_cut(text) if truncated else text,
        "truncated": truncated,
        "durationMs": round((time.monotonic() - started) * 1000),
    }


def _open(target: Target, method: str, headers: dict[str, str], body: bytes | None,
          remaining: Callable[[], float]) -> http.Response:
    """Send the request to the target's checked addresses, in order, until one connects.

    The connection goes to the address itself (never to the name, which could resolve to
    something else by now); the name travels in the ``Host`` header and, for https, in SNI and
    the certificate check."""
    kwargs = (
        None if target.is_literal or target.scheme != "https" else {"server_hostname": target.host}
    )
    sent = {**headers, "Host": target.host_header}
    for index, address in enumerate(target.addresses):
        pool = _pool.connection_from_host(
            str(address), target.port, target.scheme, pool_kwargs=kwargs
        )
        left = remaining()
        try:
            response: http.Response = pool.urlopen(
                method, target.request_uri, headers=sent, body=body, retries=False,
                timeout=http.timeout(left, connect_s=left),
                preload_content=False, redirect=False, decode_content=False, assert_same_host=False,
            )
            return response
        except Exception as exc:
            failure = http.failure_of(exc)
            # Refused or timed out connecting (nothing was sent): the next checked address.
            connecting = failure is not None and failure.kind in ("connect", "connect_timeout")
            if not connecting or index == len(target.addresses) - 1:
                raise
    raise AssertionError("a target has at least one address")  # HostPolicy.target ensures it


def _timeout(url: str, timeout_ms: int) -> ToolFailure:
    return ToolFailure(f"request to {url} timed out after {timeout_ms} ms",
                       code="E_BASE_HTTP_TIMEOUT",
                       suggestion="Retry later or raise timeoutMs.")


def _abort(response: http.Response) -> None:
    """The deadline passed: shut the response's socket down so a blocked read returns now."""
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _network_failure(url: str, timeout_ms: int, failure: http.Failure,
                     deadline: float | None = None) -> ToolFailure:
    if failure.timed_out or (deadline is not None and time.monotonic() >= deadline):
        return _timeout(url, timeout_ms)  # or the watchdog cut the connection at the deadline
    return ToolFailure(f"request to {url} failed: {failure.reason}", code="E_BASE_HTTP",
                       suggestion="Check the URL and that the server is reachable.")


async def _request(
    ctx: ToolContext, method: str, input: dict[str, Any], *, with_body: bool
) -> dict[str, Any]:
    url = _url(input)
    headers = _headers(input)
    body = _body(input, headers) if with_body else None
    timeout_ms = _positive(input, "timeoutMs", DEFAULT_TIMEOUT_MS)
    limits = _limits(ctx, input)
    policy = HostPolicy.from_config(getattr(ctx, "config", None) or {})
    return await asyncio.to_thread(_fetch, method, url, headers, body, timeout_ms, limits, policy)


async def get(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """GET ``url``: ``{url, method, status, statusText, headers, body, truncated, durationMs}``."""
    return await _request(ctx, "GET", input, with_body=False)


async def post(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` (as JSON) or ``bodyString`` to ``url``; same output as ``get``."""
    return await _request(ctx, "POST", input, with_body=True)


handlers = {"get": get, "post": post}
