"""Issue 27, item 3 (replay): the webhook's plain signature covers no time, so a captured
request replays forever. A request may now sign ``<X-Signature-Timestamp>.<body>``; the
timestamp must be within five minutes, ``REQUIRE_TIMESTAMP: "true"`` refuses the plain scheme,
and a replay inside the window is a duplicate that starts nothing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import ConnectorError
from tests.support.connector_e2e import sign_webhook
from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    running,
)

webhook = load_connector("webhook")
SECRET = "replay-test-secret"


def timestamped(body: bytes, timestamp: int, secret: str = SECRET) -> dict[str, str]:
    """The documented scheme: HMAC-SHA256 of ``f"{timestamp}.".encode() + body``."""
    digest = hmac.new(
        secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    return {"X-Signature-256": f"sha256={digest}", "X-Signature-Timestamp": str(timestamp)}


def context(tmp_path: Path, inbox: RecordingInbox, **config: str) -> Any:
    return make_context(tmp_path, inbox, connector="webhook", config={"PORT": "0", **config},
                        secrets={"SIGNING_SECRET": SECRET})


def test_a_captured_old_request_is_refused_and_a_fresh_one_accepted(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox)) as url:
            payload = b'{"text": "transfer the funds"}'
            now = int(time.time())
            assert (await post(url, payload, timestamped(payload, now - 3600))) == \
                (401, {"ok": False, "error": "stale_timestamp"})
            assert (await post(url, payload, timestamped(payload, now + 3600)))[0] == 401
            assert (await post(url, payload, timestamped(payload, now)))[0] == 200
            assert len(inbox.events) == 1

    asyncio.run(body())


def test_the_timestamp_is_covered_by_the_signature(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox)) as url:
            payload = b'{"text": "x"}'
            now = int(time.time())
            old = timestamped(payload, now - 3600)
            # an attacker refreshing the timestamp of a captured request breaks the signature
            forged = {**old, "X-Signature-Timestamp": str(now)}
            assert (await post(url, payload, forged)) == (
                401,
                {"ok": False, "error": "invalid_signature"},
            )
            # a plain body signature does not pass as a timestamped one
            plain = {
                "X-Signature-256": sign_webhook(SECRET, payload),
                "X-Signature-Timestamp": str(now),
            }
            assert (await post(url, payload, plain))[1]["error"] == "invalid_signature"
            for bad in ("soon", "-5", "1e9", "\u00b9\u00b2\u00b3"):
                headers = {
                    "X-Signature-256": sign_webhook(SECRET, payload),
                    "X-Signature-Timestamp": bad,
                }
                assert (await post(url, payload, headers))[1]["error"] == "invalid_timestamp", bad
            assert inbox.calls == 0

    asyncio.run(body())


def test_require_timestamp_refuses_the_plain_scheme(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox, REQUIRE_TIMESTAMP="true")) as url:
            payload = b'{"text": "x"}'
            assert (
                await post(url, payload, {"X-Signature-256": sign_webhook(SECRET, payload)})
            ) == (401, {"ok": False, "error": "missing_timestamp"})
            assert (await post(url, payload, timestamped(payload, int(time.time()))))[0] == 200
        # without it the reference's plain scheme stays accepted
        async with running(webhook, context(tmp_path, inbox)) as url:
            assert (await post(url, payload, {"X-Signature-256": sign_webhook(SECRET, payload)}))[
                0
            ] == 200
        assert len(inbox.events) == 2

    asyncio.run(body())


def test_require_timestamp_must_be_true_or_false(tmp_path: Path) -> None:
    with pytest.raises(ConnectorError) as info:
        asyncio.run(webhook.run(context(tmp_path, RecordingInbox(), REQUIRE_TIMESTAMP="yes")))
    assert (
        info.value.code == "E_BASE_CONNECTOR_CONFIG" and "REQUIRE_TIMESTAMP" in info.value.message
    )


def test_a_replay_within_the_window_starts_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox)) as url:
            payload = b'{"text": "ship it"}'  # no "id": the signature names the request
            headers = timestamped(payload, int(time.time()))
            first = await post(url, payload, headers)
            replay = await post(url, payload, headers)
            assert first[0] == replay[0] == 200
            assert first[1]["duplicate"] is False and replay[1]["duplicate"] is True
            assert first[1]["id"] == replay[1]["id"]
            # the same text sent again, signed again a second later, is a new message
            again = await post(url, payload, timestamped(payload, int(time.time()) + 1))
            assert again[1]["duplicate"] is False
            assert len(inbox.events) == 2
            # a body id still names the event
            with_id = json.dumps({"id": "order-9", "text": "x"}).encode()
            answer = await post(url, with_id, timestamped(with_id, int(time.time())))
            assert answer[1]["id"] == "order-9"

    asyncio.run(body())
