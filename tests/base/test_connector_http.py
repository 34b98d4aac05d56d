"""The minimal HTTP/1.1 server the HTTP connectors share (connectors/_http.py), over raw
sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from goondan.tools import load_entry_module
from tests.support.connector_harness import CONNECTORS, raw_exchange, read_response, status_of

http = load_entry_module(CONNECTORS / "_http.py", kind="connector")


class Echo:
    """A handler that echoes the body and can be held to test a graceful stop."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        self.entered.set()
        if self.hold is not None:
            await self.hold.wait()
        return http.Response.json(200, {"len": len(request.body), "body": request.body.decode()})


@contextlib.asynccontextmanager
async def serving(handler: Any, **options: Any) -> AsyncIterator[tuple[str, Any]]:
    server = http.HttpServer(handler, port=0, path="/in", **options)
    await server.start()
    task = asyncio.create_task(server.serve_forever())
    try:
        yield f"http://127.0.0.1:{server.port}", server
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def post(body: bytes, *extra: bytes, version: bytes = b"HTTP/1.1") -> bytes:
    return (b"POST /in " + version + b"\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
            + b"".join(h + b"\r\n" for h in extra) + b"\r\n" + body)


def test_content_length_and_chunked_bodies() -> None:
    async def body() -> None:
        echo = Echo()
        async with serving(echo) as (url, _):
            raw = await raw_exchange(url, post(b"hello", b"Connection: close"))
            assert status_of(raw) == 200 and raw.endswith(b'{"len":5,"body":"hello"}')
            chunked = (
                b"POST /in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n5;ext=1\r\nhello\r\n6\r\n "
                b"world\r\n0\r\nX-Trailer: 1\r\n\r\n"
            )
            raw = await raw_exchange(url, chunked)
            assert raw.endswith(b'"body":"hello world"}')
            assert echo.requests[1].headers["transfer-encoding"] == "chunked"

    asyncio.run(body())


def test_malformed_requests_are_refused_with_a_status_and_closed() -> None:
    cases = [
        (b"GARBAGE\r\n\r\n", 400),
        (b"POST /in HTTP/2.0\r\n\r\n", 400),
        (b"POST /in HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", 400),
        (b"POST /in HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"POST /in HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /in HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST /in HTTP/1.1\r\nbad header line\r\n\r\n", 400),
        (b"POST /in HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"POST /in HTTP/1.1\r\n" + b"X-Big: " + b"a" * 20000 + b"\r\n\r\n", 431),
        (
            b"POST /in HTTP/1.1\r\n" + b"".join(b"X-H%d: 1\r\n" % i for i in range(101)) + b"\r\n",
            431,
        ),
        (b"POST /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", 431),
        (b"POST /in HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n", 413),
        (b"GET /in HTTP/1.1\r\n\r\n", 405),
        (b"POST /elsewhere HTTP/1.1\r\n\r\n", 404),
    ]

    async def body() -> None:
        echo = Echo()
        async with serving(echo) as (url, _):
            for payload, status in cases:
                raw = await raw_exchange(url, payload)  # reads until the server closes
                assert status_of(raw) == status, payload[:60]
                assert b"Connection: close" in raw
            assert echo.requests == []
            assert b"\r\nAllow: POST\r\n" in await raw_exchange(url, b"GET /in HTTP/1.1\r\n\r\n")

    asyncio.run(body())


def test_slow_headers_and_bodies_time_out() -> None:
    async def body() -> None:
        async with serving(Echo(), header_timeout=0.2, body_timeout=0.2) as (url, _):
            # never ends the headers
            raw = await raw_exchange(url, b"POST /in HTTP/1.1\r\nHost: x\r\n")
            assert status_of(raw) == 408
            raw = await raw_exchange(url, b"POST /in HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
            assert status_of(raw) == 408

    asyncio.run(body())


def test_expect_100_continue_is_answered_before_the_body() -> None:
    async def body() -> None:
        async with serving(Echo()) as (url, _):
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                b"POST /in HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
            )
            await writer.drain()
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 15)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"ok")
            final = await asyncio.wait_for(read_response(reader), 15)
            assert status_of(final) == 200 and final.endswith(b'"body":"ok"}')
            writer.close()

    asyncio.run(body())


def test_http_1_0_closes_and_keep_alive_idles_out() -> None:
    async def body() -> None:
        async with serving(Echo(), idle_timeout=0.2) as (url, _):
            raw = await raw_exchange(url, post(b"a", version=b"HTTP/1.0"))
            assert status_of(raw) == 200 and b"Connection: close" in raw
            # HTTP/1.1 keeps the connection open until the idle timeout closes it
            raw = await raw_exchange(url, post(b"b"))
            assert status_of(raw) == 200 and b"Connection: close" not in raw

    asyncio.run(body())


def test_stop_lets_a_busy_request_finish_and_closes_idle_connections() -> None:
    async def body() -> None:
        echo = Echo()
        echo.hold = asyncio.Event()
        async with serving(echo) as (url, server):
            host, port = url.removeprefix("http://").split(":")
            idle_reader, idle_writer = await asyncio.open_connection(host, int(port))
            busy = asyncio.create_task(raw_exchange(url, post(b"late")))
            await asyncio.wait_for(echo.entered.wait(), 15)
            stopping = asyncio.create_task(server.stop())
            await asyncio.sleep(0.05)
            assert await asyncio.wait_for(idle_reader.read(), 15) == b""  # idle one closed at once
            echo.hold.set()
            raw = await busy
            assert status_of(raw) == 200 and b"Connection: close" in raw
            await asyncio.wait_for(stopping, 15)
            idle_writer.close()
            assert "stopped" in repr(server)

    asyncio.run(body())


async def _until(predicate: Any, what: str) -> None:
    """Poll ``predicate`` (failure-only deadline)."""
    async with asyncio.timeout(15):
        while not predicate():
            await asyncio.sleep(0.01)


def test_connections_over_the_limit_are_refused_with_503_when_all_are_busy() -> None:
    async def body() -> None:
        echo = Echo()
        echo.hold = asyncio.Event()
        async with serving(echo, max_connections=1) as (url, _):
            busy = asyncio.create_task(raw_exchange(url, post(b"x", b"Connection: close")))
            await asyncio.wait_for(echo.entered.wait(), 15)
            raw = await raw_exchange(url, post(b"x"))
            assert status_of(raw) == 503 and b"too_many_connections" in raw
            echo.hold.set()
            assert status_of(await busy) == 200

    asyncio.run(body())


def test_the_longest_idle_connection_makes_room_for_a_new_one() -> None:
    async def body() -> None:
        async with serving(Echo(), max_connections=2) as (url, server):
            host, port = url.removeprefix("http://").split(":")
            first_reader, first = await asyncio.open_connection(host, int(port))
            await _until(lambda: "connections=1 " in repr(server), "the first connection")
            second_reader, second = await asyncio.open_connection(host, int(port))
            await _until(lambda: "connections=2 " in repr(server), "the second connection")
            raw = await raw_exchange(url, post(b"x", b"Connection: close"))
            assert status_of(raw) == 200  # not 503: an idle connection gave way
            assert await asyncio.wait_for(first_reader.read(), 15) == b""  # the longest idle
            # the second one is still served
            second.write(post(b"still here", b"Connection: close"))
            raw = await asyncio.wait_for(second_reader.read(), 15)
            assert status_of(raw) == 200 and raw.endswith(b'"body":"still here"}')
            first.close()
            second.close()

    asyncio.run(body())


def test_one_address_holds_at_most_its_share() -> None:
    async def body() -> None:
        echo = Echo()
        echo.hold = asyncio.Event()
        async with serving(echo, max_connections_per_ip=2) as (url, _):
            held = [
                asyncio.create_task(raw_exchange(url, post(b"x", b"Connection: close")))
                for _ in range(2)
            ]
            await _until(lambda: len(echo.requests) == 2, "two busy requests")
            # a third connection from 127.0.0.1 finds its two slots busy: 503, although the
            # server as a whole has room
            raw = await raw_exchange(url, post(b"x"))
            assert status_of(raw) == 503 and b"too_many_connections" in raw
            echo.hold.set()
            assert [status_of(await h) for h in held] == [200, 200]

    asyncio.run(body())


def test_a_new_connection_that_sends_nothing_is_closed_at_the_header_deadline() -> None:
    async def body() -> None:
        async with serving(Echo(), header_timeout=0.2, idle_timeout=60) as (url, _):
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            assert await asyncio.wait_for(reader.read(), 15) == b""  # well before the 60 s
            writer.close()

    asyncio.run(body())
