"""Connector ``telegram-polling``: a network failure of ``getUpdates`` is one warning with the
operating system's reason (the HTTP layer's failure kinds), without urllib3's connection repr
and without the bot token (a segment of every Bot API path)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.connector_harness import RecordingInbox, load_connector, make_context

telegram = load_connector("telegram_polling")
TOKEN = "123456:telegram-SECRET-token"


def test_a_refused_get_updates_gives_the_os_reason_without_the_token(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    ctx = make_context(tmp_path, RecordingInbox(), connector="telegram-polling",
                       config={"TELEGRAM_API_BASE_URL": f"http://127.0.0.1:{dead}",
                               "TELEGRAM_REQUEST_TIMEOUT_MS": "2000"},
                       secrets={"TELEGRAM_BOT_TOKEN": TOKEN})
    poller = telegram.TelegramPoller(ctx)
    with pytest.raises(telegram._ApiError) as caught:
        poller._get_updates()
    assert str(caught.value) == "getUpdates failed: Connection refused"
