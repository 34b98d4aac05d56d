"""A small HTTP client for the studio's tests: JSON requests and a server-sent event reader
that gives up at a deadline (no sleeps: the socket's timeout is the time left)."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

__all__ = ["EventStream", "request", "studio_url"]


def studio_url(line: str) -> str:
    """The address of ``goondan studio``'s first output line (``studio: http://...``)."""
    assert line.startswith("studio: http://"), line
    return line.split(" ", 1)[1].strip()


def request(base: str, path: str, *, method: str = "GET", body: Any = None,
            headers: dict[str, str] | None = None, timeout: float = 10.0
            ) -> tuple[int, dict[str, str], Any]:
    """``(status, headers, decoded JSON or text)`` of one request to ``base`` + ``path``."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    sent = dict(headers or {})
    data: bytes | None = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        raw = response.read()
        kind = response.getheader("Content-Type") or ""
        decoded: Any = json.loads(raw) if kind.startswith("application/json") else raw.decode()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, decoded
    finally:
        conn.close()


class EventStream:
    """An open ``text/event-stream``; :meth:`events` yields ``(event, data)`` until the
    deadline passes (then ``TimeoutError``)."""

    def __init__(self, base: str, path: str, *, headers: dict[str, str] | None = None,
                 timeout: float = 10.0) -> None:
        parts = urlsplit(base)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port,
                                               timeout=timeout)
        self.conn.request("GET", path, headers=headers or {})
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type") or ""
        self.comments: list[str] = []

    def __repr__(self) -> str:
        return f"<EventStream {self.status}>"

    def events(self, deadline_s: float) -> Iterator[tuple[str, Any]]:
        end = time.monotonic() + deadline_s
        sock = self.conn.sock
        name, data = "message", []
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no further event before the deadline")
            if sock is not None:
                sock.settimeout(left)
            try:
                line = self.response.fp.readline()
            except TimeoutError:
                raise TimeoutError("no further event before the deadline") from None
            if not line:
                return
            text = line.decode().rstrip("\r\n")
            if text.startswith(":"):
                self.comments.append(text)
            elif text.startswith("event:"):
                name = text[6:].strip()
            elif text.startswith("data:"):
                data.append(text[5:].strip())
            elif text == "" and data:
                yield name, json.loads("\n".join(data))
                name, data = "message", []

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
