"""The one mapping of urllib3 and socket exceptions to what went wrong.

:func:`failure_of` sorts an exception into a :class:`Failure` kind (most specific first) with a
safe one-line reason: the operating system's reason when there is one (``Connection
refused``), else urllib3's message without the connection object's repr, cut and passed
through :func:`goondan.secrets.mask`. No URL is part of it: a path or a query may carry a key
(a Telegram bot token is a path segment), so an area that names the server uses
:func:`safe_origin`. Each area turns the kind into its own error code (``E_LLM_CONNECTION``,
``E_MCP_CONNECTION``, ``E_BASE_HTTP_TIMEOUT`` ...); the table is in docs/architecture.md "HTTP".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from urllib3 import exceptions as u3
from urllib3.util import parse_url

from goondan.secrets import mask

__all__ = [
    "BAD_RESPONSE",
    "CONNECT",
    "CONNECTION",
    "CONNECT_TIMEOUT",
    "INVALID_URL",
    "READ_TIMEOUT",
    "Failure",
    "failure_of",
    "reason",
    "safe_origin",
]

CONNECT = "connect"  # no connection (refused, unreachable, name not resolved): nothing was sent
CONNECT_TIMEOUT = "connect_timeout"  # connecting took too long: nothing was sent
READ_TIMEOUT = "read_timeout"  # the request went out; the server stayed silent too long
CONNECTION = "connection"  # the connection broke (reset, closed without an answer, TLS, proxy)
BAD_RESPONSE = "bad_response"  # the server answered malformed HTTP
INVALID_URL = "invalid_url"  # the URL cannot be requested (no host, unknown scheme)

_REASON_LIMIT = 300


@dataclass(frozen=True)
class Failure:
    """What went wrong with one request: ``kind`` (one of the constants above) and ``reason``."""

    kind: str
    reason: str

    @property
    def timed_out(self) -> bool:
        """Connecting or waiting for the answer took longer than the timeout."""
        return self.kind in (CONNECT_TIMEOUT, READ_TIMEOUT)

    @property
    def sent(self) -> bool:
        """The request may have reached the server (so re-sending it may repeat its effect)."""
        return self.kind not in (CONNECT, CONNECT_TIMEOUT, INVALID_URL)


def failure_of(exc: BaseException) -> Failure | None:
    """The :class:`Failure` ``exc`` describes; ``None`` when it is no urllib3 or socket error."""
    if isinstance(exc, u3.MaxRetryError):  # only if retries were passed to urllib3: the cause
        cause = exc.reason
        return failure_of(cause) if cause is not None else Failure(CONNECTION, reason(exc))
    if isinstance(exc, u3.NewConnectionError | ConnectionRefusedError):
        # before ConnectTimeoutError: NewConnectionError is a subclass of it in urllib3 2
        return Failure(CONNECT, reason(exc))
    if isinstance(exc, u3.ConnectTimeoutError):
        return Failure(CONNECT_TIMEOUT, reason(exc))
    if isinstance(exc, u3.TimeoutError | TimeoutError):  # ReadTimeoutError, socket.timeout
        return Failure(READ_TIMEOUT, reason(exc))
    if isinstance(exc, u3.DecodeError | u3.InvalidChunkLength | u3.InvalidHeader):
        return Failure(BAD_RESPONSE, reason(exc))
    if isinstance(exc, u3.LocationValueError | u3.URLSchemeUnknown):
        return Failure(INVALID_URL, reason(exc))
    if isinstance(exc, u3.HTTPError | OSError):  # ProtocolError, SSLError, ProxyError, resets
        return Failure(CONNECTION, reason(exc))
    return None


# urllib3 2.x starts messages with the connection's repr: "HTTPConnection(host='h', port=1): "
# (1.x: "<urllib3.connection.HTTPConnection object at 0x...>: ").
_CONNECTION_REPR = re.compile(r"^<?[\w.]*Connection(?:Pool)?\b[^:]*?(?:\)|>): ")


def reason(exc: BaseException) -> str:
    """The operating system's reason (``Connection refused``) when there is one, else urllib3's
    message without the connection object's repr; masked, at most 300 characters."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.strerror:
            return mask(current.strerror[:_REASON_LIMIT])
        current = current.__cause__ or current.__context__
    text = str(exc) or type(exc).__name__
    text = _CONNECTION_REPR.sub("", text)
    text = text.removeprefix("Failed to establish a new connection: ")
    return mask(text[:_REASON_LIMIT])


def safe_origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` only — never the path or query, which might carry a key."""
    try:
        parsed = parse_url(url)
    except u3.LocationParseError:
        return "<invalid URL>"
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme or 'http'}://{parsed.host or ''}{port}"
