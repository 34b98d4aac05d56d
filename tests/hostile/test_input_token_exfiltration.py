"""Hostile input (issue 27): the model cannot send the operator's bot token to a host it names.

The chat tools take their bot token from the environment; the model only chooses the tool
arguments, and those may be steered by a Slack message or a web page. Repros, each against a
second loopback server standing in for the attacker, which records whether the token reached it:

* ``slack__download_file`` sent ``Authorization: Bearer <SLACK_BOT_TOKEN>`` to any URL;
* an input ``apiBaseUrl`` pointed ``slack``, ``telegram`` and ``discord`` calls at any host, the
  environment's token going along (Telegram's in the URL path, the others' in a header);
* redirects were followed with no host check (Telegram's token is in the path the API server
  redirects, and urllib3 only drops the header, after having contacted the other host).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, ToolFailure, load_entry_module
from tests.support.aio import run
from tests.support.loopback import loopback_server, url_of

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
slack = load_entry_module(TOOLS / "slack.py")
telegram = load_entry_module(TOOLS / "telegram.py")
discord = load_entry_module(TOOLS / "discord.py")
TOOL = {"slack": slack.handlers, "telegram": telegram.handlers, "discord": discord.handlers}

SLACK_TOKEN = "xoxb-env-secret-slack-0001"
TELEGRAM_TOKEN = "123456:env-secret-telegram-0002"
DISCORD_TOKEN = "env-secret-discord-0003"
TOKENS = (SLACK_TOKEN, TELEGRAM_TOKEN, DISCORD_TOKEN)
OK = {"ok": True, "result": {"message_id": 7, "file_id": "F1", "file_path": "photos/a.jpg"},
      "channel": "C4", "ts": "1715600000.000100", "id": "900", "channel_id": "C4"}


@dataclass
class Host:
    """A loopback HTTP server answering ``routes`` (exact path → status, headers, body) and
    ``OK`` as JSON elsewhere; it records every request's method, path and Authorization."""

    url: str = ""
    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def redirect(self, path: str, to: str, status: int = 302) -> None:
        self.routes[path] = (status, {"Location": to}, b"")

    def got_a_token(self) -> bool:
        with self.lock:
            return any(t in path or t in auth for _, path, auth in self.seen for t in TOKENS)


def _handler(host: Host) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            if length:
                self.rfile.read(length)
            with host.lock:
                host.seen.append((self.command, self.path, self.headers.get("Authorization", "")))
            status, headers, body = host.routes.get(
                self.path, (200, {"Content-Type": "application/json"}, json.dumps(OK).encode()))
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def _serve() -> Iterator[Host]:
    host = Host()
    with loopback_server(_handler(host)) as server:
        host.url = url_of(server)
        yield host


def _fresh(host: Host) -> Host:
    with host.lock:
        host.routes.clear()
        host.seen.clear()
    return host


# One server each for the module (stopping one takes ~0.5 s), emptied before every test.
@pytest.fixture(scope="module")
def trusted_server() -> Iterator[Host]:
    yield from _serve()


@pytest.fixture(scope="module")
def attacker_server() -> Iterator[Host]:
    yield from _serve()


@pytest.fixture
def trusted(trusted_server: Host, monkeypatch: pytest.MonkeyPatch) -> Host:
    """The API the operator configured, with the tokens in the environment."""
    host = _fresh(trusted_server)
    monkeypatch.setenv("SLACK_BOT_TOKEN", SLACK_TOKEN)
    monkeypatch.setenv("SLACK_API_BASE_URL", f"{host.url}/api")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", host.url)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", DISCORD_TOKEN)
    monkeypatch.setenv("DISCORD_API_BASE_URL", f"{host.url}/api/v10")
    return host


@pytest.fixture
def attacker(attacker_server: Host) -> Host:
    return _fresh(attacker_server)


def call(
    tool: str, export: str, args: dict[str, Any], workdir: Path | None = None
) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir or Path.cwd())
    result: dict[str, Any] = run(TOOL[tool][export](ctx, args))
    return result


def attempt(tool: str, export: str, args: dict[str, Any]) -> ToolFailure | None:
    """The call's failure, or ``None`` when it succeeded."""
    try:
        call(tool, export, args)
    except ToolFailure as exc:
        for token in TOKENS:
            assert token not in exc.message and token not in (exc.suggestion or "")
        return exc
    return None


def failure(tool: str, export: str, args: dict[str, Any]) -> ToolFailure:
    error = attempt(tool, export, args)
    assert error is not None, "the call should have failed"
    return error


SEND = {
    "slack": ("send", {"channelId": "C4", "text": "hi"}, "/api"),
    "telegram": ("send", {"chatId": 42, "text": "hi"}, ""),
    "discord": ("send", {"channelId": "C4", "content": "hi"}, "/api/v10"),
}


def test_slack_download_file_refuses_a_url_off_slack_before_any_request(
    trusted: Host, attacker: Host
) -> None:
    error = attempt("slack", "download_file", {"url": f"{attacker.url}/files/cat.png"})
    assert not attacker.got_a_token()
    assert (
        error is not None
        and error.code == "E_TOOL_INVALID_ARGS"
        and "Slack file URL" in error.message
    )
    assert attacker.seen == [] and trusted.seen == []


@pytest.mark.parametrize("url", [
    "https://files.slack.com.attacker.invalid/files-pri/T1-F1/a.png",
    "https://attacker.invalid/files.slack.com/a.png",
    "http://files.slack.com/files-pri/T1-F1/a.png",           # no TLS: the token in clear
    "https://files.slack.com:8443/files-pri/T1-F1/a.png",
    "https://files.slack.com@attacker.invalid/a.png",          # userinfo
    "https://attacker.invalid\\@files.slack.com/a.png",        # parsers disagree on the host
])
def test_slack_download_file_refuses_urls_that_only_look_like_slack(
    trusted: Host, url: str
) -> None:
    assert failure("slack", "download_file", {"url": url}).code == "E_TOOL_INVALID_ARGS"
    assert trusted.seen == []


@pytest.mark.parametrize(("url", "allowed"), [
    ("https://files.slack.com/files-pri/T1-F1/a.png", True),
    ("https://FILES.slack.com./files-pri/T1-F1/a.png", True),
    ("https://slack.com/x", True),
    ("https://ca.slack-edge.com/T1-U1-x-72", True),
    ("https://slack-edge.com/x", True),
    ("https://evilslack.com/x", False),
    ("https://slack.com.attacker.invalid/x", False),
    ("http://files.slack.com/x", False),
])
def test_slack_file_hosts_that_may_receive_the_token(url: str, allowed: bool) -> None:
    assert slack._may_get_token(url, "https://slack.com/api") is allowed


@pytest.mark.parametrize("tool", sorted(SEND))
def test_an_input_api_base_url_elsewhere_is_refused_with_the_env_token(
    tool: str, trusted: Host, attacker: Host
) -> None:
    export, args, suffix = SEND[tool]
    error = attempt(tool, export, {**args, "apiBaseUrl": f"{attacker.url}{suffix}"})
    assert not attacker.got_a_token()
    assert (
        error is not None
        and error.code == "E_TOOL_INVALID_ARGS"
        and "'apiBaseUrl'" in error.message
        and "'token'" in error.message
    )
    assert attacker.seen == [] and trusted.seen == []


@pytest.mark.parametrize("tool", sorted(SEND))
def test_an_input_api_base_url_on_the_trusted_origin_is_accepted(tool: str, trusted: Host) -> None:
    export, args, suffix = SEND[tool]
    assert call(tool, export, {**args, "apiBaseUrl": f"{trusted.url}{suffix}/"})["ok"] is True
    assert trusted.got_a_token()


@pytest.mark.parametrize("tool", sorted(SEND))
def test_an_input_api_base_url_elsewhere_works_with_the_calls_own_token(
    tool: str, trusted: Host, attacker: Host
) -> None:
    export, args, suffix = SEND[tool]
    own = "model-own-token-42"
    assert (
        call(tool, export, {**args, "apiBaseUrl": f"{attacker.url}{suffix}", "token": own})["ok"]
        is True
    )
    assert len(attacker.seen) == 1 and own in attacker.seen[0][1] + attacker.seen[0][2]
    assert not attacker.got_a_token() and trusted.seen == []


REDIRECTED = {
    # tool, export, args, the path on the trusted API that redirects (kept on the attacker)
    "telegram-send": (
        "telegram",
        "send",
        {"chatId": 42, "text": "hi"},
        f"/bot{TELEGRAM_TOKEN}/sendMessage",
    ),
    "telegram-download": (
        "telegram",
        "download_file",
        {"fileId": "F1"},
        f"/file/bot{TELEGRAM_TOKEN}/photos/a.jpg",
    ),
    "slack-send": ("slack", "send", {"channelId": "C4", "text": "hi"}, "/api/chat.postMessage"),
    "slack-download": ("slack", "download_file", {"url": "{trusted}/files/a.png"}, "/files/a.png"),
    "discord-send": (
        "discord",
        "send",
        {"channelId": "C4", "content": "hi"},
        "/api/v10/channels/C4/messages",
    ),
}


@pytest.mark.parametrize("case", sorted(REDIRECTED))
@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_off_the_api_origin_is_not_followed(
    case: str, status: int, trusted: Host, attacker: Host
) -> None:
    tool, export, args, path = REDIRECTED[case]
    trusted.redirect(path, f"{attacker.url}{path}", status)
    args = {k: v.format(trusted=trusted.url) if isinstance(v, str) else v for k, v in args.items()}
    error = attempt(tool, export, args)
    assert not attacker.got_a_token()
    assert attacker.seen == []  # not even without the token (urllib3 used to strip the header)
    assert error is not None and error.code == "E_BASE_HTTP" and "not followed" in error.message
    assert trusted.seen[-1][1] == path


def test_a_redirect_within_the_api_origin_is_followed_with_the_token(
    trusted: Host, tmp_path: Path
) -> None:
    trusted.redirect("/files/old.png", "/files/new.png")
    trusted.routes["/files/new.png"] = (200, {"Content-Type": "image/png"}, b"PNG!")
    out = call("slack", "download_file", {"url": f"{trusted.url}/files/old.png"}, tmp_path)
    assert out["sizeBytes"] == 4 and out["contentType"] == "image/png"
    assert trusted.seen[-1] == ("GET", "/files/new.png", f"Bearer {SLACK_TOKEN}")
    # a POST answered 303 continues as a GET without the body, on the same origin
    trusted.redirect("/api/chat.postMessage", "/api/chat.postMessage.done", 303)
    assert call("slack", "send", {"channelId": "C4", "text": "hi"})["ok"] is True
    assert trusted.seen[-1] == ("GET", "/api/chat.postMessage.done", f"Bearer {SLACK_TOKEN}")


def test_a_redirect_loop_on_the_api_origin_stops(trusted: Host) -> None:
    trusted.redirect(f"/bot{TELEGRAM_TOKEN}/sendMessage", f"/bot{TELEGRAM_TOKEN}/sendMessage")
    error = failure("telegram", "send", {"chatId": 42, "text": "hi"})
    assert error.code == "E_BASE_HTTP" and "more than 5" in error.message
    assert len(trusted.seen) == 6
