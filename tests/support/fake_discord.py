"""A fake Discord HTTP API (v10) on 127.0.0.1, for the ``discord`` tool and connector tests.

Speaks the documented wire format of the three calls the tool makes: editing an interaction's
original response (``PATCH /api/v10/webhooks/<app>/<token>/messages/@original``), a follow-up
(``POST /api/v10/webhooks/<app>/<token>``, which answers the message as with ``wait=true``) and
a channel message (``POST /api/v10/channels/<id>/messages`` with ``Authorization: Bot
<token>``). Errors are Discord's JSON ``{"message", "code"}``: an unknown interaction token is
404 ``Unknown Webhook`` (10015), a wrong bot token 401, and :meth:`FakeDiscord.throttle` makes
the next call 429 with ``retry_after``. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.loopback import loopback_server, url_of

__all__ = ["BOT_TOKEN", "FakeDiscord", "fake_discord"]

BOT_TOKEN = "MTAxMjM0NTY3ODkw.fake.bot-token-for-tests"


@dataclass
class FakeDiscord:
    """State of the fake: the interaction tokens it knows, and what it received."""

    bot_token: str = BOT_TOKEN
    url: str = ""
    interaction_tokens: set[str] = field(default_factory=set)
    # method, path, body, auth
    calls: list[tuple[str, str, dict[str, Any], str]] = field(default_factory=list)
    throttled: list[float] = field(default_factory=list)
    next_id: int = 900000000000000000
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def api(self) -> str:
        """The base URL the tool takes as ``apiBaseUrl``."""
        return f"{self.url}/api/v10"

    def throttle(self, retry_after: float) -> None:
        with self.lock:
            self.throttled.append(retry_after)

    def handle(
        self, method: str, path: str, body: dict[str, Any], auth: str
    ) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.calls.append((method, path, body, auth))
            if self.throttled:
                return 429, {
                    "message": "You are being rate limited.",
                    "retry_after": self.throttled.pop(0),
                    "global": False,
                }
            self.next_id += 1
            message_id = str(self.next_id)
        parts = path.removeprefix("/api/v10/").split("/")
        if parts[0] == "webhooks" and len(parts) >= 3:
            if parts[2] not in self.interaction_tokens:
                return 404, {"message": "Unknown Webhook", "code": 10015}
            if method == "PATCH" and parts[3:] == ["messages", "@original"]:
                return 200, {
                    "id": message_id,
                    "channel_id": "C-original",
                    "content": body.get("content"),
                }
            if method == "POST" and len(parts) == 3:
                return 200, {
                    "id": message_id,
                    "channel_id": "C-followup",
                    "content": body.get("content"),
                    "flags": body.get("flags", 0),
                }
        if parts[0] == "channels" and parts[2:] == ["messages"] and method == "POST":
            if auth != f"Bot {self.bot_token}":
                return 401, {"message": "401: Unauthorized", "code": 0}
            return 200, {"id": message_id, "channel_id": parts[1], "content": body.get("content")}
        return 404, {"message": "404: Not Found", "code": 0}


def _handler(fake: FakeDiscord) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _dispatch(self) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
            status, answer = fake.handle(
                self.command, self.path, body, self.headers.get("Authorization", "")
            )
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_POST = do_PATCH = _dispatch

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_discord() -> Iterator[FakeDiscord]:
    """A running fake Discord API for a ``with`` block."""
    fake = FakeDiscord()
    with loopback_server(_handler(fake)) as server:
        fake.url = url_of(server)
        yield fake
