"""Connector ``discord`` of ``@goondan/base``: a Discord Interactions endpoint over HTTP
(docs/base-connectors.md, "discord").

Config: port ``DISCORD_WEBHOOK_PORT`` → ``PORT`` → 8789, path ``DISCORD_WEBHOOK_PATH`` →
``PATH`` → ``/``, ``HOST`` (127.0.0.1), ``MAX_BODY_BYTES`` (1 MiB). The application's public
key (64 hex digits, "Public Key" on the Developer Portal's General Information page): secrets
``DISCORD_PUBLIC_KEY`` / ``publicKey``, else config ``DISCORD_PUBLIC_KEY``. Every request needs
``X-Signature-Ed25519`` (hex) and ``X-Signature-Timestamp`` (Unix seconds, within five minutes
of now), the Ed25519 signature of ``timestamp + raw body``; anything else gets 401, as
Discord's endpoint check expects. Without a key the connector refuses to start
(``E_CONNECTOR_UNSIGNED``) unless the Connection's config says ``ALLOW_UNSIGNED: "true"``.

Interactions: a PING (type 1) is answered ``{"type": 1}``. An application command (type 2)
becomes ``slash_command`` with text ``/<name>`` followed by ``<option>=<value>`` for each
option (sub-commands flattened as ``/<name> <sub>``), answered ``{"type": 5}`` (deferred: the
agent answers later with ``discord__reply``). A message component (type 3) becomes
``component_interaction`` with text = its ``custom_id`` (selected values follow as
``values=a,b``), and a modal submission (type 5) becomes ``component_interaction`` with the
``custom_id`` and one ``<field>=<value>`` line a text input; both are answered ``{"type": 6}``
(deferred update). Autocomplete (type 4) is answered with no choices. The event id is the
interaction's id, so a repeated delivery is accepted once. Properties (strings):
``interaction_id, application_id, interaction_token, channel_id, guild_id, user_id, username``
and ``command_name`` or ``custom_id``. Instance key ``discord:<channelId>``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from goondan.connectors import ConnectorContext, ConnectorEvent
from goondan.connectors.signing import DISCORD_KEY, signing_secret

from ._ed25519 import verify
from ._http import Request, Response
from ._settings import (
    DEFAULT_MAX_BODY_BYTES,
    BadBody,
    config_error,
    config_int,
    emit_and_answer,
    parse_json_body,
    serve_http,
    setting,
    timestamp_skew,
)

__all__ = ["DEFAULT_PORT", "SIGNATURE_WINDOW_SECONDS", "DiscordReceiver", "run", "to_event",
           "verify_request"]

DEFAULT_PORT = 8789
SIGNATURE_WINDOW_SECONDS = 5 * 60
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT, AUTOCOMPLETE, MODAL_SUBMIT = 1, 2, 3, 4, 5
PONG, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE_MESSAGE, AUTOCOMPLETE_RESULT = 1, 5, 6, 8


def verify_request(public_key: bytes, request: Request, now: float) -> str | None:
    """``None`` when Discord signed the request within the window, else the reason."""
    timestamp = request.header("x-signature-timestamp").strip()
    signature = request.header("x-signature-ed25519").strip()
    if not timestamp or not signature:
        return "missing_signature"
    skew = timestamp_skew(timestamp, now)
    try:
        raw_signature = bytes.fromhex(signature)
    except ValueError:
        return "invalid_signature"
    if skew is None:
        return "invalid_signature"
    if skew > SIGNATURE_WINDOW_SECONDS:
        return "stale_timestamp"
    if not verify(public_key, timestamp.encode() + request.body, raw_signature):
        return "invalid_signature"
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _option_words(options: Any) -> list[str]:
    """``<name>=<value>`` for each option; a sub-command (group) contributes its name first."""
    words: list[str] = []
    for option in options if isinstance(options, list) else []:
        if not isinstance(option, dict) or not _text(option.get("name")):
            continue
        if "value" in option:
            value = option["value"]
            shown = json.dumps(value) if isinstance(value, bool) or value is None else str(value)
            words.append(f"{option['name']}={shown}")
        else:  # sub-command or sub-command group
            words.append(option["name"])
            words.extend(_option_words(option.get("options")))
    return words


def _component_lines(data: dict[str, Any]) -> list[str]:
    values = data.get("values")
    if isinstance(values, list) and values:
        return [f"values={','.join(str(v) for v in values)}"]
    lines: list[str] = []
    rows = data.get("components")
    for row in rows if isinstance(rows, list) else []:  # a modal's action rows of text inputs
        items = _object(row).get("components")
        for item in items if isinstance(items, list) else []:
            if _text(_object(item).get("custom_id")):
                lines.append(f"{item['custom_id']}={item.get('value') or ''}")
    return lines


def to_event(interaction: dict[str, Any]) -> ConnectorEvent | None:
    """The event for an application command, component or modal interaction; ``None`` for
    any other type, or when the interaction names no channel."""
    kind = interaction.get("type")
    data = interaction.get("data")
    channel = _text(interaction.get("channel_id")) or _text(
        _object(interaction.get("channel")).get("id")
    )
    interaction_id = _text(interaction.get("id"))
    if (
        kind not in (APPLICATION_COMMAND, MESSAGE_COMPONENT, MODAL_SUBMIT)
        or not isinstance(data, dict)
        or channel is None
        or interaction_id is None
    ):
        return None
    # A guild interaction carries member.user, a direct message user.
    user = _object(_object(interaction.get("member")).get("user")) or _object(
        interaction.get("user")
    )
    properties: dict[str, str] = {"interaction_id": interaction_id, "channel_id": channel}
    for key, value in (("application_id", interaction.get("application_id")),
                       ("interaction_token", interaction.get("token")),
                       ("guild_id", interaction.get("guild_id")),
                       ("user_id", user.get("id")), ("username", user.get("username"))):
        text = _text(value)
        if text is not None:
            properties[key] = text
    if kind == APPLICATION_COMMAND:
        name = _text(data.get("name"))
        if name is None:
            return None
        properties["command_name"] = name
        text, event_name = (
            " ".join([f"/{name}", *_option_words(data.get("options"))]),
            "slash_command",
        )
    else:
        custom_id = _text(data.get("custom_id"))
        if custom_id is None:
            return None
        properties["custom_id"] = custom_id
        text, event_name = "\n".join([custom_id, *_component_lines(data)]), "component_interaction"
    return ConnectorEvent.text(event_name, text, instance_key=f"discord:{channel}",
                               properties=properties, id=f"discord-{interaction_id}")


class DiscordReceiver:
    """The request handler for Interactions deliveries."""

    def __init__(self, ctx: ConnectorContext, public_key: bytes | None) -> None:
        self.ctx = ctx
        self.public_key = public_key

    async def __call__(self, request: Request) -> Response:
        if self.public_key is not None:
            reason = verify_request(self.public_key, request, time.time())
            if reason is not None:
                self.ctx.logger.warning("discord request refused: %s", reason)
                return Response.error(401, reason)
        try:
            interaction = parse_json_body(request.body)
        except BadBody as exc:
            return Response.error(400, str(exc))
        if not isinstance(interaction, dict):
            return Response.error(400, "invalid_payload")
        kind = interaction.get("type")
        if kind == PING:
            return Response.json(200, {"type": PONG})
        if kind == AUTOCOMPLETE:
            return Response.json(200, {"type": AUTOCOMPLETE_RESULT, "data": {"choices": []}})
        event = to_event(interaction)
        if event is None:
            return Response.error(400, "unsupported_interaction")
        # Not stored (503): Discord shows the user that the interaction failed.
        deferred = (
            DEFERRED_CHANNEL_MESSAGE if kind == APPLICATION_COMMAND else DEFERRED_UPDATE_MESSAGE
        )
        return await emit_and_answer(self.ctx, event, accepted={"type": deferred})


def public_key(ctx: ConnectorContext) -> bytes | None:
    """The configured public key; ``None`` only when none is set and ``ALLOW_UNSIGNED`` is
    ``"true"`` (else ``E_CONNECTOR_UNSIGNED``). A key that is not 32 bytes of hex is a config
    error."""
    raw = signing_secret(ctx, DISCORD_KEY)
    if raw is None:
        return None
    try:
        key = bytes.fromhex(raw.strip())
    except ValueError:
        key = b""
    if len(key) != 32:
        raise config_error(ctx, "DISCORD_PUBLIC_KEY must be 64 hexadecimal digits",
                           "copy the Public Key from the application's General Information page")
    return key


async def run(ctx: ConnectorContext) -> None:
    """Serve Discord interactions until cancelled."""
    key = public_key(ctx)
    port = config_int(ctx, "DISCORD_WEBHOOK_PORT", "PORT", default=DEFAULT_PORT, maximum=65535)
    max_body = config_int(ctx, "MAX_BODY_BYTES", default=DEFAULT_MAX_BODY_BYTES, minimum=1)
    path = setting(ctx, "DISCORD_WEBHOOK_PATH", "PATH") or "/"
    await serve_http(ctx, DiscordReceiver(ctx, key), port=port, path=path, max_body_bytes=max_body)
