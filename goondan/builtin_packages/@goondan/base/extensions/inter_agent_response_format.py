"""Extension ``inter-agent-response-format`` of ``@goondan/base``: readable agent answers.

The reference's formatter (its name and config key; docs/base-extensions.md). A step middleware
that, before ``next()``, rewrites every user message whose metadata carries a valid
``__goondanInterAgentResponse`` record (``kind: inter_agent_response``, ``version: 1``, ``async:
true``, ids, ``status`` ok | error | timeout, ``receivedAt``) into text, with a ``replace``
event (same id, source ``{type: extension, extensionName: inter-agent-response-format}``,
``__goondanInterAgentResponseFormatted: true``):

    [inter-agent response] <from> -> <to> status=<status> requestId=<id>
    <the response (JSON when not a string)>  |  error(<code>): <message>
    requestMetadata=<…>                       (with includeRequestMetadata: true)

goondan's ``agents__request`` returns the answer as its tool result and nothing in the core
writes such messages, so the extension acts only on messages appended in that shape (e.g. by
your own extensions, or conversations carried over from the reference).
"""

from __future__ import annotations

import json
from typing import Any

from goondan.conversation.messages import Message, MessageEvent, MessageSource

from ._config import boolean

EXTENSION_NAME = "inter-agent-response-format"
METADATA_KEY = "__goondanInterAgentResponse"
FORMATTED_KEY = "__goondanInterAgentResponseFormatted"
_REQUIRED = ("requestId", "requestEventId", "fromAgentId", "toAgentId", "receivedAt")


def response_metadata(message: Message) -> dict[str, Any] | None:
    """The message's valid inter-agent response record, or ``None``."""
    if message.role != "user" or message.metadata.get(FORMATTED_KEY) is True:
        return None
    meta = message.metadata.get(METADATA_KEY)
    if not isinstance(meta, dict) or meta.get("kind") != "inter_agent_response" \
            or meta.get("version") != 1 or meta.get("async") is not True \
            or meta.get("status") not in ("ok", "error", "timeout"):
        return None
    if not all(isinstance(meta.get(k), str) and meta.get(k) for k in _REQUIRED):
        return None
    return meta


def _stringify(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def format_response(
    message: Message, meta: dict[str, Any], *, include_request_metadata: bool
) -> str:
    """The text that replaces the message."""
    lines = [f"[inter-agent response] {meta['fromAgentId']} -> {meta['toAgentId']} "
             f"status={meta['status']} requestId={meta['requestId']}"]
    content = message.data.get("content")
    if meta["status"] == "ok":
        payload = _stringify(content.get("response")) if isinstance(content, dict) else ""
        if payload:
            lines.append(payload)
    else:
        error = content.get("error") if isinstance(content, dict) else None
        error = error if isinstance(error, dict) else {}
        code = meta.get("errorCode") or error.get("code") or "AGENT_REQUEST_ERROR"
        text = meta.get("errorMessage") or error.get("message") or "agent request failed"
        lines.append(f"error({code}): {text}")
    if include_request_metadata and isinstance(meta.get("requestMetadata"), dict):
        lines.append(f"requestMetadata={_stringify(meta['requestMetadata'])}")
    return "\n".join(lines)


def register(api: Any) -> None:
    """Install the step middleware."""
    include = boolean(api, "includeRequestMetadata", False)

    async def format_responses(ctx: Any) -> Any:
        for message in list(ctx.conversation_state.next_messages):
            meta = response_metadata(message)
            if meta is None:
                continue
            text = format_response(message, meta, include_request_metadata=include)
            replacement = Message(
                id=message.id,
                data={"role": "user", "content": text},
                source=MessageSource("extension", extension_name=EXTENSION_NAME),
                metadata={**message.metadata, FORMATTED_KEY: True},
                created_at=message.created_at,
            )
            ctx.emit_message_event(MessageEvent.replace(message.id, replacement))
        return await ctx.next()

    api.pipeline.register("step", format_responses)
