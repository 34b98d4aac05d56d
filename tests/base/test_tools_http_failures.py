"""Network failures of the base tools' HTTP calls (``http-fetch`` and the chat tools'
``_web_api``), against real closed ports on 127.0.0.1: the message gives the operating system's
reason (the HTTP layer's failure kinds), not urllib3's connection repr, and never the token."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, ToolFailure, load_entry_module
from tests.support.aio import run

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)


def _closed_port() -> int:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _failure(
    tool: str, export: str, args: dict[str, Any], config: dict[str, Any] | None = None
) -> ToolFailure:
    handlers = load_entry_module(TOOLS / tool).handlers
    ctx = ToolContext(
        "agent", "key", "turn-1", "0" * 32, "call-1", None, Path.cwd(), config=config or {}
    )
    with pytest.raises(ToolFailure) as info:
        run(handlers[export](ctx, args))
    return info.value


def test_http_fetch_names_the_refusal_without_urllib3s_repr() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/page"
    error = _failure("http_fetch.py", "get", {"url": url}, {"allowHosts": ["127.0.0.1"]})
    assert error.code == "E_BASE_HTTP"
    assert error.message == f"request to {url} failed: Connection refused"


def test_a_chat_tool_names_the_refusal_without_urllib3s_repr_or_the_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret-value")
    monkeypatch.setenv("SLACK_API_BASE_URL", f"http://127.0.0.1:{_closed_port()}/api")
    error = _failure("slack.py", "send", {"channelId": "C4", "text": "x"})
    assert error.code == "E_BASE_HTTP" and error.message.endswith("failed: Connection refused")
    assert "xoxb-secret-value" not in error.message and "Connection(" not in error.message
