"""HTTP plumbing shared by the ``slack``, ``telegram`` and ``discord`` tools of
``@goondan/base`` (docs/base-package.md, "slack", "telegram" and "discord").

Requests run through the HTTP layer (``goondan/http/``) in a worker thread, never retried (a
repeated chat.postMessage would post twice). Network failures become ``E_BASE_HTTP`` /
``E_BASE_HTTP_TIMEOUT`` tool failures; the bot token never appears in a message (it is part
of Telegram URLs, so every text built here is masked).

A bot token taken from the environment goes only to the trusted API origin (issue 27, "Safe
by default"): :func:`api_base_url` refuses an input ``apiBaseUrl`` naming another origin
unless the call brings its own ``token``, and redirects are never followed by urllib3: each
hop is checked here (by default it must stay on the request's origin) and one that leaves is
an ``E_BASE_HTTP`` failure, the token never sent there.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit

import goondan.http as http
from goondan.secrets import register_secret
from goondan.tools import ToolContext, ToolFailure

from ._hosts import parse_strictly  # http-fetch's parser: one host per URL, or refused
from ._inputs import absolute, invalid

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "ApiResponse",
    "Download",
    "api_base_url",
    "download",
    "file_output",
    "find_token",
    "max_download_bytes",
    "origin",
    "positive_int",
    "request",
    "show_origin",
]

DEFAULT_TIMEOUT_MS = 15_000
DEFAULT_MAX_DOWNLOAD = 3_000_000
MAX_DOWNLOAD = 20_000_000
MAX_REDIRECTS = 5
_CHUNK = 65536
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)
# No retries (the layer's default), and no redirects followed by urllib3: _send follows them
# itself, checking each target before the token goes there.
_pool = http.new_pool(num_pools=4, maxsize=4)

Origin = tuple[str, str, int]


@dataclass(frozen=True)
class ApiResponse:
    """A JSON answer: HTTP status, headers (lower-case names) and the parsed body."""

    status: int
    headers: dict[str, str]
    data: Any


@dataclass(frozen=True)
class Download:
    """The bytes of a downloaded file and its response headers."""

    status: int
    headers: dict[str, str]
    body: bytes


def find_token(input: dict[str, Any], env_names: tuple[str, ...], tool: str, code: str) -> str:
    """Input ``token``, else the first set environment variable of ``env_names``."""
    token = input.get("token")
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise invalid("'token' must be a non-empty string")
    if isinstance(token, str):
        return token.strip()
    for name in env_names:
        value = os.environ.get(name, "").strip()
        if value:
            register_secret(value)  # masked in tool results and logs (docs/security.md)
            return value
    raise ToolFailure(f"[{tool}] no bot token: set {env_names[0]} or pass 'token'", code=code,
                      suggestion=f"Export {env_names[0]} in the environment goondan runs in.")


def origin(url: str) -> Origin | None:
    """``(scheme, host, port)`` urllib3 connects to for ``url``; ``None`` when ``url`` is not
    an unambiguous absolute http(s) URL (userinfo, a backslash, parsers disagreeing …)."""
    try:
        scheme, host, port, _ = parse_strictly(url)
    except ToolFailure:
        return None
    return scheme, host, port


def show_origin(value: Origin | None) -> str:
    """``scheme://host:port`` of an :func:`origin`, for messages (never a path: it may hold
    a token)."""
    if value is None:
        return "an unparsable URL"
    scheme, host, port = value
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def api_base_url(input: dict[str, Any], env_name: str, default: str, *,
                 sends_env_token: bool = True) -> str:
    """Input ``apiBaseUrl``, else ``$env_name``, else ``default``; without a trailing slash.

    The trusted API is ``$env_name`` (set by the operator) or ``default``. When the call sends
    a token from the environment (``sends_env_token`` and no input ``token``), an input
    ``apiBaseUrl`` on another origin is refused: the model must not be able to send the
    operator's token to a host it names."""
    value = input.get("apiBaseUrl")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise invalid("'apiBaseUrl' must be a non-empty string")
    trusted = (os.environ.get(env_name, "") or default).strip().rstrip("/")
    base = (value or trusted).strip().rstrip("/")
    if urlsplit(base).scheme not in ("http", "https"):
        raise invalid(f"the API base URL must be http(s), got {base!r}")
    if value is not None and sends_env_token and input.get("token") is None:
        wanted, allowed = origin(base), origin(trusted)
        if wanted is None or wanted != allowed:
            raise invalid(
                f"'apiBaseUrl' names {show_origin(wanted)}, not the API origin the bot token from "
                f"the environment is sent to ({show_origin(allowed)}); set {env_name} to change "
                "that API, or pass 'token' with the token for the other one")
    return base


def positive_int(input: dict[str, Any], name: str, default: int | None = None,
                 maximum: int | None = None) -> int | None:
    """An optional integer input > 0 (at most ``maximum``)."""
    value = input.get(name)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value <= 0
        or int(value) != value
    ):
        raise invalid(f"'{name}' must be a positive integer")
    if maximum is not None and value > maximum:
        raise invalid(f"'{name}' must be at most {maximum}")
    return int(value)


def _failure(url: str, secret: str, timeout_ms: int, failure: http.Failure) -> ToolFailure:
    shown = url.replace(secret, "***") if secret else url
    if failure.timed_out:
        return ToolFailure(
            f"request to {shown} timed out after {timeout_ms} ms",
            code="E_BASE_HTTP_TIMEOUT",
            suggestion="Retry later or raise timeoutMs.",
        )
    reason = failure.reason.replace(secret, "***") if secret else failure.reason
    return ToolFailure(f"request to {shown} failed: {reason}", code="E_BASE_HTTP",
                       suggestion="Check the API base URL and that the service is reachable.")


def _send(method: str, url: str, headers: dict[str, str], body: bytes | None, timeout_ms: int,
          secret: str, max_bytes: int | None,
          may_follow: Callable[[str], bool] | None) -> tuple[int, dict[str, str], bytes]:
    """The request, following up to :data:`MAX_REDIRECTS` redirects whose target passes
    ``may_follow`` (default: the same origin as ``url``); any other redirect fails the call
    before the token (header or URL path) goes anywhere."""
    first = origin(url)

    def same_origin(target: str) -> bool:
        return first is not None and origin(target) == first

    allowed = may_follow or same_origin
    shown = url.replace(secret, "***") if secret else url
    for _ in range(MAX_REDIRECTS + 1):
        status, response_headers, raw = _send_once(method, url, headers, body, timeout_ms, secret,
                                                   max_bytes)
        location = response_headers.get("location")
        if status not in _REDIRECT_STATUSES or not location:
            return status, response_headers, raw
        target = urljoin(url, location)
        if not allowed(target):
            raise ToolFailure(
                f"request to {shown} was redirected (HTTP "
                f"{status}) to {show_origin(origin(target))}; "
                "not followed: the token may only go to the API it was meant for",
                code="E_BASE_HTTP",
                suggestion="Check the API base URL (it should not redirect elsewhere).",
            )
        if status == 303 or (status in (301, 302) and method not in ("GET", "HEAD")):
            method, body = "GET", None
            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        url = target
    raise ToolFailure(f"request to {shown} was redirected more than {MAX_REDIRECTS} times",
                      code="E_BASE_HTTP", suggestion="Check the API base URL.")


def _send_once(method: str, url: str, headers: dict[str, str], body: bytes | None, timeout_ms: int,
               secret: str, max_bytes: int | None) -> tuple[int, dict[str, str], bytes]:
    try:
        response = _pool.request(method, url, headers=headers, body=body, preload_content=False,
                                 timeout=http.timeout(total_s=timeout_ms / 1000.0), redirect=False)
        try:
            chunks: list[bytes] = []
            size = 0
            while chunk := response.read(_CHUNK):
                chunks.append(chunk)
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise ToolFailure(
                        f"the file is larger than maxBytes ({max_bytes})",
                        code="E_BASE_HTTP",
                        suggestion="Raise maxBytes (at most 20000000).",
                    )
        finally:
            response.release_conn()
    except ToolFailure:
        raise
    except Exception as exc:
        failure = http.failure_of(exc)
        if failure is None:
            raise
        raise _failure(url, secret, timeout_ms, failure) from None
    return response.status, {k.lower(): v for k, v in response.headers.items()}, b"".join(chunks)


async def request(
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    timeout_ms: int,
    secret: str = "",
    json_body: dict[str, Any] | None = None,
    query: dict[str, Any] | None = None,
) -> ApiResponse:
    """One API call; the body is ``json_body`` as JSON, or nothing (``query`` goes in the URL).
    A body that is not JSON is answered with ``data = None``."""
    headers = dict(headers)
    body = None
    if json_body is not None:
        headers["Content-Type"] = "application/json; charset=utf-8"
        body = json.dumps(json_body, ensure_ascii=False).encode("utf-8")
    if query:
        url = f"{url}?{urlencode({k: v for k, v in query.items() if v is not None})}"
    status, response_headers, raw = await asyncio.to_thread(
        _send, method, url, headers, body, timeout_ms, secret, None, None)
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        data = None
    return ApiResponse(status, response_headers, data)


async def download(url: str, *, headers: dict[str, str], max_bytes: int, timeout_ms: int,
                   secret: str = "", may_follow: Callable[[str], bool] | None = None) -> Download:
    """GET a file, failing when it is larger than ``max_bytes``; redirects are followed only
    to targets passing ``may_follow`` (default: the origin of ``url``)."""
    status, response_headers, body = await asyncio.to_thread(
        _send, "GET", url, headers, None, timeout_ms, secret, max_bytes, may_follow)
    return Download(status, response_headers, body)


def file_output(
    ctx: ToolContext, input: dict[str, Any], data: bytes, content_type: str
) -> dict[str, Any]:
    """``savedPath``, ``base64`` and ``dataUrl`` of a downloaded file, as the inputs ask."""
    include_base64 = input.get("includeBase64", True)
    include_data_url = input.get("includeDataUrl", True)
    for name, value in (("includeBase64", include_base64), ("includeDataUrl", include_data_url)):
        if not isinstance(value, bool):
            raise invalid(f"'{name}' must be a boolean")
    save = input.get("savePath", input.get("outputPath"))
    saved = None
    if save is not None:
        if not isinstance(save, str) or not save.strip():
            raise invalid("'savePath' must be a non-empty string")
        target = absolute(ctx, save)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as exc:
            raise ToolFailure(f"cannot write {target}: {exc.strerror or exc}", code="E_BASE_FS",
                              suggestion="Pick a writable savePath.") from None
        saved = str(target)
    encoded = base64.b64encode(data).decode("ascii") if include_base64 or include_data_url else None
    mime = content_type.split(";")[0].strip() or "application/octet-stream"
    return {"savedPath": saved, "base64": encoded if include_base64 else None,
            "dataUrl": f"data:{mime};base64,{encoded}" if include_data_url else None}


def max_download_bytes(input: dict[str, Any]) -> int:
    """Input ``maxBytes`` (default 3000000, at most 20000000)."""
    value = positive_int(input, "maxBytes", DEFAULT_MAX_DOWNLOAD, MAX_DOWNLOAD)
    assert value is not None
    return value
