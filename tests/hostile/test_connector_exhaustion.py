"""Issue 27, item 7: webhook connection exhaustion.

1,100 connections that never send a request used to hold every one of the server's 1,024
slots for the 60 s idle timeout, so 0 of 59 signed requests got through (503
``too_many_connections``). Idle connections must not starve requests: the one idle the longest
is closed to make room, one address holds at most ``MAX_CONNECTIONS_PER_IP`` slots (128 by
default, so a loopback client like this one still gets its requests through), and a new
connection that sends nothing is closed after the header deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
from pathlib import Path

import pytest

from tests.support.connector_e2e import sign_webhook
from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    running,
)

IDLE = 1_100  # as reported; the server's defaults (1,024 connections) are in force
SIGNED = 59
SECRET = "exhaustion-secret"

pytestmark = pytest.mark.skipif(
    resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 2 * IDLE + 256,
    reason="needs two file descriptors per idle connection (client and server side)")


async def _post_fresh(url: str, body: bytes) -> tuple[int, object]:
    """One signed request on a new connection (``Connection: close``)."""
    return await post(
        url, body, {"X-Signature-256": sign_webhook(SECRET, body), "Connection": "close"}
    )


def test_idle_connections_do_not_starve_signed_requests(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        ctx = make_context(tmp_path, inbox, connector="webhook", config={"PORT": "0"},
                           secrets={"SIGNING_SECRET": SECRET})
        async with running(load_connector("webhook"), ctx) as url:
            host, port = url.removeprefix("http://").split(":")
            idle: list[asyncio.StreamWriter] = []
            try:
                for _ in range(IDLE):  # connect, send nothing, keep the socket
                    _, writer = await asyncio.open_connection(host, int(port))
                    idle.append(writer)
                sem = asyncio.Semaphore(8)

                async def one(i: int) -> int:
                    async with sem:
                        status, _ = await _post_fresh(
                            url, json.dumps({"id": f"r{i}", "text": "hi"}).encode()
                        )
                        return status

                statuses = await asyncio.gather(*(one(i) for i in range(SIGNED)))
            finally:
                for writer in idle:
                    writer.close()
                with contextlib.suppress(Exception):
                    await asyncio.gather(*(w.wait_closed() for w in idle), return_exceptions=True)
            assert statuses.count(200) == SIGNED, statuses
            assert len(inbox.events) == SIGNED

    asyncio.run(body())
