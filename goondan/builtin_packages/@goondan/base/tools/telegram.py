"""Tool ``telegram`` of ``@goondan/base``: answer and manage messages through the Telegram
Bot API (docs/base-package.md, "telegram").

Exports ``send``, ``edit``, ``delete``, ``react``, ``set_chat_action`` and ``download_file``.
The bot token is input ``token``, else ``$TELEGRAM_BOT_TOKEN``, ``$BOT_TOKEN``,
``$TELEGRAM_TOKEN``, ``$BRAIN_TELEGRAM_BOT_TOKEN`` (none: ``E_BASE_TELEGRAM_TOKEN_MISSING``);
the API base URL is input ``apiBaseUrl``, else ``$TELEGRAM_API_BASE_URL``, else
``https://api.telegram.org``. An answer with ``ok: false`` fails the call with
``E_BASE_TELEGRAM_API`` and ``[telegram] <method> failed (<code>): <description>``.

The token is in every URL path (``/bot<token>/``, ``/file/bot<token>/``), so it goes only to the
trusted origin: an input ``apiBaseUrl`` elsewhere needs an input ``token``, and a redirect off
the origin is not followed (``_web_api``).
"""

from __future__ import annotations

from typing import Any

from goondan.tools import ToolContext, ToolFailure

from . import _web_api as api
from ._inputs import emoji_list, flag, invalid, required_text

TOKEN_ENV = ("TELEGRAM_BOT_TOKEN", "BOT_TOKEN", "TELEGRAM_TOKEN", "BRAIN_TELEGRAM_BOT_TOKEN")
DEFAULT_BASE_URL = "https://api.telegram.org"
PARSE_MODES = {"markdown": "Markdown", "markdownv2": "MarkdownV2", "markdown-v2": "MarkdownV2",
               "html": "HTML"}
CHAT_ACTIONS = (
    "typing",
    "upload-photo",
    "record-video",
    "upload-video",
    "record-voice",
    "upload-voice",
    "upload-document",
    "choose-sticker",
    "find-location",
    "record-video-note",
    "upload-video-note",
)


class _Client:
    """One call's token, base URL and timeout."""

    def __init__(self, input: dict[str, Any]) -> None:
        self.token = api.find_token(input, TOKEN_ENV, "telegram", "E_BASE_TELEGRAM_TOKEN_MISSING")
        self.base = api.api_base_url(input, "TELEGRAM_API_BASE_URL", DEFAULT_BASE_URL)
        timeout = api.positive_int(input, "timeoutMs", api.DEFAULT_TIMEOUT_MS)
        assert timeout is not None
        self.timeout_ms = timeout

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """POST ``params`` as JSON to ``<base>/bot<token>/<method>``; returns ``result``."""
        response = await api.request(
            "POST", f"{self.base}/bot{self.token}/{method}", headers={}, timeout_ms=self.timeout_ms,
            secret=self.token, json_body={k: v for k, v in params.items() if v is not None})
        data = response.data
        if not isinstance(data, dict):
            raise ToolFailure(
                f"[telegram] {method} failed ({response.status}): no JSON answer",
                code="E_BASE_TELEGRAM_API",
                suggestion="Check the Telegram API base URL.",
            )
        if not data.get("ok"):
            code = data.get("error_code", response.status)
            description = str(data.get("description") or "unknown error").replace(self.token, "***")
            parameters = data.get("parameters") if isinstance(data.get("parameters"), dict) else {}
            retry = (parameters or {}).get("retry_after")
            hint = f" (retry after {retry} s)" if retry is not None else ""
            raise ToolFailure(f"[telegram] {method} failed ({code}): {description}{hint}",
                              code="E_BASE_TELEGRAM_API", suggestion=_suggestion(code))
        return data.get("result")


def _suggestion(code: Any) -> str:
    if code == 401:
        return "Check TELEGRAM_BOT_TOKEN."
    if code == 429:
        return "Wait retry_after seconds before calling Telegram again."
    return "Check chatId, messageId and the text against the Bot API documentation."


def _chat_id(input: dict[str, Any]) -> int | str:
    value = input.get("chatId")
    if value is None:
        raise invalid("'chatId' is required")
    if isinstance(value, bool) or not isinstance(value, int | str | float):
        raise invalid("'chatId' must be a string or an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise invalid("'chatId' must be a string or an integer")
        return int(value)
    if isinstance(value, str):
        value = value.strip()
        if not value:
            raise invalid("'chatId' must not be empty")
        return int(value) if value.lstrip("-").isdigit() else value  # '@channelusername' stays
    return value


def _message_id(
    input: dict[str, Any], name: str = "messageId", required: bool = True
) -> int | None:
    value = input.get(name)
    if value is None:
        if required:
            raise invalid(f"'{name}' is required")
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value <= 0
        or int(value) != value
    ):
        raise invalid(f"'{name}' must be an integer > 0")
    return int(value)


def _parse_mode(input: dict[str, Any]) -> str | None:
    value = input.get("parseMode")
    if value is None:
        return None
    mode = PARSE_MODES.get(value.strip().lower()) if isinstance(value, str) else None
    if mode is None:
        raise invalid("'parseMode' must be markdown, markdownv2 or html")
    return mode


async def send(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``sendMessage``; ``replyToMessageId`` answers a message."""
    chat_id = _chat_id(input)
    text = required_text(input, "text")
    reply_to = _message_id(input, "replyToMessageId", required=False)
    params: dict[str, Any] = {"chat_id": chat_id, "text": text, "parse_mode": _parse_mode(input),
                              "disable_notification": flag(input, "disableNotification")}
    if flag(input, "disableWebPagePreview"):
        params["link_preview_options"] = {"is_disabled": True}
    if reply_to is not None:
        params["reply_parameters"] = {"message_id": reply_to}
        allow = flag(input, "allowSendingWithoutReply")
        if allow is not None:
            params["reply_parameters"]["allow_sending_without_reply"] = allow
    result = await _Client(input).call("sendMessage", params)
    result = result if isinstance(result, dict) else {}
    return {"ok": True, "chatId": chat_id, "messageId": result.get("message_id"),
            "date": result.get("date"), "text": result.get("text", text)}


async def edit(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``editMessageText``."""
    chat_id = _chat_id(input)
    message_id = _message_id(input)
    text = required_text(input, "text")
    params: dict[str, Any] = {"chat_id": chat_id, "message_id": message_id, "text": text,
                              "parse_mode": _parse_mode(input)}
    if flag(input, "disableWebPagePreview"):
        params["link_preview_options"] = {"is_disabled": True}
    await _Client(input).call("editMessageText", params)
    return {"ok": True, "chatId": chat_id, "messageId": message_id, "edited": True}


async def delete(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``deleteMessage``."""
    chat_id = _chat_id(input)
    message_id = _message_id(input)
    await _Client(input).call("deleteMessage", {"chat_id": chat_id, "message_id": message_id})
    return {"ok": True, "chatId": chat_id, "messageId": message_id, "deleted": True}


async def react(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``setMessageReaction`` with the given emoji, or none with ``clear``."""
    chat_id = _chat_id(input)
    message_id = _message_id(input)
    clear = bool(flag(input, "clear"))
    emojis = [] if clear else emoji_list(input, example="'👍'")
    if not clear and not emojis:
        raise invalid("'emoji', 'emojis' or clear: true is required")
    await _Client(input).call(
        "setMessageReaction",
        {
            "chat_id": chat_id,
            "message_id": message_id,
            "reaction": [{"type": "emoji", "emoji": e} for e in emojis],
            "is_big": flag(input, "isBig"),
        },
    )
    return {
        "ok": True,
        "chatId": chat_id,
        "messageId": message_id,
        "cleared": clear,
        "emojis": emojis,
        "reactionCount": len(emojis),
    }


async def set_chat_action(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``sendChatAction`` ("typing …" shown to the user for a few seconds)."""
    chat_id = _chat_id(input)
    raw = input.get("status", input.get("action", "typing"))
    status = raw.strip().lower().replace("_", "-") if isinstance(raw, str) else ""
    if status not in CHAT_ACTIONS:
        raise invalid(f"'status' must be one of {', '.join(CHAT_ACTIONS)}")
    action = status.replace("-", "_")
    await _Client(input).call("sendChatAction", {"chat_id": chat_id, "action": action})
    return {"ok": True, "chatId": chat_id, "status": status, "action": action}


async def download_file(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``getFile``, then GET the file (the token is masked in ``downloadUrl``)."""
    file_id = input.get("fileId", input.get("file_id"))
    if not isinstance(file_id, str) or not file_id.strip():
        raise invalid("'fileId' is required")
    max_bytes = api.max_download_bytes(input)
    client = _Client(input)
    info = await client.call("getFile", {"file_id": file_id.strip()})
    info = info if isinstance(info, dict) else {}
    path = info.get("file_path")
    if not isinstance(path, str) or not path:
        raise ToolFailure(
            "[telegram] getFile failed: the file has no file_path (is it over 20 MB?)",
            code="E_BASE_TELEGRAM_API",
            suggestion="Telegram serves files up to 20 MB to bots.",
        )
    url = f"{client.base}/file/bot{client.token}/{path}"
    got = await api.download(url, headers={}, max_bytes=max_bytes, timeout_ms=client.timeout_ms,
                             secret=client.token)
    if got.status >= 400:
        raise ToolFailure(
            f"[telegram] download_file failed: HTTP {got.status}",
            code="E_BASE_TELEGRAM_API",
            suggestion="The file_id may have expired; get a fresh one from a new message.",
        )
    content_type = got.headers.get("content-type", "application/octet-stream")
    return {
        "ok": True,
        "fileId": info.get("file_id", file_id),
        "fileUniqueId": info.get("file_unique_id"),
        "filePath": path,
        "fileSize": info.get("file_size"),
        "downloadUrl": f"{client.base}/file/bot<token>/{path}",
        "contentType": content_type,
        "sizeBytes": len(got.body),
        **api.file_output(ctx, input, got.body, content_type),
    }


handlers = {"send": send, "edit": edit, "delete": delete, "react": react,
            "set_chat_action": set_chat_action, "download_file": download_file}
