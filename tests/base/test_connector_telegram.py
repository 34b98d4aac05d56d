"""Connector ``telegram-polling`` of ``@goondan/base`` against the fake Bot API."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.connectors import ConnectorEvent, EmitReceipt
from goondan.errors import ConnectorError
from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    running,
    wait_for,
)
from tests.support.fake_telegram import FakeTelegram, fake_telegram

telegram = load_connector("telegram_polling")


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    with fake_telegram() as server:
        yield server


def context(state: Path, inbox: RecordingInbox, fake: FakeTelegram, **config: str) -> Any:
    return make_context(
        state,
        inbox,
        connector="telegram-polling",
        config={
            "TELEGRAM_API_BASE_URL": fake.url,
            "TELEGRAM_POLL_TIMEOUT_SECONDS": "1",
            "TELEGRAM_RETRY_DELAY_MS": "50",
            **config,
        },
        secrets={"TELEGRAM_BOT_TOKEN": fake.token},
    )


def test_messages_become_events_and_bots_and_empty_messages_are_skipped(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    first = fake.add_text(42, "hello")
    fake.add_text(42, "I am a bot", is_bot=True)
    fake.add_update({"message": {"message_id": 3, "chat": {"id": 42, "type": "private"},
                                 "from": {"id": 77, "is_bot": False}, "sticker": {"file_id": "s"}}})
    fake.add_update({"edited_message": {"message_id": 1, "chat": {"id": 42}, "text": "edit"}})
    fake.add_update(
        {
            "message": {
                "message_id": 5,
                "date": 1,
                "chat": {"id": -100, "type": "group", "title": "Team"},
                "from": {"id": 77, "is_bot": False},
                "caption": "look",
                "photo": [
                    {"file_id": "small", "file_unique_id": "s1", "width": 90, "height": 90},
                    {
                        "file_id": "big",
                        "file_unique_id": "b1",
                        "width": 800,
                        "height": 800,
                        "file_size": 5000,
                    },
                ],
            }
        }
    )
    last = fake.add_update({"message": {"message_id": 6, "chat": {"id": 42, "type": "private"},
                                        "from": {"id": 77, "is_bot": False},
                                        "document": {"file_id": "doc1", "file_name": "a.png",
                                                     "mime_type": "image/png", "file_size": 10}}})

    async def body() -> None:
        inbox = RecordingInbox()
        async with running(telegram, context(tmp_path, inbox, fake), http=False):
            await wait_for(lambda: len(inbox.events) == 3, "three events")
            await wait_for(
                lambda: (
                    (tmp_path / "telegram-offset.json").exists()
                    and json.loads((tmp_path / "telegram-offset.json").read_text())["offset"]
                    == last + 1
                ),
                "the offset to pass the last update",
            )
        text, photo, document = inbox.events
        assert (text.name, text.instance_key, text.message["text"]) == (
            "telegram_message",
            "telegram:42",
            "hello",
        )
        assert text.id == f"telegram-update-{first}"
        assert text.properties == {
            "update_id": str(first),
            "chat_id": "42",
            "chat_type": "private",
            "chat_username": "alice",
            "message_id": str(first + 1),
            "date": "1700000000",
            "from_id": "77",
            "from_username": "alice",
            "from_first_name": "Alice",
        }
        assert photo.instance_key == "telegram:-100"
        assert photo.message["text"] == "look\n[telegram_photo] file_id=big"
        assert (
            photo.properties["photo_file_id"] == "big" and photo.properties["has_photo"] == "true"
        )
        assert photo.properties["chat_title"] == "Team"
        assert document.message["text"] == "[telegram_image_document] file_id=doc1"
        assert document.properties["image_document_mime_type"] == "image/png"

    asyncio.run(body())


def test_updates_are_consumed_exactly_once_across_a_restart(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        ids = [fake.add_text(1, "one"), fake.add_text(1, "two")]
        async with running(telegram, context(tmp_path, inbox, fake), http=False):
            await wait_for(lambda: len(inbox.events) == 2, "the first two events")
        # the connector is stopped (cancelled) mid-poll; more updates arrive meanwhile
        ids += [fake.add_text(1, "three"), fake.add_text(1, "four")]
        async with running(telegram, context(tmp_path, inbox, fake), http=False):
            await wait_for(lambda: len(inbox.events) == 4, "the next two events")
            await wait_for(
                lambda: any(
                    int(c.params.get("offset", 0)) == ids[-1] + 1
                    for c in fake.calls_of("getUpdates")
                ),
                "a poll confirming the last",
            )
        assert [e.message["text"] for e in inbox.events] == ["one", "two", "three", "four"]
        assert inbox.calls == 4  # not even a duplicate was re-emitted
        offsets = [c.params.get("offset") for c in fake.calls_of("getUpdates")]
        assert offsets[0] is None and ids[1] + 1 in offsets

    asyncio.run(body())


def test_a_crash_between_emit_and_offset_write_is_deduplicated(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    class CrashAfterStore(RecordingInbox):
        async def emit(self, event: ConnectorEvent) -> EmitReceipt:
            receipt = await super().emit(event)
            if self.calls == 1:
                raise RuntimeError("process died after the durable append")
            return receipt

    async def body() -> None:
        inbox = CrashAfterStore()
        fake.add_text(5, "only once")
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(telegram.run(context(tmp_path, inbox, fake)), 15)
        assert not (tmp_path / "telegram-offset.json").exists()
        async with running(telegram, context(tmp_path, inbox, fake), http=False):
            await wait_for(lambda: inbox.calls == 2, "the update to be handed over again")
            await wait_for(lambda: (tmp_path / "telegram-offset.json").exists(), "the offset")
        # the second was a duplicate
        assert [e.message["text"] for e in inbox.events] == ["only once"]

    asyncio.run(body())


def test_retry_after_is_honoured(tmp_path: Path, fake: FakeTelegram) -> None:
    async def body() -> None:
        fake.throttle(retry_after=1)
        fake.add_text(9, "after the wait")
        inbox = RecordingInbox()
        async with running(telegram, context(tmp_path, inbox, fake), http=False):
            await wait_for(lambda: len(inbox.events) == 1, "the event after the 429")
        polls = fake.calls_of("getUpdates")
        assert polls[0].status == 429 and polls[1].status == 200
        # the retry delay is 50 ms, so only retry_after explains the gap
        assert polls[1].at - polls[0].at >= 0.95

    asyncio.run(body())


def test_errors_are_logged_and_retried_without_leaking_the_token(
        tmp_path: Path, fake: FakeTelegram, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]

    async def body() -> None:
        inbox = RecordingInbox()
        ctx = context(tmp_path, inbox, fake, TELEGRAM_API_BASE_URL=f"http://127.0.0.1:{dead}")
        async with running(telegram, ctx, http=False):
            await wait_for(lambda: caplog.text.count("retrying in") >= 2, "two retries")
        wrong = context(tmp_path, inbox, fake)
        wrong.secrets["TELEGRAM_BOT_TOKEN"] = "999:wrong-token"
        async with running(telegram, wrong, http=False):
            await wait_for(lambda: "(401): Unauthorized" in caplog.text, "the 401 warning")

    with caplog.at_level(logging.WARNING):
        asyncio.run(body())
    assert fake.token not in caplog.text and "wrong-token" not in caplog.text


def test_configuration_errors(tmp_path: Path, fake: FakeTelegram) -> None:
    inbox = RecordingInbox()
    no_token = make_context(tmp_path, inbox, connector="telegram-polling", config={})
    with pytest.raises(ConnectorError, match="bot token"):
        asyncio.run(telegram.run(no_token))
    bad = context(tmp_path, inbox, fake, TELEGRAM_POLL_TIMEOUT_SECONDS="soon")
    with pytest.raises(ConnectorError, match="integer"):
        asyncio.run(telegram.run(bad))


def test_initial_offset_applies_until_an_offset_is_stored(
    tmp_path: Path, fake: FakeTelegram
) -> None:
    skipped = fake.add_text(3, "old")
    fake.add_text(3, "new")

    async def body() -> None:
        inbox = RecordingInbox()
        ctx = context(tmp_path, inbox, fake, TELEGRAM_INITIAL_OFFSET=str(skipped + 1))
        async with running(telegram, ctx, http=False):
            await wait_for(lambda: len(inbox.events) == 1, "one event")
        assert inbox.events[0].message["text"] == "new"

    asyncio.run(body())
