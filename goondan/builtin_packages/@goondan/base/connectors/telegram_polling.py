"""Connector ``telegram-polling`` of ``@goondan/base``: Telegram Bot API long polling
(docs/base-connectors.md, "telegram-polling").

Token: secrets ``TELEGRAM_BOT_TOKEN`` / ``BOT_TOKEN`` / ``TELEGRAM_TOKEN`` (required). Settings,
read from config then secrets: ``TELEGRAM_POLL_TIMEOUT_SECONDS`` (30),
``TELEGRAM_REQUEST_TIMEOUT_MS`` ((poll timeout + 5) · 1000), ``TELEGRAM_RETRY_DELAY_MS``
(1000), ``TELEGRAM_INITIAL_OFFSET`` (used only while no offset is stored),
``TELEGRAM_API_BASE_URL`` (``https://api.telegram.org``).

Exactly-once hand-over: each update is emitted with its ``update_id`` as the event id and
only then is the next offset (``update_id + 1``) written atomically to
``<state_dir>/telegram-offset.json``. Telegram keeps an update until a ``getUpdates`` call
with a higher offset confirms it, so a crash before the emit loses nothing, and a crash
between the emit and the offset write re-emits an id the inbox already holds (a duplicate
receipt, nothing stored twice).

Calls go through the HTTP layer (``goondan/http/``). A failed call (a network failure of any
kind, an error answer) is logged as a warning and retried after ``TELEGRAM_RETRY_DELAY_MS``; a 429
answer waits ``parameters.retry_after`` seconds instead. Updates without a ``message``, from
bots, or without text, caption, photo or image document are skipped (the offset still moves).

Approvals (docs/approvals.md, "Telegram"): a turn of this Connection that waits for a person is
announced in its chat (``sendMessage`` with ``reply_markup.inline_keyboard``: Approve / Deny
buttons whose ``callback_data`` is ``gdn:a:<id>`` / ``gdn:d:<id>``). A press comes back as a
``callback_query`` update; only users of config ``APPROVERS`` (Telegram user ids) may decide,
recorded ``via: telegram:<user id>``; every press is answered with ``answerCallbackQuery``
(saying what happened), and a replayed one changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import goondan.http as http
from goondan.connectors import ConnectorContext, ConnectorEvent, ConnectorEventError
from goondan.workspace.files import atomic_write

from ._approvals import decide, json_object, post_json, request_text
from ._settings import config_error, config_int, setting

__all__ = ["OFFSET_FILE", "TelegramPoller", "run", "to_event"]

OFFSET_FILE = "telegram-offset.json"
DEFAULT_API_BASE_URL = "https://api.telegram.org"
TOKEN_SECRETS = ("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN")
CALLBACK_PREFIX = "gdn:"


T = TypeVar("T")


async def _in_daemon_thread(call: Callable[[], T]) -> T:
    """``call()`` in a daemon thread. Unlike ``asyncio.to_thread``, a long poll still blocked
    when the connector is cancelled neither delays ``asyncio.run``'s executor shutdown nor the
    process exit by up to the poll timeout; its late answer is dropped (Telegram keeps the
    updates until a later offset confirms them)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result, error = call(), None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="telegram-getUpdates", daemon=True).start()
    return await future


class _ApiError(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _photo(message: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    photos = [p for p in message.get("photo") or [] if isinstance(p, dict) and p.get("file_id")]
    if not photos:
        return [], {}
    best = max(
        photos, key=lambda p: (p.get("width", 0) * p.get("height", 0), p.get("file_size", 0))
    )
    props = {"has_photo": True, "photo_file_id": best["file_id"],
             "photo_file_unique_id": best.get("file_unique_id"), "photo_width": best.get("width"),
             "photo_height": best.get("height"), "photo_file_size": best.get("file_size"),
             "photo_count": len(photos)}
    return [f"[telegram_photo] file_id={best['file_id']}"], props


def _image_document(message: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    document = message.get("document")
    if not isinstance(document, dict) or not document.get("file_id"):
        return [], {}
    mime = document.get("mime_type")
    if not isinstance(mime, str) or not mime.startswith("image/"):
        return [], {}
    props = {
        "has_image_document": True,
        "image_document_file_id": document["file_id"],
        "image_document_file_unique_id": document.get("file_unique_id"),
        "image_document_file_name": document.get("file_name"),
        "image_document_mime_type": mime,
        "image_document_file_size": document.get("file_size"),
    }
    return [f"[telegram_image_document] file_id={document['file_id']}"], props


def to_event(update: dict[str, Any]) -> ConnectorEvent | None:
    """The ``telegram_message`` event for one Update, or ``None`` when it is skipped."""
    message = update.get("message")
    if not isinstance(message, dict):
        return None
    sender: dict[str, Any] = message["from"] if isinstance(message.get("from"), dict) else {}
    if sender.get("is_bot"):
        return None
    chat: dict[str, Any] = message["chat"] if isinstance(message.get("chat"), dict) else {}
    chat_id = chat.get("id")
    if not isinstance(chat_id, int | str) or isinstance(chat_id, bool):
        return None
    body = message.get("text") if isinstance(message.get("text"), str) else message.get("caption")
    body = body if isinstance(body, str) else ""
    photo_lines, photo_props = _photo(message)
    doc_lines, doc_props = _image_document(message)
    lines = [line for line in (body, *photo_lines, *doc_lines) if line]
    if not lines:
        return None
    properties: dict[str, Any] = {
        "update_id": update.get("update_id"), "chat_id": chat_id, "chat_type": chat.get("type"),
        "chat_title": chat.get("title"), "chat_username": chat.get("username"),
        "message_id": message.get("message_id"), "date": message.get("date"),
        "from_id": sender.get("id"), "from_username": sender.get("username"),
        "from_first_name": sender.get("first_name"), "from_last_name": sender.get("last_name"),
        **photo_props, **doc_props,
    }
    return ConnectorEvent.text(
        "telegram_message",
        "\n".join(lines),
        instance_key=f"telegram:{chat_id}",
        properties=properties,
        id=f"telegram-update-{update['update_id']}",
    )


class TelegramPoller:
    """The polling loop; one per Connection."""

    def __init__(self, ctx: ConnectorContext) -> None:
        self.ctx = ctx
        token = next(
            (ctx.secrets[n] for n in TOKEN_SECRETS if ctx.secrets.get(n, "").strip()), None
        )
        if token is None:
            raise config_error(ctx, "telegram-polling needs a bot token",
                               "set spec.secrets.TELEGRAM_BOT_TOKEN of the Connection")
        self._token = token.strip()
        self.poll_timeout = config_int(
            ctx, "TELEGRAM_POLL_TIMEOUT_SECONDS", default=30, secrets=True
        )
        self.request_timeout = (
            config_int(
                ctx,
                "TELEGRAM_REQUEST_TIMEOUT_MS",
                secrets=True,
                minimum=1,
                default=(self.poll_timeout + 5) * 1000,
            )
            / 1000.0
        )
        self.retry_delay = (
            config_int(ctx, "TELEGRAM_RETRY_DELAY_MS", default=1000, secrets=True) / 1000.0
        )
        base = setting(ctx, "TELEGRAM_API_BASE_URL", secrets=True) or DEFAULT_API_BASE_URL
        self.base_url = base.rstrip("/")
        self.offset_path = Path(ctx.state_dir) / OFFSET_FILE
        self.offset = self._load_offset()
        # A poll abandoned by a cancelled task may still hold a connection: allow a second.
        self._pool = http.new_pool(num_pools=1, maxsize=2)

    def __repr__(self) -> str:
        return f"<TelegramPoller {self.base_url} offset={self.offset}>"

    def _load_offset(self) -> int | None:
        try:
            data = json.loads(self.offset_path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("offset"), int):
                return int(data["offset"])
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            self.ctx.logger.warning("ignoring unreadable %s: %s", self.offset_path, exc)
        initial = setting(self.ctx, "TELEGRAM_INITIAL_OFFSET", secrets=True)
        if initial is None:
            return None
        try:
            return int(initial)
        except ValueError:
            raise config_error(
                self.ctx,
                f"TELEGRAM_INITIAL_OFFSET must be an integer, got {initial!r}",
                "set it to an update_id",
            ) from None

    def _store_offset(self, offset: int) -> None:
        self.offset_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.offset_path, json.dumps({"offset": offset}).encode() + b"\n")
        self.offset = offset

    def _mask(self, text: str) -> str:
        return text.replace(self._token, "***")

    def _get_updates(self) -> list[dict[str, Any]]:
        """One blocking ``getUpdates`` call (run in a worker thread)."""
        params: dict[str, Any] = {"timeout": self.poll_timeout}
        if self.offset is not None:
            params["offset"] = self.offset
        url = f"{self.base_url}/bot{self._token}/getUpdates"
        try:
            response = self._pool.request(
                "POST",
                url,
                body=json.dumps(params).encode(),
                headers={"Content-Type": "application/json"},
                timeout=http.timeout(self.request_timeout),
            )
        except Exception as exc:
            failure = http.failure_of(exc)
            if failure is None:
                raise
            raise _ApiError(self._mask(f"getUpdates failed: {failure.reason}")) from None
        try:
            data = json.loads(response.data)
        except ValueError:
            raise _ApiError(
                f"getUpdates failed: HTTP {response.status} with a non-JSON body"
            ) from None
        if not isinstance(data, dict):
            raise _ApiError(f"getUpdates failed: HTTP {response.status} with an unexpected body")
        if not data.get("ok"):
            params_: dict[str, Any] = (
                data["parameters"] if isinstance(data.get("parameters"), dict) else {}
            )
            retry_after = params_.get("retry_after")
            description = self._mask(str(data.get("description") or "unknown error"))
            raise _ApiError(
                f"getUpdates failed ({data.get('error_code', response.status)}): {description}",
                float(retry_after) if isinstance(retry_after, int | float) else None,
            )
        result = data.get("result")
        if not isinstance(result, list):
            raise _ApiError("getUpdates failed: 'result' is not a list")
        return [u for u in result if isinstance(u, dict) and isinstance(u.get("update_id"), int)]

    async def _api(self, method: str, body: dict[str, Any]) -> dict[str, Any] | None:
        data = await post_json(self.ctx, f"{self.base_url}/bot{self._token}/{method}", body,
                               secret=self._token)
        if data is not None and not data.get("ok"):
            self.ctx.logger.warning("telegram %s failed: %s", method,
                                    self._mask(str(data.get("description"))))
        return data

    async def announce(self, approval: dict[str, Any], properties: dict[str, Any]) -> None:
        """Send the approval request with its inline keyboard to the conversation's chat."""
        chat = properties.get("chat_id")
        if not chat:
            return
        ident = str(approval.get("id"))
        keyboard = [[{"text": "Approve", "callback_data": f"{CALLBACK_PREFIX}a:{ident}"},
                     {"text": "Deny", "callback_data": f"{CALLBACK_PREFIX}d:{ident}"}]]
        await self._api("sendMessage", {"chat_id": chat, "text": request_text(approval),
                                        "reply_markup": {"inline_keyboard": keyboard}})

    async def on_callback(self, query: dict[str, Any]) -> None:
        """A button press (``callback_query``): decide, then answer the query."""
        data = query.get("data")
        if not isinstance(data, str) or not data.startswith(CALLBACK_PREFIX):
            return
        kind, _, ident = data.removeprefix(CALLBACK_PREFIX).partition(":")
        if kind not in ("a", "d") or not ident:
            return
        sender = json_object(query.get("from"))
        user = str(sender.get("id") or "")
        status, body = await decide(self.ctx, ident, approve=kind == "a", user=user,
                                    via=f"telegram:{user}")
        if status == 200:
            text = f"{ident} {body.get('status')}" + ("" if body.get("decided") else
                                                       f" (already, by {body.get('decidedBy')})")
        else:
            text = "You may not decide this approval." if status == 403 else \
                f"Not decided: {body.get('error')}"
        await self._api("answerCallbackQuery", {"callback_query_id": query.get("id"),
                                                "text": text})

    async def poll_once(self) -> int:
        """One long poll and the hand-over of its updates; returns how many were emitted."""
        updates = await _in_daemon_thread(self._get_updates)
        emitted = 0
        for update in sorted(updates, key=lambda u: int(u["update_id"])):
            update_id = int(update["update_id"])
            if self.offset is not None and update_id < self.offset:
                continue  # already handed over (a late answer to an earlier poll)
            if isinstance(update.get("callback_query"), dict):
                await self.on_callback(update["callback_query"])
                self._store_offset(update_id + 1)
                continue
            event = to_event(update)
            if event is not None:
                try:
                    await self.ctx.emit(event)
                    emitted += 1
                except ConnectorEventError as exc:
                    self.ctx.logger.warning(
                        "telegram update %d dropped: %s", update_id, exc.message
                    )
            self._store_offset(update_id + 1)
        return emitted

    async def run_forever(self) -> None:
        """Poll until cancelled; errors are logged and retried after a delay."""
        self.ctx.logger.info("telegram-polling started (offset %s)", self.offset)
        while True:
            try:
                await self.poll_once()
            except _ApiError as exc:
                delay = exc.retry_after if exc.retry_after is not None else self.retry_delay
                self.ctx.logger.warning("%s; retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)


async def run(ctx: ConnectorContext) -> None:
    """Long-poll the Bot API until cancelled."""
    poller = TelegramPoller(ctx)
    ctx.on_approval(poller.announce)
    await poller.run_forever()
