"""Tool ``slack`` of ``@goondan/base``: answer and manage messages through the Slack Web API
(docs/base-package.md, "slack").

Exports ``send``, ``read``, ``edit``, ``delete``, ``react`` and ``download_file``. The bot
token is input ``token``, else ``$SLACK_BOT_TOKEN``, ``$SLACK_TOKEN``,
``$BRAIN_SLACK_BOT_TOKEN`` (none: ``E_BASE_SLACK_TOKEN_MISSING``); the API base URL is input
``apiBaseUrl``, else ``$SLACK_API_BASE_URL``, else ``https://slack.com/api``. An answer with
``ok: false`` fails the call with ``E_BASE_SLACK_API`` and ``[slack] <method> failed:
<error>``; network failures are ``E_BASE_HTTP`` / ``E_BASE_HTTP_TIMEOUT``.

The token goes only where it belongs: an input ``apiBaseUrl`` on another origin than the
trusted one needs an input ``token`` (``_web_api.api_base_url``), and ``download_file`` sends
it only to Slack's file hosts (https, under ``slack.com`` / ``slack-edge.com``) or the API
base URL's origin, refusing any other URL before a request is made.
"""

from __future__ import annotations

from typing import Any

from goondan.tools import ToolContext, ToolFailure

from . import _web_api as api
from ._inputs import emoji_list, flag, invalid, required_text

TOKEN_ENV = ("SLACK_BOT_TOKEN", "SLACK_TOKEN", "BRAIN_SLACK_BOT_TOKEN")
DEFAULT_BASE_URL = "https://slack.com/api"
FILE_DOMAINS = ("slack.com", "slack-edge.com")


class _Client:
    """One call's token, base URL and timeout."""

    def __init__(self, input: dict[str, Any]) -> None:
        self.token = api.find_token(input, TOKEN_ENV, "slack", "E_BASE_SLACK_TOKEN_MISSING")
        self.base = api.api_base_url(input, "SLACK_API_BASE_URL", DEFAULT_BASE_URL)
        timeout = api.positive_int(input, "timeoutMs", api.DEFAULT_TIMEOUT_MS)
        assert timeout is not None
        self.timeout_ms = timeout

    async def call(self, method: str, *, body: dict[str, Any] | None = None,
                   query: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST ``body`` as JSON (write methods) or GET with ``query`` (read methods, which
        Slack does not accept as JSON); returns the ``ok: true`` answer."""
        response = await api.request(
            "POST" if body is not None else "GET",
            f"{self.base}/{method}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout_ms=self.timeout_ms,
            secret=self.token,
            json_body={k: v for k, v in body.items() if v is not None} if body else None,
            query=query,
        )
        data = response.data
        if not isinstance(data, dict):
            raise ToolFailure(
                f"[slack] {method} failed: HTTP {response.status} without a JSON answer",
                code="E_BASE_SLACK_API",
                suggestion="Check the Slack API base URL.",
            )
        if not data.get("ok"):
            error = data.get("error") or f"HTTP {response.status}"
            retry = response.headers.get("retry-after")
            hint = f" (retry after {retry} s)" if retry else ""
            raise ToolFailure(f"[slack] {method} failed: {error}{hint}", code="E_BASE_SLACK_API",
                              suggestion=_suggestion(str(error)))
        return data


def _suggestion(error: str) -> str:
    if error in ("not_authed", "invalid_auth", "token_revoked", "account_inactive"):
        return "Check SLACK_BOT_TOKEN."
    if error in ("channel_not_found", "not_in_channel"):
        return "Check channelId and invite the bot to the channel."
    if error == "ratelimited":
        return "Wait before calling Slack again."
    return "See Slack's documentation of this error code."


def _ts(input: dict[str, Any], *names: str, required: bool = False) -> str | None:
    for name in names:
        value = input.get(name)
        if value is None:
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str) or not value.strip():
            raise invalid(f"'{name}' must be a Slack timestamp string like '1715600000.001500'")
        return value.strip()
    if required:
        raise invalid(f"'{names[0]}' is required")
    return None


def _message_ts(input: dict[str, Any], required: bool = True) -> str | None:
    return _ts(input, "messageTs", "ts", "timestamp", required=required)


async def send(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``chat.postMessage``; ``threadTs`` answers in a thread."""
    channel = required_text(input, "channelId", allow_blank=False)
    text = required_text(input, "text")
    client = _Client(input)
    data = await client.call(
        "chat.postMessage",
        body={
            "channel": channel,
            "text": text,
            "thread_ts": _ts(input, "threadTs"),
            "mrkdwn": flag(input, "mrkdwn"),
            "unfurl_links": flag(input, "unfurlLinks"),
            "unfurl_media": flag(input, "unfurlMedia"),
            "reply_broadcast": flag(input, "replyBroadcast"),
        },
    )
    return {
        "ok": True,
        "channelId": data.get("channel", channel),
        "messageTs": data.get("ts"),
        "text": text,
    }


async def read(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``conversations.replies`` (with ``threadTs``) or ``conversations.history``."""
    channel = required_text(input, "channelId", allow_blank=False)
    message_ts = _message_ts(input, required=False)
    thread_ts = _ts(input, "threadTs")
    limit = api.positive_int(input, "limit", 1 if message_ts else 20, 1000)
    cursor = input.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise invalid("'cursor' must be a string")
    inclusive = flag(input, "inclusive")
    query: dict[str, Any] = {"channel": channel, "limit": limit, "cursor": cursor,
                             "latest": _ts(input, "latest"), "oldest": _ts(input, "oldest")}
    if message_ts:
        query["latest"], inclusive = message_ts, True
    if inclusive is not None:
        query["inclusive"] = "true" if inclusive else "false"
    method = "conversations.replies" if thread_ts else "conversations.history"
    if thread_ts:
        query["ts"] = thread_ts
    data = await _Client(input).call(method, query=query)
    messages = [m for m in data.get("messages") or [] if isinstance(m, dict)]
    found = any(m.get("ts") == message_ts for m in messages) if message_ts else bool(messages)
    metadata = (
        data.get("response_metadata") if isinstance(data.get("response_metadata"), dict) else {}
    )
    return {
        "ok": True,
        "channelId": channel,
        "method": method,
        "messageTs": message_ts,
        "threadTs": thread_ts,
        "count": len(messages),
        "found": found,
        "messages": messages,
        "hasMore": bool(data.get("has_more")),
        "nextCursor": (metadata or {}).get("next_cursor") or None,
    }


async def edit(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``chat.update`` of a message the bot posted."""
    channel = required_text(input, "channelId", allow_blank=False)
    message_ts = _message_ts(input)
    text = required_text(input, "text")
    data = await _Client(input).call("chat.update", body={
        "channel": channel, "ts": message_ts, "text": text, "mrkdwn": flag(input, "mrkdwn")})
    return {
        "ok": True,
        "channelId": data.get("channel", channel),
        "messageTs": data.get("ts", message_ts),
        "edited": True,
    }


async def delete(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``chat.delete`` of a message the bot posted."""
    channel = required_text(input, "channelId", allow_blank=False)
    message_ts = _message_ts(input)
    await _Client(input).call("chat.delete", body={"channel": channel, "ts": message_ts})
    return {"ok": True, "channelId": channel, "messageTs": message_ts, "deleted": True}


def _emojis(input: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for item in emoji_list(input, example="'thumbsup' or ':eyes:'"):
        name = item.strip(":")
        if not name or any(c.isspace() for c in name):
            raise invalid(f"emoji {item!r} must be one name without whitespace")
        if name not in names:
            names.append(name)
    if not names:
        raise invalid("'emoji' or 'emojis' is required")
    return names


async def react(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """``reactions.add`` once per emoji; a reaction already there counts as added."""
    channel = required_text(input, "channelId", allow_blank=False)
    message_ts = _message_ts(input)
    names = _emojis(input)
    client = _Client(input)
    for name in names:
        try:
            await client.call(
                "reactions.add", body={"channel": channel, "timestamp": message_ts, "name": name}
            )
        except ToolFailure as exc:
            if "already_reacted" not in exc.message:
                raise
    return {"ok": True, "channelId": channel, "messageTs": message_ts, "emojis": names,
            "reactionCount": len(names)}


def _may_get_token(url: str, base: str) -> bool:
    """``url`` is on a Slack file host (https, under :data:`FILE_DOMAINS`, default port) or on
    the origin of the API base URL ``base``: the only places the bearer token goes."""
    where = api.origin(url)
    if where is None:
        return False
    if where == api.origin(base):
        return True
    scheme, host, port = where
    return scheme == "https" and port == 443 and any(
        host == domain or host.endswith("." + domain) for domain in FILE_DOMAINS)


async def download_file(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """GET a Slack file URL (``url_private``) with the bot token; another host is refused."""
    url = next(
        (input[n] for n in ("url", "fileUrl", "downloadUrl") if input.get(n) is not None), None
    )
    if not isinstance(url, str) or not url.strip():
        raise invalid("'url' is required (a Slack file URL such as url_private)")
    url = url.strip()
    client = _Client(input)
    if not _may_get_token(url, client.base):
        raise invalid(
            f"'url' must be a Slack file URL (https://files.slack.com/..., a file's "
            f"url_private): the bot token is not sent to {api.show_origin(api.origin(url))}"
        )
    got = await api.download(
        url,
        headers={"Authorization": f"Bearer {client.token}"},
        max_bytes=api.max_download_bytes(input),
        timeout_ms=client.timeout_ms,
        secret=client.token,
        may_follow=lambda target: _may_get_token(target, client.base),
    )
    if got.status >= 400:
        raise ToolFailure(
            f"[slack] download_file failed: HTTP {got.status}",
            code="E_BASE_SLACK_API",
            suggestion="Check the file URL and the bot's files:read scope.",
        )
    content_type = got.headers.get("content-type", "application/octet-stream")
    length = got.headers.get("content-length")
    return {"ok": True, "url": url, "contentType": content_type,
            "contentLength": int(length) if length and length.isdigit() else None,
            "sizeBytes": len(got.body), "etag": got.headers.get("etag"),
            "contentDisposition": got.headers.get("content-disposition"),
            **api.file_output(ctx, input, got.body, content_type)}


handlers = {"send": send, "read": read, "edit": edit, "delete": delete, "react": react,
            "download_file": download_file}
