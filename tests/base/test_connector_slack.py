"""Connector ``slack`` of ``@goondan/base``: Events API deliveries signed like Slack signs them."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    running,
)

slack = load_connector("slack")
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def signed(body: bytes, *, timestamp: int | None = None, secret: str = SECRET,
           retry: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(
        secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256
    ).hexdigest()
    headers = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}",
               "Content-Type": "application/json"}
    if retry is not None:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    return headers


def envelope(event: dict[str, Any], event_id: str = "Ev0001") -> bytes:
    return json.dumps({"token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
                       "event_id": event_id, "event_time": 1715600000, "event": event}).encode()


MENTION = {"type": "app_mention", "user": "U2", "text": "<@U3> deploy please",
           "ts": "1715600000.001500", "channel": "C4", "event_ts": "1715600000.001500"}


def context(tmp_path: Path, inbox: RecordingInbox, **config: str) -> Any:
    return make_context(tmp_path, inbox, connector="slack",
                        config={"SLACK_WEBHOOK_PORT": "0", **config},
                        secrets={"SLACK_SIGNING_SECRET": SECRET})


def test_url_verification_answers_the_challenge(tmp_path: Path) -> None:
    async def body() -> None:
        async with running(slack, context(tmp_path, RecordingInbox())) as url:
            raw = json.dumps(
                {"token": "t", "challenge": "3eZbrw1aB", "type": "url_verification"}
            ).encode()
            assert await post(url, raw, signed(raw)) == (200, {"challenge": "3eZbrw1aB"})

    asyncio.run(body())


def test_app_mention_in_a_thread_and_retries_are_deduplicated(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(
            slack, context(tmp_path, inbox, SLACK_WEBHOOK_PATH="/slack/events")
        ) as url:
            raw = envelope({**MENTION, "thread_ts": "1715599999.000100"})
            status, answer = await post(url + "/slack/events", raw, signed(raw))
            assert status == 200 and answer["id"] == "Ev0001" and answer["duplicate"] is False
            event = inbox.events[0]
            assert event.name == "app_mention"
            assert event.instance_key == "slack:C4:1715599999.000100"
            assert event.message["text"] == "<@U3> deploy please"
            assert event.properties == {"channel_id": "C4", "ts": "1715600000.001500",
                                        "thread_ts": "1715599999.000100", "user_id": "U2"}
            for retry in (1, 2):
                status, answer = await post(url + "/slack/events", raw, signed(raw, retry=retry))
                assert status == 200 and answer["duplicate"] is True
            assert len(inbox.events) == 1

    asyncio.run(body())


def test_messages_become_message_im_with_file_references(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(slack, context(tmp_path, inbox)) as url:
            message = {"type": "message", "channel": "D9", "user": "U2", "text": "look",
                       "ts": "1.000200", "subtype": "file_share", "channel_type": "im",
                       "files": [{"name": "cat.png", "mimetype": "image/png",
                                  "url_private": "https://files.slack.com/cat.png"},
                                 {"name": "notes.txt", "mimetype": "text/plain",
                                  "url_private": "https://files.slack.com/notes.txt"}]}
            raw = envelope(message, "Ev0002")
            assert (await post(url, raw, signed(raw)))[0] == 200
            event = inbox.events[0]
            assert (event.name, event.instance_key) == ("message_im", "slack:D9:1.000200")
            assert event.message["text"] == ("look\n[slack_image] https://files.slack.com/cat.png\n"
                                             "[slack_file:notes.txt] https://files.slack.com/notes.txt")
            assert event.properties["attachment_count"] == "2"
            assert event.properties["image_url"] == "https://files.slack.com/cat.png"
            assert event.properties["file_name"] == "cat.png"
            assert event.properties["subtype"] == "file_share"

    asyncio.run(body())


@pytest.mark.parametrize("event", [
    {**MENTION, "bot_id": "B1"},
    {"type": "message", "subtype": "bot_message", "channel": "C4", "ts": "1.1", "text": "beep"},
    {"type": "message", "subtype": "message_changed", "channel": "C4", "ts": "1.1",
     "message": {"text": "edited"}},
    {"type": "reaction_added", "user": "U2", "reaction": "thumbsup"},
    {"type": "message", "text": "no channel"},
])
def test_bot_messages_and_other_events_are_ignored(tmp_path: Path, event: dict[str, Any]) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(slack, context(tmp_path, inbox)) as url:
            raw = envelope(event)
            assert await post(url, raw, signed(raw)) == (200, {"ok": True, "ignored": True})
            assert inbox.calls == 0

    asyncio.run(body())


def test_signatures_replays_and_malformed_bodies_are_refused(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(slack, context(tmp_path, inbox)) as url:
            raw = envelope(MENTION)
            now = int(time.time())
            cases = [
                ({"Content-Type": "application/json"}, 401, "missing_signature"),
                (signed(raw, secret="other"), 401, "invalid_signature"),
                (signed(raw, timestamp=now - 301), 401, "stale_timestamp"),  # a replay
                (signed(raw, timestamp=now + 400), 401, "stale_timestamp"),
                ({**signed(raw), "X-Slack-Request-Timestamp": "soon"}, 401, "invalid_timestamp"),
                (
                    {**signed(raw), "X-Slack-Request-Timestamp": str(now - 1)},
                    401,
                    "invalid_signature",
                ),
            ]
            for headers, status, error in cases:
                assert await post(url, raw, headers) == (status, {"ok": False, "error": error})
            # inside the window
            assert (await post(url, raw, signed(raw, timestamp=now - 200)))[0] == 200
            assert (await post(url, b"{oops", signed(b"{oops")))[0] == 400
            assert (await post(url, raw, signed(raw), method="GET"))[0] == 405
            assert (await post(url + "/x", raw, signed(raw)))[0] == 404
            assert inbox.calls == 1

    asyncio.run(body())


def test_port_and_secret_fallbacks(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        ctx = make_context(tmp_path, inbox, connector="slack",
                           config={"PORT": "0", "SLACK_SIGNING_SECRET": SECRET, "PATH": "/p"})
        async with running(slack, ctx) as url:
            raw = envelope(MENTION)
            assert (await post(url + "/p", raw, signed(raw)))[0] == 200
            assert (await post(url + "/p", raw, {"Content-Type": "application/json"}))[0] == 401

    asyncio.run(body())


def test_a_timestamp_too_large_for_a_float_is_refused_not_a_server_error(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(slack, context(tmp_path, inbox)) as url:
            raw = envelope(MENTION)
            huge = "1" + "0" * 400  # an int, but now - int(...) overflows a float
            headers = {**signed(raw), "X-Slack-Request-Timestamp": huge}
            assert await post(url, raw, headers) == (
                401,
                {"ok": False, "error": "invalid_timestamp"},
            )
            assert inbox.calls == 0

    asyncio.run(body())
