"""The HTTP layer (goondan/http/) against a real server on 127.0.0.1: the retry policy (503 with
Retry-After, a POST not re-sent unless asked, a refusal always re-sent), timeouts, the mapping of
urllib3 failures to kinds with safe reasons, and aborting a blocked read."""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

import pytest
import urllib3

from goondan import http
from goondan.http import failures
from goondan.secrets import register_secret

pytestmark = pytest.mark.timeout(30)

Action = Callable[[socket.socket], None]


def answer(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Action:
    def act(conn: socket.socket) -> None:
        head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        conn.sendall((head + "\r\n").encode() + body)

    return act


def close_at_once(conn: socket.socket) -> None:
    """Read the request, then close without a word."""


class Server:
    """Reads each request and runs the next queued action on its connection (default 200)."""

    def __init__(self) -> None:
        self.actions: deque[Action] = deque()
        self.requests: list[bytes] = []
        self.release = threading.Event()  # ends every silent action
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1/things?key=abc"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
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
            self.requests.append(data.split(b"\r\n", 1)[0])
            action = self.actions.popleft() if self.actions else answer(200, b"ok")
            action(conn)

    def silent(self, conn: socket.socket) -> None:
        self.release.wait(20)

    def close(self) -> None:
        self.release.set()
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


@pytest.fixture
def pool() -> Iterator[urllib3.PoolManager]:
    manager = http.new_pool()
    yield manager
    manager.clear()


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def policy(**overrides: object) -> http.RetryPolicy:
    values: dict[str, object] = {"max_retries": 2, "base_delay": 0.1, "max_delay": 0.4,
                                 "random": lambda: 1.0, "clock": lambda: 1_000_000.0}
    values.update(overrides)
    return http.RetryPolicy(**values)  # type: ignore[arg-type]


QUICK = http.timeout(2.0)


# --------------------------------------------------------------------------- retries


def test_a_503_with_retry_after_is_retried_after_the_delay_the_server_asked(
        server: Server, pool: urllib3.PoolManager) -> None:
    server.actions.extend([answer(503, headers={"Retry-After": "3"}), answer(200, b"done")])
    sleeps = Sleeps()
    response = http.send(pool, "GET", server.url, policy=policy(), timeout=QUICK, sleep=sleeps)
    assert (response.status, response.data) == (200, b"done")
    assert sleeps.delays == [3.0] and len(server.requests) == 2


def test_retry_after_is_capped_and_backoff_doubles_without_it(
        server: Server, pool: urllib3.PoolManager) -> None:
    server.actions.extend([answer(503, headers={"Retry-After": "3600"}), answer(502), answer(502)])
    sleeps = Sleeps()
    response = http.send(pool, "GET", server.url, policy=policy(max_retries=3, max_retry_after=5.0),
                         timeout=QUICK, sleep=sleeps)
    assert response.status == 200  # the fourth attempt: the default answer
    assert sleeps.delays == [5.0, 0.2, 0.4]  # capped Retry-After, then 0.1 * 2**n (jitter 1.0)


def test_the_last_answer_is_returned_when_retries_run_out(
    server: Server, pool: urllib3.PoolManager
) -> None:
    server.actions.extend([answer(503), answer(503), answer(503), answer(200)])
    response = http.send(pool, "GET", server.url, policy=policy(), timeout=QUICK, sleep=Sleeps())
    assert response.status == 503 and len(server.requests) == 3


def test_a_client_error_is_never_retried(server: Server, pool: urllib3.PoolManager) -> None:
    server.actions.extend([answer(404), answer(200)])
    response = http.send(pool, "GET", server.url, policy=policy(), timeout=QUICK, sleep=Sleeps())
    assert response.status == 404 and len(server.requests) == 1


def test_a_post_is_not_resent_after_a_503_unless_the_policy_allows_it(
        server: Server, pool: urllib3.PoolManager) -> None:
    server.actions.extend([answer(503), answer(200)])
    response = http.send(pool, "POST", server.url, body=b"{}", policy=policy(), timeout=QUICK,
                         sleep=Sleeps())
    assert response.status == 503 and len(server.requests) == 1

    server.actions.clear()
    server.actions.extend([answer(503), answer(200)])
    response = http.send(pool, "POST", server.url, body=b"{}", timeout=QUICK, sleep=Sleeps(),
                         policy=policy(retry_non_idempotent=True))
    assert response.status == 200 and len(server.requests) == 3


def test_a_post_cut_off_without_an_answer_is_not_resent(
    server: Server, pool: urllib3.PoolManager
) -> None:
    server.actions.extend([close_at_once, answer(200)])
    with pytest.raises(urllib3.exceptions.HTTPError) as caught:
        http.send(
            pool, "POST", server.url, body=b"{}", policy=policy(), timeout=QUICK, sleep=Sleeps()
        )
    failure = http.failure_of(caught.value)
    assert failure is not None and failure.kind == failures.CONNECTION and failure.sent
    assert len(server.requests) == 1


def test_a_get_cut_off_without_an_answer_is_resent(
    server: Server, pool: urllib3.PoolManager
) -> None:
    server.actions.extend([close_at_once, answer(200, b"second")])
    response = http.send(pool, "GET", server.url, policy=policy(), timeout=QUICK, sleep=Sleeps())
    assert response.data == b"second" and len(server.requests) == 2


def test_a_refused_connection_is_retried_even_for_a_post_then_maps_to_connect(
        pool: urllib3.PoolManager) -> None:
    sleeps = Sleeps()
    url = f"http://127.0.0.1:{free_port()}/v1/x"
    with pytest.raises(urllib3.exceptions.HTTPError) as caught:
        http.send(pool, "POST", url, body=b"{}", policy=policy(), timeout=QUICK, sleep=sleeps)
    assert sleeps.delays == [0.1, 0.2]  # nothing was sent: re-sending a POST is safe
    failure = http.failure_of(caught.value)
    assert failure == failures.Failure(failures.CONNECT, "Connection refused")
    assert not failure.sent and not failure.timed_out


# --------------------------------------------------------------------------- timeouts


def test_a_silent_server_is_a_read_timeout_and_a_post_is_not_resent(
        server: Server, pool: urllib3.PoolManager) -> None:
    server.actions.extend([server.silent, server.silent])
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError) as caught:
        http.send(pool, "POST", server.url, body=b"{}", policy=policy(), sleep=Sleeps(),
                  timeout=http.timeout(0.3))
    assert time.monotonic() - started < 5
    failure = http.failure_of(caught.value)
    assert failure is not None and failure.kind == failures.READ_TIMEOUT
    assert failure.timed_out and failure.sent
    assert len(server.requests) == 1


def test_the_timeout_rule() -> None:
    assert (http.timeout(30.0).connect_timeout, http.timeout(30.0).read_timeout) == (10.0, 30.0)
    assert (http.timeout(2.0).connect_timeout, http.timeout(2.0).read_timeout) == (2.0, 2.0)
    stream = http.timeout(None, connect_s=5.0)
    assert (stream.connect_timeout, stream.read_timeout) == (5.0, None)
    assert http.timeout(total_s=4.0).total == 4.0


def test_a_pool_never_retries_on_its_own() -> None:
    manager = http.new_pool()
    with pytest.raises(urllib3.exceptions.NewConnectionError):  # not MaxRetryError after retries
        manager.request("GET", f"http://127.0.0.1:{free_port()}/", timeout=QUICK)


# --------------------------------------------------------------------------- failures


def test_reasons_carry_no_connection_repr_no_url_and_no_secret() -> None:
    secret = "sk-http-layer-SECRET-42"
    register_secret(secret)
    exc = urllib3.exceptions.ProtocolError(
        f"HTTPConnection(host='127.0.0.1', port=1): token {secret} rejected")
    failure = http.failure_of(exc)
    assert failure is not None and failure.kind == failures.CONNECTION
    assert "HTTPConnection(" not in failure.reason and secret not in failure.reason
    connection = urllib3.HTTPConnectionPool("127.0.0.1", 1)
    timed_out = urllib3.exceptions.ReadTimeoutError(
        connection, "/bot123:SECRET/x", "Read timed out."
    )
    wrapped = urllib3.exceptions.MaxRetryError(
        connection, "/bot123:SECRET/getUpdates", reason=timed_out
    )
    assert http.failure_of(wrapped) == failures.Failure(failures.READ_TIMEOUT, "Read timed out.")
    assert http.safe_origin("https://api.example.test:8443/bot123:SECRET/x?key=1") == \
        "https://api.example.test:8443"


@pytest.mark.parametrize(("exc", "kind"), [
    (urllib3.exceptions.ConnectTimeoutError("slow"), failures.CONNECT_TIMEOUT),
    (TimeoutError("timed out"), failures.READ_TIMEOUT),
    (urllib3.exceptions.DecodeError("bad gzip"), failures.BAD_RESPONSE),
    (urllib3.exceptions.LocationValueError("no host"), failures.INVALID_URL),
    (ConnectionResetError(104, "Connection reset by peer"), failures.CONNECTION),
])
def test_each_urllib3_failure_has_one_kind(exc: BaseException, kind: str) -> None:
    failure = http.failure_of(exc)
    assert failure is not None and failure.kind == kind
    assert http.failure_of(ValueError("not a network error")) is None


# --------------------------------------------------------------------------- abort


def test_an_abort_unblocks_a_read_at_once(server: Server) -> None:
    server.actions.append(server.silent)
    manager = http.new_pool(abortable=True)
    handle = http.AbortHandle()
    outcome: list[BaseException | int] = []

    def request() -> None:
        with http.abortable(handle):
            try:
                outcome.append(
                    manager.request("GET", server.url, timeout=http.timeout(20.0)).status
                )
            except Exception as exc:
                outcome.append(exc)

    worker = threading.Thread(target=request, daemon=True)
    worker.start()
    deadline = time.monotonic() + 10
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.01)  # poll for the request to arrive
    started = time.monotonic()
    handle.abort()
    worker.join(10)
    assert not worker.is_alive() and time.monotonic() - started < 5
    assert isinstance(outcome[0], urllib3.exceptions.HTTPError)  # cut, not answered
