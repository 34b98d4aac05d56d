"""Tool ``discord`` of ``@goondan/base`` against the fake Discord API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, ToolFailure, load_entry_module
from tests.support.aio import run
from tests.support.fake_discord import FakeDiscord, fake_discord

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
handlers = load_entry_module(TOOLS / "discord.py").handlers
INTERACTION_TOKEN = "aW50ZXJhY3Rpb24tdG9rZW4-secret-part"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscord]:
    monkeypatch.delenv("DISCORD_BOT_TOKEN", raising=False)
    monkeypatch.delenv("DISCORD_TOKEN", raising=False)
    with fake_discord() as server:
        server.interaction_tokens.add(INTERACTION_TOKEN)
        monkeypatch.setenv("DISCORD_API_BASE_URL", server.api)
        yield server


def call(export: str, args: dict[str, Any]) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, Path.cwd())
    result: dict[str, Any] = run(handlers[export](ctx, args))
    return result


def failure(export: str, args: dict[str, Any]) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, args)
    return info.value


def test_reply_edits_the_deferred_answer_or_posts_a_followup(fake: FakeDiscord) -> None:
    edited = call(
        "reply",
        {"applicationId": "1042", "interactionToken": INTERACTION_TOKEN, "content": "Done."},
    )
    assert edited == {"ok": True, "messageId": edited["messageId"], "channelId": "C-original",
                      "content": "Done.", "followup": False}
    more = call(
        "reply",
        {
            "applicationId": "1042",
            "interactionToken": INTERACTION_TOKEN,
            "text": "Also…",
            "followup": True,
            "ephemeral": True,
        },
    )
    assert more["followup"] is True and more["channelId"] == "C-followup"
    assert [(m, p, b, a) for m, p, b, a in fake.calls] == [
        (
            "PATCH",
            f"/api/v10/webhooks/1042/{INTERACTION_TOKEN}/messages/@original",
            {"content": "Done."},
            "",
        ),
        (
            "POST",
            f"/api/v10/webhooks/1042/{INTERACTION_TOKEN}",
            {"content": "Also…", "flags": 64},
            "",
        ),
    ]


def test_send_posts_to_a_channel_with_the_bot_token(
    fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = failure("send", {"channelId": "C1", "content": "hi"})
    assert missing.code == "E_BASE_DISCORD_TOKEN_MISSING"
    monkeypatch.setenv("DISCORD_BOT_TOKEN", fake.bot_token)
    sent = call("send", {"channelId": "C1", "content": "hi", "replyToMessageId": "55"})
    assert sent == {"ok": True, "messageId": sent["messageId"], "channelId": "C1", "content": "hi"}
    assert fake.calls[-1] == (
        "POST",
        "/api/v10/channels/C1/messages",
        {"content": "hi", "message_reference": {"message_id": "55"}},
        f"Bot {fake.bot_token}",
    )


def test_api_errors_name_the_status_and_never_the_tokens(
    fake: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> None:
    expired = failure(
        "reply", {"applicationId": "1042", "interactionToken": "expired-token-xyz", "content": "x"}
    )
    assert (expired.code, expired.message) == (
        "E_BASE_DISCORD_API",
        "[discord] reply failed: HTTP 404 Unknown Webhook",
    )
    assert "15 minutes" in (expired.suggestion or "")
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "wrong-bot-token-1234567890")
    refused = failure("send", {"channelId": "C1", "content": "x"})
    assert refused.message == "[discord] send failed: HTTP 401 401: Unauthorized"
    fake.throttle(1.5)
    throttled = failure(
        "reply", {"applicationId": "1042", "interactionToken": INTERACTION_TOKEN, "content": "x"}
    )
    assert throttled.message.endswith("HTTP 429 You are being rate limited. (retry after 1.5 s)")
    for error in (expired, refused, throttled):
        text = f"{error.message} {error.suggestion}"
        assert (
            "wrong-bot-token" not in text
            and INTERACTION_TOKEN not in text
            and "expired-token" not in text
        )


def test_inputs_are_checked_before_any_request(fake: FakeDiscord) -> None:
    assert failure("reply", {"applicationId": "1", "content": "x"}).code == "E_TOOL_INVALID_ARGS"
    assert failure("reply", {"applicationId": "1", "interactionToken": INTERACTION_TOKEN,
                             "content": "x" * 2001}).code == "E_TOOL_INVALID_ARGS"
    assert (
        failure(
            "reply",
            {
                "applicationId": "1",
                "interactionToken": INTERACTION_TOKEN,
                "content": "x",
                "followup": "yes",
            },
        ).code
        == "E_TOOL_INVALID_ARGS"
    )
    assert fake.calls == []
    # An id cannot step out of its path segment.
    call(
        "reply",
        {
            "applicationId": "../channels/C1/messages",
            "interactionToken": INTERACTION_TOKEN,
            "content": "x",
        },
    )
    assert fake.calls[-1][1].startswith("/api/v10/webhooks/..%2Fchannels%2FC1%2Fmessages/")
