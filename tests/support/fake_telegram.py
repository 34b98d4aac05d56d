"""A fake Telegram Bot API on 127.0.0.1 (stdlib ``ThreadingHTTPServer`` in a thread).

Speaks the documented wire format: ``POST /bot<token>/<method>`` with a JSON, form or query
body; answers ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code", "description",
"parameters"?}`` with the matching HTTP status. ``getUpdates`` has the real semantics: an
update is kept until a call with a higher ``offset`` confirms it, and ``timeout`` long-polls
until an update arrives. :meth:`FakeTelegram.throttle` makes the next calls answer 429 with
``parameters.retry_after``. Every request is recorded with its server-side arrival time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.support.loopback import loopback_server, url_of

__all__ = ["FakeTelegram", "RecordedCall", "fake_telegram"]

TOKEN = "123456:TEST-token"


@dataclass
class RecordedCall:
    """One request the fake received."""

    method: str
    params: dict[str, Any]
    at: float
    token: str
    status: int = 200


@dataclass
class FakeTelegram:
    """State of the fake; tests add updates and read :attr:`calls`."""

    token: str = TOKEN
    url: str = ""
    calls: list[RecordedCall] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    next_update_id: int = 1000
    next_message_id: int = 500
    throttled: list[int] = field(default_factory=list)  # retry_after of the next 429 answers
    lock: threading.Condition = field(default_factory=threading.Condition)

    def add_update(self, message: dict[str, Any]) -> int:
        """Queue an update carrying ``message``; returns its update_id."""
        with self.lock:
            update_id = self.next_update_id
            self.next_update_id += 1
            self.updates.append({"update_id": update_id, **message})
            self.lock.notify_all()
            return update_id

    def add_text(self, chat_id: int, text: str, *, is_bot: bool = False, **extra: Any) -> int:
        """Queue a private-chat text message from user 77."""
        message = {"message_id": self.next_update_id + 1, "date": 1700000000,
                   "chat": {"id": chat_id, "type": "private", "username": "alice"},
                   "from": {"id": 77, "is_bot": is_bot, "first_name": "Alice", "username": "alice"},
                   "text": text, **extra}
        return self.add_update({"message": message})

    def add_callback(self, chat_id: int, user_id: int, data: str, *,
                     message_id: int = 1) -> int:
        """Queue a ``callback_query`` update: user ``user_id`` pressed an inline button with
        ``callback_data`` ``data`` under the bot's message ``message_id`` in ``chat_id``."""
        query = {"id": f"cbq-{self.next_update_id}", "chat_instance": f"ci-{chat_id}",
                 "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                 "message": {"message_id": message_id, "date": 1700000000,
                             "chat": {"id": chat_id, "type": "private"}, "text": "..."},
                 "data": data}
        return self.add_update({"callback_query": query})

    def throttle(self, retry_after: int, times: int = 1) -> None:
        """Answer the next ``times`` calls with 429 and ``retry_after``."""
        with self.lock:
            self.throttled.extend([retry_after] * times)

    def calls_of(self, method: str) -> list[RecordedCall]:
        with self.lock:
            return [c for c in self.calls if c.method == method]

    # -- the API -----------------------------------------------------------------------

    def handle(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            if self.throttled:
                retry = self.throttled.pop(0)
                return 429, {"ok": False, "error_code": 429,
                             "description": f"Too Many Requests: retry after {retry}",
                             "parameters": {"retry_after": retry}}
        handler = getattr(self, "api_" + method, None)
        if handler is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found"}
        try:
            result = handler(params)
        except _ApiError as exc:
            return exc.code, {"ok": False, "error_code": exc.code, "description": exc.description}
        return 200, {"ok": True, "result": result}

    def api_getUpdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset", 0) or 0)
        timeout = float(params.get("timeout", 0) or 0)
        limit = int(params.get("limit", 100) or 100)
        deadline = time.monotonic() + timeout
        with self.lock:
            if offset:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]  # confirmed
            while True:
                pending = [u for u in self.updates if u["update_id"] >= offset]
                left = deadline - time.monotonic()
                if pending or left <= 0:
                    return pending[:limit]
                self.lock.wait(left)

    def _chat(self, params: dict[str, Any]) -> Any:
        chat_id = params.get("chat_id")
        if chat_id in (None, ""):
            raise _ApiError(400, "Bad Request: chat_id is empty")
        if str(chat_id) == "404":
            raise _ApiError(400, "Bad Request: chat not found")
        return int(chat_id) if str(chat_id).lstrip("-").isdigit() else chat_id

    def api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat(params)
        if not params.get("text"):
            raise _ApiError(400, "Bad Request: message text is empty")
        with self.lock:
            self.next_message_id += 1
            message_id = self.next_message_id
        return {
            "message_id": message_id,
            "date": int(time.time()),
            "text": params["text"],
            "chat": {"id": chat_id, "type": "private"},
            "from": {"id": 1, "is_bot": True, "first_name": "bot"},
        }

    def api_editMessageText(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat(params)
        return {
            "message_id": int(params["message_id"]),
            "date": int(time.time()),
            "edit_date": int(time.time()),
            "text": params["text"],
            "chat": {"id": chat_id, "type": "private"},
        }

    def api_deleteMessage(self, params: dict[str, Any]) -> bool:
        self._chat(params)
        return True

    def api_setMessageReaction(self, params: dict[str, Any]) -> bool:
        self._chat(params)
        return True

    def api_sendChatAction(self, params: dict[str, Any]) -> bool:
        self._chat(params)
        return True

    def api_answerCallbackQuery(self, params: dict[str, Any]) -> bool:
        if not params.get("callback_query_id"):
            raise _ApiError(400, "Bad Request: query is too old and response timeout expired")
        return True

    def api_getFile(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = str(params.get("file_id", ""))
        if file_id not in self.files:
            raise _ApiError(400, "Bad Request: invalid file_id")
        return {
            "file_id": file_id,
            "file_unique_id": "u-" + file_id,
            "file_size": len(self.files[file_id]),
            "file_path": f"photos/{file_id}.jpg",
        }


class _ApiError(Exception):
    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


def _handler(fake: FakeTelegram) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:  # a long poll whose client was stopped meanwhile: nobody to answer
                self.close_connection = True

        def _dispatch(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length", "0") or 0)
            raw = self.rfile.read(length) if length else b""
            segments = parts.path.strip("/").split("/")
            if segments[0] == "file" and len(segments) >= 3:  # GET /file/bot<token>/<file_path>
                token = segments[1].removeprefix("bot")
                file_id = segments[-1].rsplit(".", 1)[0]
                data = fake.files.get(file_id) if token == fake.token else None
                self._send(200 if data is not None else 404, data or b"", "image/jpeg")
                return
            if len(segments) != 2 or not segments[0].startswith("bot"):
                self._send(404, b'{"ok":false,"error_code":404,"description":"Not Found"}')
                return
            token, method = segments[0].removeprefix("bot"), segments[1]
            params: dict[str, Any] = dict(parse_qsl(parts.query))
            content_type = self.headers.get("Content-Type", "")
            if raw and "json" in content_type:
                params.update(json.loads(raw))
            elif raw:
                params.update(parse_qsl(raw.decode()))
            call = RecordedCall(method, params, time.time(), token)
            with fake.lock:
                fake.calls.append(call)
            if token != fake.token:
                status, answer = (
                    401,
                    {"ok": False, "error_code": 401, "description": "Unauthorized"},
                )
            else:
                status, answer = fake.handle(method, params)
            call.status = status
            self._send(status, json.dumps(answer).encode())

        do_GET = _dispatch
        do_POST = _dispatch

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_telegram() -> Iterator[FakeTelegram]:
    """Run a :class:`FakeTelegram` on a free loopback port for the ``with`` block."""
    fake = FakeTelegram()
    with loopback_server(_handler(fake)) as server:
        fake.url = url_of(server)
        try:
            yield fake
        finally:  # wake long polls still waiting, so the server can stop
            with fake.lock:
                fake.lock.notify_all()
