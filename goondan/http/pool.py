"""Pools and timeouts: how every urllib3 connection of goondan is made.

:func:`new_pool` is the one place a :class:`urllib3.PoolManager` is built. Its defaults are the
ones every area shares: urllib3 never retries on its own (``retries=False``; an area retries
with :class:`goondan.http.retry.RetryPolicy` or not at all) and a full pool opens another
connection rather than blocking (``block=False``). An area keeps its pool for its lifetime
(the model adapters share one per process, see ``goondan/llm/http.py``).

:func:`timeout` is the one timeout rule: ``read_s`` bounds each wait for bytes, the connect
timeout is ``connect_s`` or else ``read_s`` capped at :data:`CONNECT_TIMEOUT_S`, and ``total_s``
(when given) bounds the whole exchange.

``abortable=True`` pools let an event loop cut a request a worker thread is blocked in: the
thread runs the request inside :func:`abortable` with an :class:`AbortHandle`, whose
:meth:`AbortHandle.abort` shuts the connection's socket down, so the blocked call returns at
once and the server sees the connection close.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import LocationParseError  # re-exported: the http-fetch host policy
from urllib3.util import parse_url  # parses URLs exactly as urllib3 connects to them

__all__ = [
    "CONNECT_TIMEOUT_S",
    "AbortHandle",
    "LocationParseError",
    "PoolManager",
    "Response",
    "abortable",
    "close_response",
    "new_pool",
    "parse_url",
    "timeout",
]

_log = logging.getLogger("goondan.http")

CONNECT_TIMEOUT_S = 10.0
Response = urllib3.BaseHTTPResponse
PoolManager = urllib3.PoolManager


def new_pool(*, num_pools: int = 8, maxsize: int = 4, abortable: bool = False,
             **kwargs: Any) -> urllib3.PoolManager:
    """A :class:`urllib3.PoolManager` with the shared defaults (``retries=False``,
    ``block=False``); ``abortable``: its connections register with the thread's
    :class:`AbortHandle`. ``kwargs`` go to the PoolManager (``headers``, ``timeout`` ...)."""
    kwargs.setdefault("retries", False)
    kwargs.setdefault("block", False)
    manager = urllib3.PoolManager(num_pools=num_pools, maxsize=maxsize, **kwargs)
    if abortable:
        manager.pool_classes_by_scheme = {
            "http": _AbortableHTTPConnectionPool,
            "https": _AbortableHTTPSConnectionPool,
        }
    return manager


def timeout(read_s: float | None = None, *, connect_s: float | None = None,
            total_s: float | None = None) -> urllib3.Timeout:
    """The timeout of one request: ``read_s`` per wait for bytes (``None``: wait as long as it
    takes), connecting ``connect_s`` or else ``min(read_s, CONNECT_TIMEOUT_S)``, and
    ``total_s`` for the whole exchange (connect and every read)."""
    if connect_s is None and read_s is not None:
        connect_s = min(read_s, CONNECT_TIMEOUT_S)
    return urllib3.Timeout(connect=connect_s, read=read_s, total=total_s)


def close_response(response: Any, *, reuse: bool = True) -> None:
    """Done with ``response``: give its connection back when the body was read to the end
    (and ``reuse``), else close it (a connection stopped mid-body cannot be reused)."""
    try:
        if reuse and (response.closed or getattr(response, "length_remaining", None) == 0):
            response.release_conn()
        else:
            response.close()
            response.release_conn()
    except Exception:  # best effort: the response may be half torn down already
        _log.debug("closing a response failed", exc_info=True)


# --------------------------------------------------------------------------- abort


_local = threading.local()


class AbortHandle:
    """Lets another thread shut down the socket a request is blocked on.

    The socket object itself is remembered: ``http.client`` drops ``conn.sock`` once a
    ``Connection: close`` response starts, while the response keeps reading from it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: HTTPConnection | None = None
        self._sock: socket.socket | None = None
        self.aborted = False

    def attach(self, conn: HTTPConnection) -> None:
        """``conn`` now carries the request (called by the abortable connections)."""
        with self._lock:
            self._conn = conn
            sock = getattr(conn, "sock", None)
            if sock is not None:
                self._sock = sock
            aborted = self.aborted
        if aborted:
            self._shutdown()

    def abort(self) -> None:
        """Shut the request's socket down (now, or as soon as it is connected)."""
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


@contextlib.contextmanager
def abortable(handle: AbortHandle) -> Iterator[AbortHandle]:
    """Requests of this thread on an abortable pool register with ``handle`` inside the block."""
    _local.abort = handle
    try:
        yield handle
    finally:
        _local.abort = None


def _attach_current(conn: HTTPConnection) -> None:
    handle: AbortHandle | None = getattr(_local, "abort", None)
    if handle is not None:
        handle.attach(conn)


class _AbortableHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _attach_current(self)

    def request(self, *args: Any, **kwargs: Any) -> None:  # reused connections skip connect()
        _attach_current(self)
        super().request(*args, **kwargs)


class _AbortableHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _attach_current(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach_current(self)
        super().request(*args, **kwargs)


class _AbortableHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _AbortableHTTPConnection


class _AbortableHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _AbortableHTTPSConnection
