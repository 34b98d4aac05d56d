"""A fake Slack Web API on 127.0.0.1 (stdlib ``ThreadingHTTPServer`` in a thread).

Speaks the documented wire format: ``POST|GET /api/<method>`` with a JSON, form or query
body and ``Authorization: Bearer <token>``; always HTTP 200 with ``{"ok": true, ...}`` or
``{"ok": false, "error": "<code>"}`` (``not_authed``, ``invalid_auth``,
``channel_not_found``, ``message_not_found``, ``already_reacted`` …), except ``ratelimited``
which is a 429 with ``Retry-After``. It stores the messages it was sent per channel, so
``conversations.history`` / ``conversations.replies`` read them back. ``GET /files/<name>``
serves :attr:`FakeSlack.files` to the bearer token. Every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.support.loopback import loopback_server, url_of

__all__ = ["FakeSlack", "SlackCall", "fake_slack"]

TOKEN = "xoxb-test-token"
CHANNELS = ("C4", "C100", "D9")


@dataclass
class SlackCall:
    """One request the fake received."""

    method: str
    params: dict[str, Any]
    authorization: str
    content_type: str
    http_method: str


@dataclass
class FakeSlack:
    """State of the fake; tests read :attr:`calls` and :attr:`messages`."""

    token: str = TOKEN
    url: str = ""
    calls: list[SlackCall] = field(default_factory=list)
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    reactions: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    ratelimited: int = 0  # answer the next N calls with 429 ratelimited
    lock: threading.Lock = field(default_factory=threading.Lock)
    _clock: int = 1715600000

    @property
    def api_url(self) -> str:
        return self.url + "/api"

    def calls_of(self, method: str) -> list[SlackCall]:
        with self.lock:
            return [c for c in self.calls if c.method == method]

    def _next_ts(self) -> str:
        self._clock += 1
        return f"{self._clock}.000100"

    def handle(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        handler = getattr(self, "api_" + method.replace(".", "_"), None)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        with self.lock:
            return handler(params)  # type: ignore[no-any-return]

    def _channel(self, params: dict[str, Any]) -> str | None:
        channel = params.get("channel")
        return channel if channel in CHANNELS else None

    def _find(self, channel: str, ts: Any) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel, []) if m["ts"] == ts), None)

    def api_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        if not params.get("text"):
            return {"ok": False, "error": "no_text"}
        message = {
            "type": "message",
            "user": "UBOT",
            "bot_id": "B1",
            "text": params["text"],
            "ts": self._next_ts(),
        }
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        self.messages.setdefault(channel, []).append(message)
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": message}

    def api_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        message = self._find(channel, params.get("ts"))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        message["text"] = params.get("text", "")
        return {"ok": True, "channel": channel, "ts": message["ts"], "text": message["text"]}

    def api_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        message = self._find(channel, params.get("ts"))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        self.messages[channel].remove(message)
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    def api_reactions_add(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        if self._find(channel, params.get("timestamp")) is None:
            return {"ok": False, "error": "message_not_found"}
        names = self.reactions.setdefault((channel, str(params.get("timestamp"))), [])
        if params.get("name") in names:
            return {"ok": False, "error": "already_reacted"}
        names.append(str(params.get("name")))
        return {"ok": True}

    def _page(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        latest, oldest = params.get("latest"), params.get("oldest")
        inclusive = str(params.get("inclusive", "false")).lower() in ("true", "1")

        def keep(m: dict[str, Any]) -> bool:
            ts = float(m["ts"])
            if latest is not None and (
                ts > float(latest) or (ts == float(latest) and not inclusive)
            ):
                return False
            return not (
                oldest is not None
                and (ts < float(oldest) or (ts == float(oldest) and not inclusive))
            )

        kept = [m for m in messages if keep(m)]
        limit = int(params.get("limit", 100))
        return {"ok": True, "messages": kept[:limit], "has_more": len(kept) > limit,
                "response_metadata": {"next_cursor": "next" if len(kept) > limit else ""}}

    def api_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        newest_first = sorted(
            self.messages.get(channel, []), key=lambda m: float(m["ts"]), reverse=True
        )
        return self._page(newest_first, params)

    def api_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = self._channel(params)
        if channel is None:
            return {"ok": False, "error": "channel_not_found"}
        thread = [m for m in self.messages.get(channel, [])
                  if m["ts"] == params.get("ts") or m.get("thread_ts") == params.get("ts")]
        if not thread:
            return {"ok": False, "error": "thread_not_found"}
        return self._page(sorted(thread, key=lambda m: float(m["ts"])), params)


def _handler(fake: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (
                headers or {"Content-Type": "application/json; charset=utf-8"}
            ).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _dispatch(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length", "0") or 0)
            raw = self.rfile.read(length) if length else b""
            auth = self.headers.get("Authorization", "")
            authorized = auth == f"Bearer {fake.token}"
            if parts.path.startswith("/files/"):
                data = fake.files.get(parts.path.removeprefix("/files/"))
                if not authorized or data is None:
                    self._send(404 if authorized else 403, b"no", {"Content-Type": "text/plain"})
                else:
                    self._send(200, data, {"Content-Type": "image/png", "ETag": '"e1"',
                                           "Content-Disposition": "attachment; filename=x.png"})
                return
            if not parts.path.startswith("/api/"):
                self._send(404, b"{}")
                return
            method = parts.path.removeprefix("/api/")
            content_type = self.headers.get("Content-Type", "")
            params: dict[str, Any] = dict(parse_qsl(parts.query))
            if raw and "json" in content_type:
                params.update(json.loads(raw))
            elif raw:
                params.update(parse_qsl(raw.decode()))
            with fake.lock:
                fake.calls.append(SlackCall(method, params, auth, content_type, self.command))
                limited = fake.ratelimited > 0
                if limited:
                    fake.ratelimited -= 1
            if limited:
                self._send(429, b'{"ok":false,"error":"ratelimited"}',
                           {"Content-Type": "application/json", "Retry-After": "30"})
                return
            if not auth:
                answer: dict[str, Any] = {"ok": False, "error": "not_authed"}
            elif not authorized:
                answer = {"ok": False, "error": "invalid_auth"}
            else:
                answer = fake.handle(method, params)
            self._send(200, json.dumps(answer).encode())

        do_GET = _dispatch
        do_POST = _dispatch

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_slack() -> Iterator[FakeSlack]:
    """Run a :class:`FakeSlack` on a free loopback port for the ``with`` block."""
    fake = FakeSlack()
    with loopback_server(_handler(fake)) as server:
        fake.url = url_of(server)
        yield fake
