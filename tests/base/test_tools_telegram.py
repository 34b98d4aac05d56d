"""Tool ``telegram`` of ``@goondan/base`` against the fake Telegram Bot API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from goondan.tools import ToolContext, ToolFailure, load_entry_module, validate_args
from tests.support.aio import run
from tests.support.fake_telegram import FakeTelegram, fake_telegram

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
handlers = load_entry_module(TOOLS / "telegram.py").handlers


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTelegram]:
    with fake_telegram() as server:
        monkeypatch.setenv("TELEGRAM_BOT_TOKEN", server.token)
        monkeypatch.setenv("TELEGRAM_API_BASE_URL", server.url)
        yield server


def call(export: str, args: dict[str, Any], workdir: Path | None = None) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir or Path.cwd())
    result: dict[str, Any] = run(handlers[export](ctx, args))
    return result


def failure(export: str, args: dict[str, Any]) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, args)
    return info.value


def test_send_edit_delete_react_and_chat_action(fake: FakeTelegram) -> None:
    sent = call(
        "send",
        {
            "chatId": "42",
            "text": "*hi*",
            "parseMode": "MARKDOWN-V2",
            "replyToMessageId": 7,
            "allowSendingWithoutReply": True,
            "disableWebPagePreview": True,
            "disableNotification": True,
        },
    )
    assert sent["ok"] is True and sent["chatId"] == 42 and sent["text"] == "*hi*"
    params = fake.calls_of("sendMessage")[0].params
    assert params == {
        "chat_id": 42,
        "text": "*hi*",
        "parse_mode": "MarkdownV2",
        "disable_notification": True,
        "link_preview_options": {"is_disabled": True},
        "reply_parameters": {"message_id": 7, "allow_sending_without_reply": True},
    }
    message_id = sent["messageId"]
    assert call(
        "edit", {"chatId": 42, "messageId": message_id, "text": "edited", "parseMode": "html"}
    ) == {"ok": True, "chatId": 42, "messageId": message_id, "edited": True}
    assert fake.calls_of("editMessageText")[0].params["parse_mode"] == "HTML"
    reacted = call(
        "react",
        {
            "chatId": 42,
            "messageId": message_id,
            "emoji": "👍",
            "emojis": ["🔥", "👍"],
            "isBig": True,
        },
    )
    assert reacted == {"ok": True, "chatId": 42, "messageId": message_id, "cleared": False,
                       "emojis": ["👍", "🔥"], "reactionCount": 2}
    assert fake.calls_of("setMessageReaction")[0].params["reaction"] == [
        {"type": "emoji", "emoji": "👍"}, {"type": "emoji", "emoji": "🔥"}]
    cleared = call("react", {"chatId": 42, "messageId": message_id, "clear": True})
    assert (
        cleared["cleared"] is True
        and fake.calls_of("setMessageReaction")[1].params["reaction"] == []
    )
    assert call("set_chat_action", {"chatId": "@news", "status": "upload-photo"}) == \
        {"ok": True, "chatId": "@news", "status": "upload-photo", "action": "upload_photo"}
    assert fake.calls_of("sendChatAction")[0].params == {
        "chat_id": "@news",
        "action": "upload_photo",
    }
    assert call("delete", {"chatId": -100, "messageId": str(message_id)})["deleted"] is True


def test_api_errors_and_token_lookup(fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    error = failure("send", {"chatId": 404, "text": "x"})
    assert error.code == "E_BASE_TELEGRAM_API"
    assert error.message == "[telegram] sendMessage failed (400): Bad Request: chat not found"
    fake.throttle(retry_after=7)
    assert "(429): Too Many Requests: retry after 7 (retry after 7 s)" in failure(
        "send", {"chatId": 1, "text": "x"}).message
    unauthorized = failure("send", {"chatId": 1, "text": "x", "token": "1:bad"})
    assert "(401): Unauthorized" in unauthorized.message and "1:bad" not in unauthorized.message
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN")
    assert failure("send", {"chatId": 1, "text": "x"}).code == "E_BASE_TELEGRAM_TOKEN_MISSING"
    monkeypatch.setenv("BRAIN_TELEGRAM_BOT_TOKEN", fake.token)
    assert call("send", {"chatId": 1, "text": "x"})["ok"] is True


@pytest.mark.parametrize(("export", "args", "needle"), [
    ("send", {"text": "x"}, "'chatId' is required"),
    ("send", {"chatId": True, "text": "x"}, "string or an integer"),
    ("send", {"chatId": 1, "text": "x", "parseMode": "rtf"}, "'parseMode'"),
    ("edit", {"chatId": 1, "messageId": 0, "text": "x"}, "integer > 0"),
    ("react", {"chatId": 1, "messageId": 1}, "clear: true is required"),
    ("set_chat_action", {"chatId": 1, "status": "dancing"}, "'status' must be one of"),
    ("download_file", {}, "'fileId' is required"),
    ("download_file", {"fileId": "a", "maxBytes": 30_000_000}, "at most 20000000"),
])
def test_invalid_inputs(fake: FakeTelegram, export: str, args: dict[str, Any], needle: str) -> None:
    error = failure(export, args)
    assert error.code == "E_TOOL_INVALID_ARGS" and needle in error.message
    assert fake.calls == []


def test_download_file_masks_the_token(fake: FakeTelegram, tmp_path: Path) -> None:
    fake.files["ph1"] = b"JPEGDATA"
    out = call(
        "download_file",
        {"file_id": "ph1", "outputPath": "photo.jpg", "includeBase64": False},
        tmp_path,
    )
    assert out["filePath"] == "photos/ph1.jpg" and out["sizeBytes"] == 8 and out["fileSize"] == 8
    assert out["downloadUrl"] == f"{fake.url}/file/bot<token>/photos/ph1.jpg"
    assert fake.token not in str(out)
    assert (tmp_path / "photo.jpg").read_bytes() == b"JPEGDATA"
    assert out["base64"] is None and out["dataUrl"] == "data:image/jpeg;base64,SlBFR0RBVEE="
    assert failure("download_file", {"fileId": "missing"}).message.endswith("invalid file_id")


def test_parse_mode_is_case_insensitive_through_the_declared_schema(fake: FakeTelegram) -> None:
    """base-package.md: ``parseMode`` is case-insensitive (``HTML``) — the Tool's declared
    parameters (checked before the handler runs) must not refuse what the handler accepts."""
    manifest = TOOLS.parent / "goondan.yaml"
    [tool] = [d for d in yaml.safe_load_all(manifest.read_text(encoding="utf-8"))
              if d.get("kind") == "Tool" and d["metadata"]["name"] == "telegram"]
    schemas = {e["name"]: e["parameters"] for e in tool["spec"]["exports"]}
    for mode, wire in (("HTML", "HTML"), ("Markdown", "Markdown"), ("MarkdownV2", "MarkdownV2"),
                       ("Markdown-V2", "MarkdownV2"), ("html", "HTML")):
        args = {"chatId": 42, "text": "<b>hi</b>", "parseMode": mode}
        assert validate_args(schemas["send"], args) is None, mode
        assert validate_args(schemas["edit"], {**args, "messageId": 1}) is None, mode
        call("send", args)
        assert fake.calls_of("sendMessage")[-1].params["parse_mode"] == wire
    assert (
        failure("send", {"chatId": 42, "text": "x", "parseMode": "rtf"}).code
        == "E_TOOL_INVALID_ARGS"
    )
