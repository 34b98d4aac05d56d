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
"""

from __future__ import annotations

import hmac
import time
from typing import Any

from goondan.connectors import ConnectorContext, ConnectorEvent
from goondan.connectors.signing import SLACK_SECRET, signing_secret

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

    async def __call__(self, request: Request) -> Response:
        if self.secret is not None:
            reason = verify_signature(self.secret, request, time.time())
            if reason is not None:
                self.ctx.logger.warning("slack request refused: %s", reason)
                return Response.error(401, reason)
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
    await serve_http(ctx, SlackReceiver(ctx, secret), port=port, path=path, max_body_bytes=max_body)
