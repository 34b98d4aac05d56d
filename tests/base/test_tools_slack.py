"""Tool ``slack`` of ``@goondan/base`` against the fake Slack Web API."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, ToolFailure, load_entry_module
from tests.support.aio import run
from tests.support.fake_slack import FakeSlack, fake_slack

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
handlers = load_entry_module(TOOLS / "slack.py").handlers


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlack]:
    with fake_slack() as server:
        monkeypatch.setenv("SLACK_BOT_TOKEN", server.token)
        monkeypatch.setenv("SLACK_API_BASE_URL", server.api_url)
        yield server


def call(export: str, args: dict[str, Any], workdir: Path | None = None) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir or Path.cwd())
    result: dict[str, Any] = run(handlers[export](ctx, args))
    return result


def failure(export: str, args: dict[str, Any]) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, args)
    return info.value


def test_send_in_a_thread_then_read_edit_react_delete(fake: FakeSlack) -> None:
    sent = call("send", {"channelId": "C4", "text": "On it!", "threadTs": "1715599999.000100",
                         "unfurlLinks": False})
    assert sent == {"ok": True, "channelId": "C4", "messageTs": sent["messageTs"], "text": "On it!"}
    post = fake.calls_of("chat.postMessage")[0]
    assert post.params == {"channel": "C4", "text": "On it!", "thread_ts": "1715599999.000100",
                           "unfurl_links": False}
    assert post.authorization == f"Bearer {fake.token}" and post.content_type.startswith(
        "application/json"
    )
    ts = sent["messageTs"]

    read = call("read", {"channelId": "C4", "threadTs": "1715599999.000100"})
    assert (read["method"], read["count"], read["found"]) == ("conversations.replies", 1, True)
    assert read["messages"][0]["text"] == "On it!" and read["hasMore"] is False
    assert fake.calls_of("conversations.replies")[0].http_method == "GET"
    one = call("read", {"channelId": "C4", "messageTs": ts})
    assert (one["method"], one["count"], one["found"], one["messageTs"]) == (
        "conversations.history",
        1,
        True,
        ts,
    )
    assert fake.calls_of("conversations.history")[0].params["inclusive"] == "true"

    assert call("edit", {"channelId": "C4", "ts": ts, "text": "Done."}) == \
        {"ok": True, "channelId": "C4", "messageTs": ts, "edited": True}
    assert fake.messages["C4"][0]["text"] == "Done."
    reacted = call("react", {"channelId": "C4", "messageTs": ts, "emoji": ":white_check_mark:",
                             "emojis": ["eyes", "white_check_mark"]})
    assert reacted["emojis"] == ["white_check_mark", "eyes"] and reacted["reactionCount"] == 2
    assert [c.params["name"] for c in fake.calls_of("reactions.add")] == [
        "white_check_mark",
        "eyes",
    ]
    # already_reacted is fine
    again = call("react", {"channelId": "C4", "messageTs": ts, "emoji": "eyes"})
    assert again["reactionCount"] == 1
    assert call("delete", {"channelId": "C4", "timestamp": ts})["deleted"] is True
    assert fake.messages["C4"] == []


def test_api_errors_are_tool_failures_with_codes(
    fake: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    error = failure("send", {"channelId": "CNOPE", "text": "x"})
    assert (
        error.code == "E_BASE_SLACK_API"
        and error.message == "[slack] chat.postMessage failed: channel_not_found"
    )
    assert failure("edit", {"channelId": "C4", "messageTs": "1.2", "text": "x"}).message.endswith(
        "message_not_found"
    )
    assert (
        "invalid_auth"
        in failure("send", {"channelId": "C4", "text": "x", "token": "xoxb-wrong"}).message
    )
    fake.ratelimited = 1
    assert (
        "ratelimited (retry after 30 s)"
        in failure("send", {"channelId": "C4", "text": "x"}).message
    )
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    assert failure("send", {"channelId": "C4", "text": "x"}).code == "E_BASE_SLACK_TOKEN_MISSING"
    monkeypatch.setenv("BRAIN_SLACK_BOT_TOKEN", fake.token)
    assert call("send", {"channelId": "C4", "text": "fallback env"})["ok"] is True


@pytest.mark.parametrize(("export", "args", "needle"), [
    ("send", {"text": "x"}, "'channelId' is required"),
    ("send", {"channelId": "C4"}, "'text' is required"),
    ("send", {"channelId": "C4", "text": "x", "mrkdwn": "yes"}, "'mrkdwn' must be a boolean"),
    ("edit", {"channelId": "C4", "text": "x"}, "'messageTs' is required"),
    ("react", {"channelId": "C4", "messageTs": "1.1"}, "'emoji' or 'emojis' is required"),
    ("react", {"channelId": "C4", "messageTs": "1.1", "emoji": "thumbs up"}, "without whitespace"),
    ("read", {"channelId": "C4", "limit": 5000}, "at most 1000"),
    ("download_file", {}, "'url' is required"),
    ("send", {"channelId": "C4", "text": "x", "apiBaseUrl": "ftp://x"}, "http(s)"),
])
def test_invalid_inputs(fake: FakeSlack, export: str, args: dict[str, Any], needle: str) -> None:
    error = failure(export, args)
    assert error.code == "E_TOOL_INVALID_ARGS" and needle in error.message
    assert fake.calls == []


def test_download_file_with_the_bearer_token(fake: FakeSlack, tmp_path: Path) -> None:
    fake.files["cat.png"] = b"\x89PNG-data"
    out = call(
        "download_file", {"url": f"{fake.url}/files/cat.png", "savePath": "out/cat.png"}, tmp_path
    )
    assert out["sizeBytes"] == 9 and out["contentType"] == "image/png" and out["etag"] == '"e1"'
    assert out["base64"] == base64.b64encode(b"\x89PNG-data").decode()
    assert out["dataUrl"].startswith("data:image/png;base64,")
    assert (tmp_path / "out" / "cat.png").read_bytes() == b"\x89PNG-data"
    assert out["savedPath"] == str(tmp_path / "out" / "cat.png")
    small = call("download_file", {"fileUrl": f"{fake.url}/files/cat.png", "includeBase64": False,
                                  "includeDataUrl": False})
    assert small["base64"] is None and small["dataUrl"] is None and small["savedPath"] is None
    too_big = failure("download_file", {"url": f"{fake.url}/files/cat.png", "maxBytes": 4})
    assert too_big.code == "E_BASE_HTTP" and "maxBytes" in too_big.message
    assert (
        failure("download_file", {"url": f"{fake.url}/files/none.png"}).code == "E_BASE_SLACK_API"
    )


def test_network_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret-value")
    monkeypatch.setenv("SLACK_API_BASE_URL", f"http://127.0.0.1:{port}/api")
    error = failure("send", {"channelId": "C4", "text": "x"})
    assert error.code == "E_BASE_HTTP" and "xoxb-secret-value" not in error.message
