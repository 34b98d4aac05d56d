"""Tool ``discord`` of ``@goondan/base``: answer Discord interactions and post to channels
through the Discord HTTP API (docs/base-package.md, "discord").

Exports:
- ``reply``: answer an interaction the ``discord`` connector received. By default it edits the
  deferred response (``PATCH /webhooks/<applicationId>/<interactionToken>/messages/@original``);
  ``followup: true`` posts a further message instead (``POST /webhooks/<applicationId>/
  <interactionToken>``). The interaction token (valid 15 minutes) authorises it; no bot token.
- ``send``: post to a channel (``POST /channels/<channelId>/messages``) with the bot token:
  input ``token``, else ``$DISCORD_BOT_TOKEN``, ``$DISCORD_TOKEN`` (none:
  ``E_BASE_DISCORD_TOKEN_MISSING``).

The API base URL is input ``apiBaseUrl``, else ``$DISCORD_API_BASE_URL``, else
``https://discord.com/api/v10``; ``send`` with the bot token from the environment refuses an
input ``apiBaseUrl`` on another origin (``_web_api.api_base_url``). An HTTP error answer fails the
call with ``E_BASE_DISCORD_API`` and ``[discord] <export> failed: HTTP <status> <message>``; network
failures are ``E_BASE_HTTP`` / ``E_BASE_HTTP_TIMEOUT``. Tokens never appear in a result or
an error.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from goondan.tools import ToolContext, ToolFailure

from . import _web_api as api
from ._inputs import invalid, required_text

TOKEN_ENV = ("DISCORD_BOT_TOKEN", "DISCORD_TOKEN")
DEFAULT_BASE_URL = "https://discord.com/api/v10"
EPHEMERAL = 1 << 6
MAX_CONTENT = 2000


def _content(input: dict[str, Any]) -> str:
    text = required_text(input, "content" if "content" in input else "text")
    if len(text) > MAX_CONTENT:
        raise invalid(f"the message is {len(text)} characters; Discord takes at most {MAX_CONTENT}")
    return text


def _segment(input: dict[str, Any], name: str) -> str:
    """A required id or token, quoted for use as one URL path segment."""
    return quote(required_text(input, name, allow_blank=False).strip(), safe="")


def _flag(input: dict[str, Any], name: str) -> bool:
    value = input.get(name, False)
    if not isinstance(value, bool):
        raise invalid(f"'{name}' must be a boolean")
    return value


async def _call(export: str, method: str, url: str, *, body: dict[str, Any], secret: str,
                headers: dict[str, str], input: dict[str, Any]) -> dict[str, Any]:
    timeout = api.positive_int(input, "timeoutMs", api.DEFAULT_TIMEOUT_MS)
    assert timeout is not None
    response = await api.request(method, url, headers=headers, timeout_ms=timeout, secret=secret,
                                 json_body=body)
    data = response.data if isinstance(response.data, dict) else {}
    if response.status >= 400:
        message = str(data.get("message") or "")
        if secret:
            message = message.replace(secret, "***")
        retry = data.get("retry_after") or response.headers.get("retry-after")
        hint = f" (retry after {retry} s)" if response.status == 429 and retry else ""
        raise ToolFailure(
            f"[discord] {export} failed: HTTP {response.status} {message}{hint}".rstrip(),
            code="E_BASE_DISCORD_API",
            suggestion=_suggestion(response.status),
        )
    return data


def _suggestion(status: int) -> str:
    if status in (401, 403):
        return "Check DISCORD_BOT_TOKEN and the bot's permissions in that channel."
    if status == 404:
        return ("Check the ids; an interaction token expires 15 minutes after the interaction, "
                "after which answer with discord__send instead.")
    if status == 429:
        return "Wait before calling Discord again."
    return "See Discord's documentation of this status."


def _message(data: dict[str, Any], content: str) -> dict[str, Any]:
    return {"ok": True, "messageId": data.get("id"), "channelId": data.get("channel_id"),
            "content": data.get("content", content)}


async def reply(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """Edit the deferred answer of an interaction, or post a follow-up (``followup: true``)."""
    application = _segment(input, "applicationId")
    token = required_text(input, "interactionToken", allow_blank=False).strip()
    content = _content(input)
    followup = _flag(input, "followup")
    # The interaction token is the model's own input, not the operator's: any API will do.
    base = api.api_base_url(input, "DISCORD_API_BASE_URL", DEFAULT_BASE_URL, sends_env_token=False)
    url = f"{base}/webhooks/{application}/{quote(token, safe='')}"
    body: dict[str, Any] = {"content": content}
    if followup:
        if _flag(input, "ephemeral"):
            body["flags"] = EPHEMERAL
        data = await _call("reply", "POST", url, body=body, secret=token, headers={}, input=input)
    else:
        data = await _call("reply", "PATCH", f"{url}/messages/@original", body=body, secret=token,
                           headers={}, input=input)
    return {**_message(data, content), "followup": followup}


async def send(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """Post a message to a channel with the bot token."""
    channel = _segment(input, "channelId")
    content = _content(input)
    token = api.find_token(input, TOKEN_ENV, "discord", "E_BASE_DISCORD_TOKEN_MISSING")
    base = api.api_base_url(input, "DISCORD_API_BASE_URL", DEFAULT_BASE_URL)
    body: dict[str, Any] = {"content": content}
    reply_to = input.get("replyToMessageId")
    if reply_to is not None:
        if not isinstance(reply_to, str) or not reply_to.strip():
            raise invalid("'replyToMessageId' must be a non-empty string")
        body["message_reference"] = {"message_id": reply_to.strip()}
    data = await _call("send", "POST", f"{base}/channels/{channel}/messages", body=body,
                       secret=token, headers={"Authorization": f"Bot {token}"}, input=input)
    return _message(data, content)


handlers = {"reply": reply, "send": send}
