"""Connector ``github`` of ``@goondan/base``: GitHub repository webhooks become events
(docs/base-connectors.md, "github").

Config: ``PORT`` (required), ``HOST`` (127.0.0.1), ``PATH`` (``/``), ``MAX_BODY_BYTES``
(10 MiB), ``ALLOW_UNSIGNED`` (``"false"``). Secret ``SIGNING_SECRET`` (aliases
``WEBHOOK_SECRET``, ``signingSecret``): required unless ``ALLOW_UNSIGNED`` is ``"true"``
(``E_CONNECTOR_UNSIGNED`` at start otherwise); ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256
of the raw body>`` is required (401 otherwise).

``X-GitHub-Event`` selects the event: ``push`` → ``github_push`` (text: the head commit's
message), ``pull_request`` → ``github_pull_request`` (the PR title), ``issues`` →
``github_issue`` (the issue title), ``issue_comment`` → ``github_issue_comment`` (the comment
body). Properties ``event, repo, ref, action, number, sender``; instance key
``github:<owner/repo>``; the event id is ``X-GitHub-Delivery``, so a redelivery is accepted
once. ``ping`` is answered 200 ``{ok, ping}``; other events 200 ``{ok, ignored}``; neither
emits.
"""

from __future__ import annotations

from typing import Any

from goondan.connectors import ConnectorContext, ConnectorEvent
from goondan.connectors.signing import WEBHOOK_SECRET, signing_secret

from ._http import Request, Response
from ._settings import (
    BadBody,
    config_int,
    emit_and_answer,
    parse_json_body,
    serve_http,
    setting,
    signature_matches,
)

__all__ = ["EVENTS", "WebhookReceiver", "run", "to_event"]

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
EVENTS = {
    "push": "github_push",
    "pull_request": "github_pull_request",
    "issues": "github_issue",
    "issue_comment": "github_issue_comment",
}


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _push_message(payload: dict[str, Any]) -> str:
    message = _get(payload, "head_commit", "message")
    if isinstance(message, str):
        return message
    commits = payload.get("commits")
    if isinstance(commits, list) and commits and isinstance(commits[-1], dict):
        return _text(commits[-1].get("message"))
    return ""


def to_event(kind: str, payload: dict[str, Any], delivery: str | None) -> ConnectorEvent:
    """The event for a supported ``X-GitHub-Event`` ``kind`` (a key of :data:`EVENTS`)."""
    number: Any = None
    ref: Any = payload.get("ref")
    if kind == "push":
        text = _push_message(payload)
    elif kind == "pull_request":
        text = _text(_get(payload, "pull_request", "title"))
        number = payload.get("number", _get(payload, "pull_request", "number"))
        ref = _get(payload, "pull_request", "head", "ref")
    elif kind == "issues":
        text = _text(_get(payload, "issue", "title"))
        number = _get(payload, "issue", "number")
    else:
        text = _text(_get(payload, "comment", "body"))
        number = _get(payload, "issue", "number")
    repo = _get(payload, "repository", "full_name")
    repo = repo if isinstance(repo, str) and repo else "unknown"
    properties = {
        "event": kind, "repo": repo, "ref": ref, "action": payload.get("action"),
        "number": number if isinstance(number, int) and not isinstance(number, bool) else None,
        "sender": _get(payload, "sender", "login"),
    }
    return ConnectorEvent.text(
        EVENTS[kind],
        text,
        instance_key=f"github:{repo}",
        properties={k: v for k, v in properties.items() if isinstance(v, str | int)},
        id=delivery or None,
    )


class WebhookReceiver:
    """The request handler for GitHub deliveries."""

    def __init__(self, ctx: ConnectorContext, secret: str | None) -> None:
        self.ctx = ctx
        self.secret = secret

    async def __call__(self, request: Request) -> Response:
        if self.secret is not None:
            signature = request.header("x-hub-signature-256")
            if not signature:
                self.ctx.logger.warning("github delivery refused: missing signature")
                return Response.error(401, "missing_signature")
            if not signature_matches(self.secret, request.body, signature):
                self.ctx.logger.warning("github delivery refused: invalid signature")
                return Response.error(401, "invalid_signature")
        kind = request.header("x-github-event").strip()
        if not kind:
            return Response.error(400, "missing_event")
        try:
            payload = parse_json_body(request.body)
        except BadBody as exc:
            return Response.error(400, str(exc))
        if not isinstance(payload, dict):
            return Response.error(400, "invalid_payload")
        if kind == "ping":
            return Response.json(200, {"ok": True, "ping": True})
        if kind not in EVENTS:
            return Response.json(200, {"ok": True, "ignored": True})
        delivery = request.header("x-github-delivery").strip() or None
        return await emit_and_answer(self.ctx, to_event(kind, payload, delivery))


async def run(ctx: ConnectorContext) -> None:
    """Serve GitHub webhook deliveries until cancelled."""
    port = config_int(ctx, "PORT", default=None, maximum=65535)
    max_body = config_int(ctx, "MAX_BODY_BYTES", default=DEFAULT_MAX_BODY_BYTES, minimum=1)
    path = setting(ctx, "PATH") or "/"
    secret = signing_secret(ctx, WEBHOOK_SECRET)
    await serve_http(
        ctx, WebhookReceiver(ctx, secret), port=port, path=path, max_body_bytes=max_body
    )
