"""Connector ``webhook`` of ``@goondan/base``: JSON POSTs become ``webhook_message`` events
(docs/base-connectors.md, "webhook").

Config: ``PORT`` (required; 0 picks a free port, see ``address.json``), ``HOST`` (127.0.0.1),
``PATH`` (``/``), ``MAX_BODY_BYTES`` (1 MiB), ``MAX_CONNECTIONS`` (1024),
``MAX_CONNECTIONS_PER_IP`` (128), ``REQUIRE_TIMESTAMP`` (``"false"``), ``ALLOW_UNSIGNED``
(``"false"``). Secret ``SIGNING_SECRET`` (aliases ``WEBHOOK_SECRET``,
``signingSecret``): required unless ``ALLOW_UNSIGNED`` is ``"true"`` (``E_CONNECTOR_UNSIGNED``
at start otherwise, :mod:`goondan.connectors.signing`). Every request needs
``X-Signature-256: sha256=<hex HMAC-SHA256>`` (``X-Hub-Signature-256`` is accepted too) of

* ``<X-Signature-Timestamp>.<raw body>`` when it sends ``X-Signature-Timestamp`` (Unix
  seconds, within five minutes of now: a captured request cannot be replayed later), or
* the raw body alone, the reference's scheme — refused with ``REQUIRE_TIMESTAMP: "true"``.

A timestamped request whose body has no ``id`` gets an id derived from its signature, so a
replay within the five minutes is a duplicate too (the inbox remembers ids).

Body: a JSON object ``{event|name, instanceKey, text|message, properties, id}``, all optional:
the event name defaults to ``webhook_message``, the key to ``webhook:default``, the text to
``""``; primitive ``properties`` are kept as strings; ``id`` (a string) is the event id, so a
sender retrying with the same id is accepted once.

Answers: 200 ``{accepted, eventName, instanceKey, id, duplicate}`` once ``ctx.emit`` returned
(the event is durable); 400 bad JSON (nested too deep included) or payload; 401 missing or bad
signature or timestamp; 404 other path; 405 other method; 413 body too large; 503 when the
event could not be stored. A refused request emits nothing and its body and the secret are
never logged.

Approvals (docs/approvals.md, "Webhook"): ``POST <PATH>/approvals/<id>`` (``/approvals/<id>``
when ``PATH`` is ``/``), signed like any request, with the body ``{"decision": "approve" |
"deny", "by": "<user id>", "args"?, "note"?, "reason"?}`` decides an approval of a turn that
came from this Connection. ``by`` must be one of config ``APPROVERS`` (403 otherwise; nobody
when unset); recorded ``via: webhook``. Answers 200 ``{ok, id, status, decided, decidedBy,
via}`` (``decided`` false: an earlier decision stands), 400 a bad body, 404 an unknown id.
"""

from __future__ import annotations

import time
from typing import Any

from goondan.connectors import ConnectorContext, ConnectorEvent
from goondan.connectors.signing import WEBHOOK_SECRET, signing_secret

from ._approvals import decide
from ._http import Request, Response
from ._settings import (
    DEFAULT_MAX_BODY_BYTES,
    BadBody,
    config_bool,
    config_int,
    emit_and_answer,
    parse_json_body,
    serve_http,
    setting,
    signature_matches,
    timestamp_skew,
)

__all__ = [
    "DEFAULT_EVENT", "DEFAULT_INSTANCE_KEY", "SIGNATURE_WINDOW_SECONDS", "WebhookReceiver", "run",
    "verify_signature",
]

DEFAULT_EVENT = "webhook_message"
DEFAULT_INSTANCE_KEY = "webhook:default"
SIGNATURE_HEADERS = ("x-signature-256", "x-hub-signature-256")
TIMESTAMP_HEADER = "x-signature-timestamp"
SIGNATURE_WINDOW_SECONDS = 5 * 60


def parse_payload(body: bytes) -> dict[str, Any]:
    """The JSON object in ``body``; raises :class:`BadBody` otherwise."""
    payload = parse_json_body(body)
    if not isinstance(payload, dict):
        raise BadBody("invalid_payload")
    return payload


def verify_signature(secret: str, request: Request, now: float, *,
                     require_timestamp: bool) -> tuple[str | None, str | None]:
    """``(reason, replay_id)``: ``reason`` is ``None`` when the request is signed by ``secret``
    (see the module docstring); ``replay_id`` names a timestamped request, for a body
    without ``id``."""
    given = next((request.header(h) for h in SIGNATURE_HEADERS if request.header(h)), "").strip()
    if not given:
        return "missing_signature", None
    timestamp = request.header(TIMESTAMP_HEADER).strip()
    if not timestamp:
        if require_timestamp:
            return "missing_timestamp", None
        signed = request.body
    elif (skew := timestamp_skew(timestamp, now)) is None:
        return "invalid_timestamp", None
    elif skew > SIGNATURE_WINDOW_SECONDS:
        return "stale_timestamp", None
    else:
        signed = timestamp.encode() + b"." + request.body
    if not signature_matches(secret, signed, given):
        return "invalid_signature", None
    return None, f"webhook-sig-{given[-64:].lower()[:32]}" if timestamp else None


def _optional_text(payload: dict[str, Any], *names: str) -> str | None:
    for name in names:
        value = payload.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise BadBody("invalid_payload")
        return value
    return None


def to_event(payload: dict[str, Any], default_id: str | None = None) -> ConnectorEvent:
    """The normaliser of docs/base-connectors.md ("webhook", "Body"); ``default_id`` is the
    event id when the body has none (else a new one is made)."""
    name = _optional_text(payload, "event", "name") or DEFAULT_EVENT
    key = _optional_text(payload, "instanceKey") or DEFAULT_INSTANCE_KEY
    event_id = _optional_text(payload, "id") or default_id
    text = ""
    for field in ("text", "message"):
        value = payload.get(field)
        if isinstance(value, str):
            text = value
            break
    properties = payload.get("properties")
    if properties is not None and not isinstance(properties, dict):
        raise BadBody("invalid_payload")
    return ConnectorEvent.text(name, text, instance_key=key, properties=properties, id=event_id)


class WebhookReceiver:
    """The request handler: signature, body, emit, answer (no I/O of its own)."""

    def __init__(self, ctx: ConnectorContext, secret: str | None, *,
                 require_timestamp: bool = False, path: str = "/") -> None:
        self.ctx = ctx
        self.secret = secret
        self.require_timestamp = require_timestamp
        self.approvals_prefix = path.rstrip("/") + "/approvals/"

    async def _decision(self, approval: str, body: bytes) -> Response:
        if self.secret is None:  # an unsigned Connection takes no decisions
            return Response.error(403, "unsigned")
        try:
            payload = parse_payload(body)
        except BadBody as exc:
            return Response.error(400, str(exc))
        decision = payload.get("decision")
        texts = [payload.get(k) for k in ("by", "note", "reason")]
        if (decision not in ("approve", "deny") or not approval or "/" in approval
                or any(t is not None and not isinstance(t, str) for t in texts)
                or not isinstance(payload.get("args", {}), dict)):
            return Response.error(400, "invalid_decision")
        status, answer = await decide(
            self.ctx, approval, approve=decision == "approve", user=str(payload.get("by") or ""),
            via="webhook", args=payload.get("args"), note=payload.get("note"),
            reason=payload.get("reason"))
        return Response.json(status, answer)

    async def __call__(self, request: Request) -> Response:
        replay_id = None
        if self.secret is not None:
            reason, replay_id = verify_signature(self.secret, request, time.time(),
                                                 require_timestamp=self.require_timestamp)
            if reason is not None:
                self.ctx.logger.warning("webhook request refused: %s", reason)
                return Response.error(401, reason)
        if request.path.startswith(self.approvals_prefix):
            return await self._decision(request.path.removeprefix(self.approvals_prefix),
                                        request.body)
        try:
            event = to_event(parse_payload(request.body), replay_id)
        except BadBody as exc:
            self.ctx.logger.warning("webhook request refused: %s", exc)
            return Response.error(400, str(exc))
        return await emit_and_answer(self.ctx, event)


async def run(ctx: ConnectorContext) -> None:
    """Serve webhook POSTs until cancelled."""
    port = config_int(ctx, "PORT", default=None, maximum=65535)
    max_body = config_int(ctx, "MAX_BODY_BYTES", default=DEFAULT_MAX_BODY_BYTES, minimum=1)
    path = setting(ctx, "PATH") or "/"
    require_timestamp = config_bool(ctx, "REQUIRE_TIMESTAMP", default=False)
    secret = signing_secret(ctx, WEBHOOK_SECRET)
    receiver = WebhookReceiver(ctx, secret, require_timestamp=require_timestamp, path=path)
    await serve_http(ctx, receiver, port=port, path=path, max_body_bytes=max_body,
                     prefixes=(receiver.approvals_prefix,))
