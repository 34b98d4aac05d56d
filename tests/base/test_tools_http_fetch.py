"""Tool ``http-fetch`` of ``@goondan/base`` against a loopback ``http.server``."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
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
handlers = load_entry_module(TOOLS / "http_fetch.py").handlers
RELEASE = threading.Event()   # lets the /slow handler finish when the test is done


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/redirect":
            self._send(302, b"", {"Location": "/text"})
        elif self.path == "/missing":
            self._send(404, b"no such page", {"Content-Type": "text/plain"})
        elif self.path == "/big":
            self._send(200, "é".encode() * 100_000)
        elif self.path == "/slow":
            RELEASE.wait(10)
            self._send(200, b"late")
        else:
            self._send(200, json.dumps({"path": self.path, "headers": dict(self.headers)}).encode(),
                       {"Content-Type": "application/json", "X-Custom": "yes"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._send(201, json.dumps({"contentType": self.headers.get("Content-Type"),
                                    "body": body.decode()}).encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with loopback_server(Handler) as server:
        try:
            yield url_of(server)
        finally:
            RELEASE.set()


def call(export: str, args: dict[str, Any]) -> dict[str, Any]:
    # Loopback is refused by default (docs/base-package.md, "http-fetch host policy"): the
    # Tool config opts in for the test server's address.
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, Path.cwd(),
                      config={"allowHosts": ["127.0.0.1"]})
    result: dict[str, Any] = run(handlers[export](ctx, args))
    return result


def failure(export: str, args: dict[str, Any]) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, args)
    return info.value


def test_get_returns_status_headers_and_body(base_url: str) -> None:
    out = call(
        "get", {"url": f"{base_url}/hello", "headers": {"X-Num": 5, "X-Flag": True, "X-Skip": None}}
    )
    assert set(out) == {
        "url",
        "method",
        "status",
        "statusText",
        "headers",
        "body",
        "truncated",
        "durationMs",
    }
    assert out["url"] == f"{base_url}/hello" and out["method"] == "GET"
    assert out["status"] == 200 and out["statusText"] == "OK" and out["truncated"] is False
    assert (
        out["headers"]["x-custom"] == "yes" and out["headers"]["content-type"] == "application/json"
    )
    sent = json.loads(out["body"])["headers"]
    assert sent["X-Num"] == "5" and sent["X-Flag"] == "true" and "X-Skip" not in sent


def test_error_statuses_are_outputs_and_redirects_are_followed(base_url: str) -> None:
    out = call("get", {"url": f"{base_url}/missing"})
    assert (
        out["status"] == 404 and out["statusText"] == "Not Found" and out["body"] == "no such page"
    )
    out = call("get", {"url": f"{base_url}/redirect"})
    assert out["status"] == 200 and out["url"] == f"{base_url}/text"


def test_max_bytes_truncates_without_splitting_a_character(base_url: str) -> None:
    out = call("get", {"url": f"{base_url}/big", "maxBytes": 5})
    assert out["truncated"] is True and out["body"] == "éé"
    out = call("get", {"url": f"{base_url}/big"})
    assert out["truncated"] is False and len(out["body"]) == 100_000


def test_post_json_body_and_body_string(base_url: str) -> None:
    out = call("post", {"url": f"{base_url}/echo", "body": {"a": [1, "é"]}})
    assert out["status"] == 201 and out["method"] == "POST"
    echoed = json.loads(out["body"])
    assert echoed["contentType"] == "application/json" and json.loads(echoed["body"]) == {
        "a": [1, "é"]
    }
    out = call(
        "post",
        {"url": f"{base_url}/echo", "body": {"a": 1}, "headers": {"Content-Type": "text/x-json"}},
    )
    assert json.loads(out["body"])["contentType"] == "text/x-json"
    out = call(
        "post",
        {
            "url": f"{base_url}/echo",
            "bodyString": "raw=1",
            "headers": {"content-type": "text/plain"},
        },
    )
    assert json.loads(out["body"]) == {"contentType": "text/plain", "body": "raw=1"}


def test_timeouts_and_network_errors_raise(base_url: str) -> None:
    err = failure("get", {"url": f"{base_url}/slow", "timeoutMs": 200})
    assert err.code == "E_BASE_HTTP_TIMEOUT" and "timed out" in err.message
    with socket.socket() as probe:    # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert failure("get", {"url": f"http://127.0.0.1:{port}/"}).code == "E_BASE_HTTP"


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "file:///etc/passwd", "example.com", "http://", 5]
)
def test_only_http_urls_are_accepted(url: object) -> None:
    assert failure("get", {"url": url}).code == "E_TOOL_INVALID_ARGS"


def test_invalid_inputs(base_url: str) -> None:
    assert failure("get", {}).code == "E_TOOL_INVALID_ARGS"
    assert failure("get", {"url": base_url, "headers": {"A": [1]}}).code == "E_TOOL_INVALID_ARGS"
    assert failure("get", {"url": base_url, "maxBytes": -1}).code == "E_TOOL_INVALID_ARGS"
    assert failure("post", {"url": base_url, "bodyString": 3}).code == "E_TOOL_INVALID_ARGS"


def test_the_host_header_is_the_urls_host(base_url: str) -> None:
    """The request goes to the checked address; a ``Host`` input cannot name another host."""
    out = call("get", {"url": f"{base_url}/echo", "headers": {"host": "internal.example"}})
    sent = json.loads(out["body"])["headers"]
    assert sent["Host"] == base_url.removeprefix("http://")
