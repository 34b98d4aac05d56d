"""Issue 27, item 10 (part): a 100k-deep JSON body got 500 (a RecursionError escaping the
parser) from the HTTP connectors; it is a bad request: 400 ``json_too_deep``, nothing emitted."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
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

SECRET = "deep-json-secret"
DEPTH = 100_000


def _slack_headers(body: bytes) -> dict[str, str]:
    ts = str(int(time.time()))
    digest = hmac.new(
        SECRET.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256
    ).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


@pytest.mark.parametrize("connector", ["webhook", "github", "slack"])
@pytest.mark.parametrize("shape", ["array", "object", "in properties"])
def test_a_deeply_nested_body_is_a_400(tmp_path: Path, connector: str, shape: str) -> None:
    payload = {
        "array": b"[" * DEPTH + b"]" * DEPTH,
        "object": b'{"a":' * DEPTH + b"1" + b"}" * DEPTH,
        "in properties": b'{"text": "x", "properties": {"p": '
        + b"[" * DEPTH
        + b"]" * DEPTH
        + b"}}",
    }[shape]
    port = "SLACK_WEBHOOK_PORT" if connector == "slack" else "PORT"
    headers = {
        "webhook": {"X-Signature-256": sign_webhook(SECRET, payload)},
        "github": {"X-Hub-Signature-256": sign_webhook(SECRET, payload), "X-GitHub-Event": "push"},
        "slack": _slack_headers(payload),
    }[connector]

    async def body() -> None:
        inbox = RecordingInbox()
        ctx = make_context(tmp_path, inbox, connector=connector, config={port: "0"},
                           secrets={"SIGNING_SECRET": SECRET})
        async with running(load_connector(connector), ctx) as url:
            assert await post(url, payload, headers) == (
                400,
                {"ok": False, "error": "json_too_deep"},
            )
            assert inbox.calls == 0

    asyncio.run(body())
