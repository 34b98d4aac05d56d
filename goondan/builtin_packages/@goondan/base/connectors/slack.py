"""Connector ``slack`` of ``@goondan/base``: the Slack Events API over HTTP
(docs/base-connectors.md, "slack").

Config: port ``SLACK_WEBHOOK_PORT`` → ``PORT`` → 8787, path ``SLACK_WEBHOOK_PATH`` → ``PATH``
→ ``/``, ``HOST`` (127.0.0.1), ``MAX_BODY_BYTES`` (1 MiB), ``ALLOW_UNSIGNED`` (``"false"``).
Signing secret: secrets ``SLACK_SIGNING_SECRET`` / ``SIGNING_SECRET`` / ``WEBHOOK_SECRET`` /
``signingSecret``, else config ``SLACK_SIGNING_SECRET``; required unless ``ALLOW_UNSIGNED`` is
``"true"`` (``E_CONNECTOR_UNSIGNED`` at start otherwise). Each request needs
``X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<raw body>">`` with
``X-Slack-Request-Timestamp`` within five minutes of now; anything else (a replay included)
gets 401. The connection limits are ``MAX_CONNECTIONS`` / ``MAX_CONNECTIONS_PER_IP`` (see
``_http.py``), as for ``webhook`` and ``github``.

``url_verification`` is answered with its ``challenge``. ``event_callback`` envelopes whose
event is ``app_mention`` become ``app_mention`` events and plain ``message`` events become
``message_im``; bot messages (``bot_id`` or subtype ``bot_message``), edits and deletions
(``message_changed``, ``message_deleted``) and other types are answered
``{"ok": true, "ignored": true}``. The event id is the envelope's ``event_id``, so Slack's
retries (``X-Slack-Retry-Num``) are accepted once. Instance key
``slack:<channel>:<thread_ts or ts>``.

Approvals (docs/approvals.md, "Slack"): a turn of this Connection that waits for a person is
announced in its thread (``chat.postMessage`` with an ``actions`` block holding Approve / Deny
buttons whose ``value`` is the approval id) with the bot token (secrets ``SLACK_BOT_TOKEN`` /
``BOT_TOKEN``; API base ``SLACK_API_BASE_URL``, default ``https://slack.com/api``). A press
comes back as a signed interactivity request (``application/x-www-form-urlencoded``,
``payload=<block_actions JSON>``) on the same path; only users of config ``APPROVERS`` may
decide (403 otherwise; nobody when unset), recorded ``via: slack:<user id>``. A replayed press
changes nothing. After a decision the message is updated to say who decided.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any
from urllib.parse import parse_qs

from goondan.connectors import ConnectorContext, ConnectorEvent
from goondan.connectors.signing import SLACK_SECRET, signing_secret

from ._approvals import decide, json_object, post_json, request_text
from ._http import Request, Response
from ._settings import (
    DEFAULT_MAX_BODY_BYTES,
    BadBody,
    config_int,
    emit_and_answer,
    hmac_sha256_hex,
    parse_json_body,
    serve_http,
    setting,
    timestamp_skew,
)

__all__ = ["DEFAULT_PORT", "SIGNATURE_WINDOW_SECONDS", "SlackReceiver", "run", "to_event"]

DEFAULT_PORT = 8787
SIGNATURE_WINDOW_SECONDS = 5 * 60
_SKIPPED_SUBTYPES = frozenset({"bot_message", "message_changed", "message_deleted"})
DEFAULT_API_BASE_URL = "https://slack.com/api"
TOKEN_SECRETS = ("SLACK_BOT_TOKEN", "BOT_TOKEN")
APPROVE_ACTION, DENY_ACTION = "goondan_approve", "goondan_deny"


def approval_blocks(approval: dict[str, Any]) -> list[dict[str, Any]]:
    """The Block Kit blocks of an approval request: its text and the two buttons."""
    ident = str(approval.get("id"))
    return [
        {"type": "section", "text": {"type": "plain_text", "text": request_text(approval)}},
        {"type": "actions", "block_id": f"goondan_approval_{ident}", "elements": [
            {"type": "button", "action_id": APPROVE_ACTION, "value": ident, "style": "primary",
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": DENY_ACTION, "value": ident, "style": "danger",
             "text": {"type": "plain_text", "text": "Deny"}},
        ]},
    ]


def interaction_payload(request: Request) -> dict[str, Any] | None:
    """The JSON ``payload`` field of a form-encoded interactivity request, or None."""
    if "application/x-www-form-urlencoded" not in request.header("content-type").lower():
        return None
    try:
        fields = parse_qs(request.body.decode("utf-8"), strict_parsing=False)
        payload = json.loads(fields.get("payload", [""])[0])
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def verify_signature(secret: str, request: Request, now: float) -> str | None:
    """``None`` when the request is signed by ``secret`` within the window, else the reason."""
    timestamp = request.header("x-slack-request-timestamp").strip()
    signature = request.header("x-slack-signature").strip()
    if not timestamp or not signature:
        return "missing_signature"
    skew = timestamp_skew(timestamp, now)
    if skew is None:
        return "invalid_timestamp"
    if skew > SIGNATURE_WINDOW_SECONDS:
        return "stale_timestamp"
    base = b"v0:" + timestamp.encode() + b":" + request.body
    expected = "v0=" + hmac_sha256_hex(secret, base)
    if not hmac.compare_digest(expected.encode(), signature.encode("ascii", "replace")):
        return "invalid_signature"
    return None


def _files(event: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Reference lines and properties for the files attached to a message."""
    files = [f for f in event.get("files") or [] if isinstance(f, dict)]
    lines: list[str] = []
    props: dict[str, Any] = {}
    for item in files:
        url = item.get("url_private") or item.get("permalink") or ""
        name = item.get("name") or item.get("title") or "file"
        if not isinstance(url, str) or not url:
            continue
        mimetype = item.get("mimetype")
        if isinstance(mimetype, str) and mimetype.startswith("image/"):
            lines.append(f"[slack_image] {url}")
            props.setdefault("image_url", url)
        else:
            lines.append(f"[slack_file:{name}] {url}")
        props.setdefault("file_url", url)
        props.setdefault("file_name", name)
    if files:
        props["attachment_count"] = len(files)
    return lines, props


def to_event(envelope: dict[str, Any]) -> ConnectorEvent | None:
    """The event for an ``event_callback`` envelope, or ``None`` when it is ignored."""
    event = envelope.get("event")
    if not isinstance(event, dict):
        return None
    kind = event.get("type")
    if kind == "app_mention":
        name = "app_mention"
    elif kind == "message":
        name = "message_im"
    else:
        return None
    subtype = event.get("subtype")
    if event.get("bot_id") or subtype in _SKIPPED_SUBTYPES:
        return None
    channel, ts = event.get("channel"), event.get("ts")
    if not isinstance(channel, str) or not channel or not isinstance(ts, str) or not ts:
        return None
    thread_ts = event.get("thread_ts") if isinstance(event.get("thread_ts"), str) else None
    lines, file_props = _files(event)
    text = event.get("text") if isinstance(event.get("text"), str) else ""
    text = "\n".join([text, *lines]) if text and lines else text or "\n".join(lines)
    properties: dict[str, Any] = {"channel_id": channel, "ts": ts, **file_props}
    if thread_ts:
        properties["thread_ts"] = thread_ts
    if isinstance(event.get("user"), str):
        properties["user_id"] = event["user"]
    if isinstance(subtype, str):
        properties["subtype"] = subtype
    event_id = envelope.get("event_id")
    event_id = event_id if isinstance(event_id, str) and event_id else f"slack-{channel}-{ts}"
    return ConnectorEvent.text(name, text, instance_key=f"slack:{channel}:{thread_ts or ts}",
                               properties=properties, id=event_id)


class SlackReceiver:
    """The request handler for Events API deliveries."""

    def __init__(self, ctx: ConnectorContext, secret: str | None) -> None:
        self.ctx = ctx
        self.secret = secret
        self.token = next((ctx.secrets[n].strip() for n in TOKEN_SECRETS
                           if ctx.secrets.get(n, "").strip()), None)
        base = setting(ctx, "SLACK_API_BASE_URL", secrets=True) or DEFAULT_API_BASE_URL
        self.api_base = base.rstrip("/")
        self._tasks: set[asyncio.Task[Any]] = set()

    async def _api(self, method: str, body: dict[str, Any]) -> dict[str, Any] | None:
        if self.token is None:
            self.ctx.logger.warning("slack %s skipped: no bot token (secret SLACK_BOT_TOKEN)",
                                    method)
            return None
        body = {k: v for k, v in body.items() if v is not None}
        data = await post_json(self.ctx, f"{self.api_base}/{method}", body, secret=self.token,
                               headers={"Authorization": f"Bearer {self.token}"})
        if data is not None and not data.get("ok"):
            self.ctx.logger.warning("slack %s failed: %s", method, data.get("error"))
        return data

    async def announce(self, approval: dict[str, Any], properties: dict[str, Any]) -> None:
        """Post the approval request with its buttons in the conversation's thread."""
        channel = properties.get("channel_id")
        thread = properties.get("thread_ts") or properties.get("ts")
        if not channel:
            return
        await self._api("chat.postMessage", {"channel": channel, "thread_ts": thread,
                                             "text": request_text(approval),
                                             "blocks": approval_blocks(approval)})

    async def _button(self, payload: dict[str, Any]) -> Response:
        actions = [a for a in payload.get("actions") or [] if isinstance(a, dict)
                   and a.get("action_id") in (APPROVE_ACTION, DENY_ACTION)]
        if payload.get("type") != "block_actions" or not actions:
            return Response.json(200, {"ok": True, "ignored": True})
        action = actions[0]
        user = json_object(payload.get("user"))
        user_id = str(user.get("id") or "")
        approve = action.get("action_id") == APPROVE_ACTION
        status, body = await decide(self.ctx, str(action.get("value") or ""), approve=approve,
                                    user=user_id, via=f"slack:{user_id}")
        channel = json_object(payload.get("channel"))
        message = json_object(payload.get("message"))
        if status == 200 and body.get("decided") and channel.get("id") and message.get("ts"):
            text = f"{body.get('status', 'decided').capitalize()} by <@{user_id}>"
            task = asyncio.ensure_future(self._api("chat.update", {
                "channel": channel["id"], "ts": message["ts"], "text": text, "blocks": []}))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return Response.json(status, body)

    async def __call__(self, request: Request) -> Response:
        if self.secret is not None:
            reason = verify_signature(self.secret, request, time.time())
            if reason is not None:
                self.ctx.logger.warning("slack request refused: %s", reason)
                return Response.error(401, reason)
        payload = interaction_payload(request)
        if payload is not None:
            if self.secret is None:  # an unsigned Connection takes no decisions
                return Response.error(403, "unsigned")
            return await self._button(payload)
        try:
            envelope = parse_json_body(request.body)
        except BadBody as exc:
            return Response.error(400, str(exc))
        if not isinstance(envelope, dict):
            return Response.error(400, "invalid_payload")
        kind = envelope.get("type")
        if kind == "url_verification":
            challenge = envelope.get("challenge")
            if not isinstance(challenge, str):
                return Response.error(400, "invalid_payload")
            return Response.json(200, {"challenge": challenge})
        event = to_event(envelope) if kind == "event_callback" else None
        if event is None:
            return Response.json(200, {"ok": True, "ignored": True})
        if request.header("x-slack-retry-num"):
            self.ctx.logger.info("slack retry %s of %s (%s)", request.header("x-slack-retry-num"),
                                 event.id, request.header("x-slack-retry-reason") or "no reason")
        return await emit_and_answer(self.ctx, event)


async def run(ctx: ConnectorContext) -> None:
    """Serve Slack Events API deliveries until cancelled."""
    port = config_int(ctx, "SLACK_WEBHOOK_PORT", "PORT", default=DEFAULT_PORT, maximum=65535)
    max_body = config_int(ctx, "MAX_BODY_BYTES", default=DEFAULT_MAX_BODY_BYTES, minimum=1)
    path = setting(ctx, "SLACK_WEBHOOK_PATH", "PATH") or "/"
    secret = signing_secret(ctx, SLACK_SECRET)
    receiver = SlackReceiver(ctx, secret)
    ctx.on_approval(receiver.announce)
    await serve_http(ctx, receiver, port=port, path=path, max_body_bytes=max_body)
