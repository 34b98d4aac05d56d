"""Approvals in the base connectors (docs/approvals.md, "Connectors"; docs/base-connectors.md).

Config ``APPROVERS``: comma-separated user ids of the people who may decide approvals through
this Connection (Slack user ids, Telegram user ids, the webhook body's ``by``). Unset or empty:
nobody may — every decision is refused (fail closed). A Connection without a signing secret
(``ALLOW_UNSIGNED``) takes no decisions at all.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import goondan.http as http
from goondan.connectors import ConnectorContext
from goondan.errors import GoondanError

from ._settings import setting

__all__ = ["approvers", "decide", "json_object", "post_json", "request_text"]

ARGS_PREVIEW_CHARS = 500
API_TIMEOUT_S = 10.0


def approvers(ctx: ConnectorContext) -> frozenset[str]:
    """The user ids of config ``APPROVERS`` (empty: nobody may decide)."""
    raw = setting(ctx, "APPROVERS") or ""
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def json_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else ``{}`` (a field of an outside payload)."""
    return value if isinstance(value, dict) else {}


def request_text(approval: dict[str, Any]) -> str:
    """The plain-text announcement of an approval request."""
    args = json.dumps(approval.get("args") or {}, ensure_ascii=False, sort_keys=True)
    if len(args) > ARGS_PREVIEW_CHARS:
        args = args[: ARGS_PREVIEW_CHARS - 3] + "..."
    lines = [f"Approval needed: {approval.get('tool')} {args}"]
    if approval.get("reason"):
        lines.append(f"Reason: {approval['reason']}")
    if approval.get("expiresAt"):
        lines.append(f"Expires: {approval['expiresAt']}")
    lines.append(f"Id: {approval.get('id')}")
    return "\n".join(lines)


async def decide(ctx: ConnectorContext, approval: str, *, approve: bool, user: str, via: str,
                 args: Any = None, note: str | None = None,
                 reason: str | None = None) -> tuple[int, dict[str, Any]]:
    """Decide ``approval`` for ``user`` when config ``APPROVERS`` allows it: ``(HTTP status,
    answer body)`` — 200 with ``{ok, id, status, decided, decidedBy, via}`` (``decided`` false
    when an earlier decision stands: a replayed press), 403 ``not_an_approver`` or
    ``forbidden``, 404 ``not_found``, 503 when the orchestrator cannot be reached."""
    if not user or user not in approvers(ctx):
        ctx.logger.warning("approval %s: %s is not an approver here; refused", approval,
                           user or "an unnamed sender")
        return 403, {"ok": False, "error": "not_an_approver"}
    try:
        result = await ctx.decide_approval(approval, approve=approve, by=user, via=via,
                                           args=args if isinstance(args, dict) else None,
                                           note=note, reason=reason)
    except GoondanError as exc:
        ctx.logger.warning("approval %s: decision refused: %s", approval, exc.message)
        if exc.code == "E_APPROVAL_NOT_FOUND":
            return 404, {"ok": False, "error": "not_found"}
        if exc.code == "E_APPROVAL_FORBIDDEN":
            return 403, {"ok": False, "error": "forbidden"}
        return 503, {"ok": False, "error": "not_decided"}
    return 200, {"ok": True, **result}


async def post_json(ctx: ConnectorContext, url: str, body: dict[str, Any], *, secret: str,
                    headers: dict[str, str] | None = None) -> dict[str, Any] | None:
    """POST ``body`` as JSON to a chat API (in a thread); its JSON object answer, or None
    after a logged failure (``secret``, the bot token, never appears in the log)."""

    def call() -> Any:
        pool = http.new_pool(num_pools=1, maxsize=1)
        try:
            response = pool.request(
                "POST", url, body=json.dumps(body).encode(),
                headers={"Content-Type": "application/json; charset=utf-8", **(headers or {})},
                timeout=http.timeout(API_TIMEOUT_S))
            return json.loads(response.data)
        finally:
            pool.clear()

    try:
        data = await asyncio.to_thread(call)
    except Exception as exc:  # a network failure or a non-JSON answer: logged, not raised
        reason = http.failure_of(exc)
        text = reason.reason if reason is not None else type(exc).__name__
        ctx.logger.warning("approval announcement failed: %s", text.replace(secret, "***"))
        return None
    return data if isinstance(data, dict) else None
