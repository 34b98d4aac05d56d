"""The urllib3 transport: retry policy, Retry-After, error mapping, streams and cancellation.

A tiny raw-socket server on 127.0.0.1:0 plays one scripted action per connection, so every
failure mode (refused, hung, cut mid-chunk, garbage) is exact. Retry delays are asserted through
``RetryPolicy.sleep``; nothing here sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate

import pytest

from goondan.errors import (
    LlmAuthError,
    LlmBadResponseError,
    LlmConnectionError,
    LlmError,
    LlmHttpError,
    LlmRateLimitError,
    LlmTimeoutError,
)
from goondan.llm.http import (
    HttpTransport,
    RetryPolicy,
    error_for_status,
    extract_error_message,
    parse_retry_after,
)
from goondan.secrets import register_secret

pytestmark = pytest.mark.timeout(30)

SECRET = "sk-http-test-SECRET-0123456789"

# --------------------------------------------------------------------------- loopback server

Action = Callable[[socket.socket], None]


def _response(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (head + "\r\n").encode() + body


def send(
    status: int, body: bytes | dict[str, object], headers: dict[str, str] | None = None
) -> Action:
    data = json.dumps(body).encode() if isinstance(body, dict) else body

    def act(conn: socket.socket) -> None:
        conn.sendall(_response(status, data, {"Connection": "close", **(headers or {})}))

    return act


def stream(events: list[bytes], *, finish: bool = True) -> Action:
    """A chunked text/event-stream; ``finish=False`` drops the connection mid-body."""

    def act(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        for event in events:
            conn.sendall(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        if finish:
            conn.sendall(b"0\r\n\r\n")

    return act


@dataclass
class Server:
    """Accepts connections; each one reads a request and runs the next queued action."""

    actions: deque[Action] = field(default_factory=deque)
    requests: list[bytes] = field(default_factory=list)
    closed_by_client: threading.Event = field(default_factory=threading.Event)
    received: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1/test"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                body += conn.recv(65536)
            self.requests.append(head + b"\r\n\r\n" + body)
            self.received.set()
            action = self.actions.popleft() if self.actions else send(418, b"no action")
            action(conn)

    def hang(self) -> Action:
        """Never answer; note when the client closes the connection."""

        def act(conn: socket.socket) -> None:
            conn.settimeout(10)
            try:
                while conn.recv(1024):
                    pass
            except OSError:
                return
            self.closed_by_client.set()

        return act

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


@dataclass
class Sleeps:
    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def transport(
    sleeps: Sleeps | None = None, *, max_retries: int = 2, timeout_ms: int | None = None
) -> HttpTransport:
    policy = RetryPolicy(max_retries=max_retries, base_delay=0.1, max_delay=0.25,
                         sleep=sleeps or Sleeps(), random=lambda: 0.5, clock=lambda: 1_000_000.0)
    return HttpTransport(label="TestAI", retry_policy=policy, timeout_ms=timeout_ms,
                         auth_suggestion="Set TEST_API_KEY.")


def post(t: HttpTransport, url: str) -> dict[str, object]:
    return asyncio.run(t.post_json(url, {"q": 1}, {"Authorization": f"Bearer {SECRET}"}))


def collect(t: HttpTransport, url: str) -> list[str]:
    async def go() -> list[str]:
        return [e.data async for e in t.stream_sse(url, {"q": 1}, {})]

    return asyncio.run(go())


# --------------------------------------------------------------------------- policy


def test_full_jitter_exponential_backoff_is_capped() -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0, random=lambda: 1.0)
    assert [policy.delay_for(i) for i in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    half = RetryPolicy(base_delay=0.5, max_delay=3.0, random=lambda: 0.5)
    assert half.delay_for(1) == 0.5


def test_retry_after_wins_and_is_capped() -> None:
    policy = RetryPolicy(max_retry_after=10.0, random=lambda: 1.0)
    assert policy.delay_for(0, 4.0) == 4.0
    assert policy.delay_for(0, 3600.0) == 10.0


def test_retryable_statuses() -> None:
    policy = RetryPolicy()
    assert [
        s
        for s in (400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 529)
        if policy.is_retryable_status(s)
    ] == [408, 409, 429, 500, 502, 503, 529]


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"Retry-After": "7"}, now=now) == 7.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "7"}, now=now) == 0.25
    assert parse_retry_after(
        {"Retry-After": formatdate(now + 30, usegmt=True)}, now=now
    ) == pytest.approx(30.0)
    assert parse_retry_after({"Retry-After": formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"Retry-After": "soon"}, now=now) is None
    assert parse_retry_after({}, now=now) is None


# --------------------------------------------------------------------------- error mapping


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}},
            "Incorrect API key",
        ),
        (
            {"type": "error", "error": {"type": "not_found_error", "message": "model: x"}},
            "model: x",
        ),
        (
            {"error": {"code": 404, "message": "models/x is not found", "status": "NOT_FOUND"}},
            "models/x is not found",
        ),
        ([{"error": {"code": 400, "message": "bad field"}}], "bad field"),
        ({"detail": "Not Found"}, "Not Found"),
    ],
)
def test_provider_error_messages_are_extracted(body: object, message: str) -> None:
    assert extract_error_message(json.dumps(body).encode()) == message
    assert extract_error_message(b"<html>oops</html>") == "<html>oops</html>"


def test_statuses_map_to_error_classes() -> None:
    body = json.dumps({"error": {"message": "nope"}}).encode()
    auth = error_for_status(401, body, {}, label="X", auth_suggestion="Set X_KEY.")
    assert (
        isinstance(auth, LlmAuthError)
        and auth.code == "E_LLM_AUTH"
        and auth.suggestion == "Set X_KEY."
    )
    limited = error_for_status(429, body, {"Retry-After": "3"}, label="X")
    assert isinstance(limited, LlmRateLimitError) and limited.retry_after == 3.0
    other = error_for_status(503, body, {}, label="X")
    assert isinstance(other, LlmHttpError) and other.status == 503 and other.retryable
    assert "HTTP 503" in other.message and "nope" in other.message
    assert isinstance(error_for_status(403, body, {}, label="X"), LlmAuthError)


def test_secrets_echoed_by_the_server_are_masked() -> None:
    register_secret(SECRET)
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {SECRET}"}}).encode()
    error = error_for_status(401, body, {}, label="X")
    assert SECRET not in error.message and "***" in error.message


# --------------------------------------------------------------------------- post_json


def test_plain_post_returns_json_and_sends_headers(server: Server) -> None:
    server.actions.append(send(200, {"ok": True}))
    assert post(transport(), server.url) == {"ok": True}
    request = server.requests[0]
    assert request.startswith(b"POST /v1/test HTTP/1.1")
    assert b"Content-Type: application/json" in request and request.endswith(b'{"q":1}')


def test_429_then_success_honours_retry_after(server: Server) -> None:
    sleeps = Sleeps()
    server.actions.extend([send(429, {"error": {"message": "slow down"}}, {"Retry-After": "2"}),
                           send(200, {"ok": 1})])
    t = transport(sleeps)
    assert post(t, server.url) == {"ok": 1}
    assert t.attempts == 2 and sleeps.delays == [2.0] and len(server.requests) == 2


def test_5xx_backs_off_then_gives_up(server: Server) -> None:
    sleeps = Sleeps()
    server.actions.extend([send(503, {"error": {"message": "busy"}})] * 3)
    t = transport(sleeps)
    with pytest.raises(LlmHttpError) as info:
        post(t, server.url)
    assert info.value.status == 503 and "busy" in info.value.message
    # full jitter with random() = 0.5: 0.5 * 0.1, 0.5 * 0.2
    assert t.attempts == 3 and sleeps.delays == pytest.approx([0.05, 0.1])


def test_rate_limit_after_retries_is_e_llm_rate_limit(server: Server) -> None:
    server.actions.extend([send(429, {"error": {"message": "quota"}})] * 2)
    with pytest.raises(LlmRateLimitError) as info:
        post(transport(max_retries=1), server.url)
    assert info.value.code == "E_LLM_RATE_LIMIT"


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_not_retried(server: Server, status: int) -> None:
    sleeps = Sleeps()
    server.actions.extend([send(status, {"error": {"message": "no"}}), send(200, {"ok": 1})])
    with pytest.raises(LlmError) as info:
        post(transport(sleeps), server.url)
    assert len(server.requests) == 1 and sleeps.delays == []
    assert isinstance(info.value, LlmAuthError if status in (401, 403) else LlmHttpError)
    assert SECRET not in str(info.value.to_dict())


def test_malformed_json_is_a_bad_response(server: Server) -> None:
    server.actions.append(send(200, b'{"choices": ['))
    with pytest.raises(LlmBadResponseError) as info:
        post(transport(), server.url)
    assert info.value.code == "E_LLM_BAD_RESPONSE" and len(server.requests) == 1


def test_non_object_json_is_a_bad_response(server: Server) -> None:
    server.actions.append(send(200, b"[1, 2]"))
    with pytest.raises(LlmBadResponseError):
        post(transport(), server.url)


def test_connection_refused_is_retried_then_e_llm_connection() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sleeps = Sleeps()
    t = transport(sleeps)
    with pytest.raises(LlmConnectionError) as info:
        post(t, f"http://127.0.0.1:{port}/v1/x")
    assert t.attempts == 3 and len(sleeps.delays) == 2
    assert f"127.0.0.1:{port}" in info.value.message and "/v1/x" not in info.value.message


def test_read_timeout_is_e_llm_timeout(server: Server) -> None:
    server.actions.append(server.hang())
    with pytest.raises(LlmTimeoutError) as info:
        post(transport(max_retries=0, timeout_ms=150), server.url)
    assert info.value.code == "E_LLM_TIMEOUT"


def test_server_closing_without_answer_is_a_connection_error(server: Server) -> None:
    server.actions.append(lambda conn: None)
    with pytest.raises(LlmConnectionError):
        post(transport(max_retries=0), server.url)


# --------------------------------------------------------------------------- streams


def test_stream_yields_events_across_chunks(server: Server) -> None:
    server.actions.append(stream([b"data: one\n", b"\ndata: t", b"wo\n\n", b"data: [DONE]\n\n"]))
    assert collect(transport(), server.url) == ["one", "two", "[DONE]"]
    assert b"Accept: text/event-stream" in server.requests[0]


def test_stream_open_is_retried_on_429(server: Server) -> None:
    sleeps = Sleeps()
    server.actions.extend([send(429, {"error": {"message": "x"}}, {"retry-after-ms": "10"}),
                           stream([b"data: ok\n\n"])])
    assert collect(transport(sleeps), server.url) == ["ok"]
    assert sleeps.delays == [0.01]


def test_stream_cut_mid_way_is_a_bad_response_and_not_retried(server: Server) -> None:
    sleeps = Sleeps()
    server.actions.extend(
        [stream([b"data: one\n\n", b"data: tw"], finish=False), stream([b"data: x\n\n"])]
    )
    seen: list[str] = []

    async def go() -> None:
        async for event in transport(sleeps).stream_sse(server.url, {}, {}):
            seen.append(event.data)

    with pytest.raises(LlmBadResponseError) as info:
        asyncio.run(go())
    assert seen == ["one"] and len(server.requests) == 1 and sleeps.delays == []
    assert "cut off" in info.value.message


def test_stream_error_status_is_mapped(server: Server) -> None:
    server.actions.append(send(401, {"error": {"message": "bad key"}}))
    with pytest.raises(LlmAuthError) as info:
        collect(transport(), server.url)
    assert info.value.suggestion == "Set TEST_API_KEY."


# --------------------------------------------------------------------------- cancellation


@pytest.mark.parametrize("mode", ["post", "stream-open", "stream-body"])
def test_cancellation_aborts_promptly_and_closes_the_connection(server: Server, mode: str) -> None:
    hang = server.hang()
    if mode == "stream-body":
        def act(conn: socket.socket) -> None:
            stream([b"data: first\n\n"], finish=False)(conn)
            hang(conn)

        server.actions.append(act)
    else:
        server.actions.append(hang)
    t = transport()
    first = asyncio.Event()

    async def call() -> None:
        if mode == "post":
            await t.post_json(server.url, {}, {})
        else:
            async for _ in t.stream_sse(server.url, {}, {}):
                first.set()

    async def scenario() -> float:
        task = asyncio.create_task(call())
        if mode == "stream-body":
            await asyncio.wait_for(first.wait(), 5)
        else:
            await asyncio.to_thread(server.received.wait, 5)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 1.0
    assert server.closed_by_client.wait(5), "the server never saw the connection close"


def test_transport_repr_has_no_secret() -> None:
    t = transport()
    assert "TestAI" in repr(t) and SECRET not in repr(t)
