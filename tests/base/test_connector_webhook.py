"""Connector ``webhook`` of ``@goondan/base`` over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import ConnectorError
from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    raw_exchange,
    running,
    status_of,
    wait_for,
)

webhook = load_connector("webhook")
SECRET = "s3cret-value-for-tests"


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def context(tmp_path: Path, inbox: RecordingInbox, *, secret: bool = True, **config: str) -> Any:
    """``secret=False``: a Connection that opts in to unsigned requests (``ALLOW_UNSIGNED``);
    without a secret and the opt-in the connector refuses to start (tests/hostile)."""
    unsigned = {} if secret else {"ALLOW_UNSIGNED": "true"}
    return make_context(tmp_path, inbox, connector="webhook",
                        config={"PORT": "0", **unsigned, **config},
                        secrets={"SIGNING_SECRET": SECRET} if secret else {})


def test_a_signed_post_is_emitted_and_answered_with_the_receipt(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox)) as url:
            payload = json.dumps(
                {
                    "event": "deploy",
                    "instanceKey": "ops:1",
                    "text": "ship it",
                    "properties": {"route": "ops", "n": 3, "ok": True, "x": {"y": 1}},
                }
            ).encode()
            status, answer = await post(url + "/", payload, {"X-Signature-256": sign(payload)})
            assert status == 200
            event = inbox.events[0]
            assert answer == {"accepted": True, "eventName": "deploy", "instanceKey": "ops:1",
                              "id": event.id, "duplicate": False}
            assert event.message == {"type": "text", "text": "ship it"}
            assert event.properties == {"route": "ops", "n": "3", "ok": "true"}

    asyncio.run(body())


def test_defaults_message_alias_and_hub_signature_header(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox)) as url:
            payload = b'{"message": "hello"}'
            status, answer = await post(url, payload, {"X-Hub-Signature-256": sign(payload)})
            assert status == 200
            assert answer["eventName"] == "webhook_message"
            assert answer["instanceKey"] == "webhook:default"
            assert inbox.events[0].message["text"] == "hello"
            # a bare hex digest (no sha256= prefix) is accepted too
            status, _ = await post(url, payload, {"X-Signature-256": sign(payload)[7:]})
            assert status == 200

    asyncio.run(body())


def test_a_repeated_id_is_accepted_once(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox, secret=False)) as url:
            first = await post(url, {"id": "order-17", "text": "a"})
            second = await post(url, {"id": "order-17", "text": "a"})
            assert first[1]["duplicate"] is False and second[1]["duplicate"] is True
            assert first[1]["id"] == second[1]["id"] == "order-17"
            assert len(inbox.events) == 1

    asyncio.run(body())


@pytest.mark.parametrize(
    ("headers", "payload", "status", "error"),
    [
        ({}, b'{"text": "x"}', 401, "missing_signature"),
        (
            {"X-Signature-256": sign(b'{"text": "other"}')},
            b'{"text": "x"}',
            401,
            "invalid_signature",
        ),
        (
            {"X-Signature-256": sign(b'{"text": "x"}', "wrong-secret")},
            b'{"text": "x"}',
            401,
            "invalid_signature",
        ),
        ({"X-Signature-256": "sha256=zz"}, b'{"text": "x"}', 401, "invalid_signature"),
        ("sign", b"{not json", 400, "invalid_json"),
        ("sign", b"[1, 2]", 400, "invalid_payload"),
        ("sign", b'{"event": 5}', 400, "invalid_payload"),
        ("sign", b'{"properties": "flat"}', 400, "invalid_payload"),
        ("sign", b"\xff\xfe", 400, "invalid_json"),
    ],
)
def test_refused_requests_emit_nothing(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    headers: Any,
    payload: bytes,
    status: int,
    error: str,
) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox)) as url:
            sent = {"X-Signature-256": sign(payload)} if headers == "sign" else headers
            got, answer = await post(url, payload, sent)
            assert (got, answer) == (status, {"ok": False, "error": error})
            assert inbox.calls == 0

    with caplog.at_level(logging.DEBUG):
        asyncio.run(body())
    assert SECRET not in caplog.text
    assert "not json" not in caplog.text and '"x"' not in caplog.text


def test_wrong_path_wrong_method_and_oversized_bodies(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        ctx = context(tmp_path, inbox, PATH="/hooks/in", MAX_BODY_BYTES="64")
        async with running(webhook, ctx) as url:
            assert (await post(url + "/other", b"{}"))[0] == 404
            assert (await post(url + "/hooks/in", b"", method="GET"))[0] == 405
            assert (await post(url + "/hooks/in", b"{}", method="PUT"))[0] == 405
            big = json.dumps({"text": "x" * 100}).encode()
            assert (await post(url + "/hooks/in", big, {"X-Signature-256": sign(big)})) == \
                (413, {"ok": False, "error": "payload_too_large"})
            # a chunked body is capped as it streams in
            chunked = (b"POST /hooks/in HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                       + b"".join(b"20\r\n" + b"a" * 32 + b"\r\n" for _ in range(4)) + b"0\r\n\r\n")
            assert status_of(await raw_exchange(url, chunked)) == 413
            # the query string does not change the path
            small = b'{"text": "q"}'
            assert (await post(url + "/hooks/in?x=1", small, {"X-Signature-256": sign(small)}))[
                0
            ] == 200
            assert inbox.calls == 1

    asyncio.run(body())


def test_the_answer_waits_for_emit_to_return(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        inbox.gate, inbox.entered = asyncio.Event(), asyncio.Event()
        async with running(webhook, context(tmp_path, inbox, secret=False)) as url:
            request = asyncio.create_task(post(url, {"text": "wait"}))
            await asyncio.wait_for(inbox.entered.wait(), 15)
            await asyncio.sleep(0.05)
            assert not request.done()  # no 200 while the event is not durable
            inbox.gate.set()
            assert (await request)[0] == 200

    asyncio.run(body())


def test_an_emit_failure_is_a_503_so_the_sender_retries(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        inbox.fail = OSError("disk full")
        async with running(webhook, context(tmp_path, inbox, secret=False)) as url:
            assert await post(url, {"text": "x"}) == (503, {"ok": False, "error": "not_stored"})

    asyncio.run(body())


def test_keep_alive_serves_many_requests_on_one_connection(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox, secret=False)) as url:
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            for i in range(3):
                data = json.dumps({"text": f"m{i}"}).encode()
                writer.write(
                    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(data), data)
                )
                await writer.drain()
                response = await asyncio.wait_for(_read_one(reader), 15)
                assert status_of(response) == 200
            writer.close()
            await wait_for(lambda: len(inbox.events) == 3, "three events")

    asyncio.run(body())


async def _read_one(reader: asyncio.StreamReader) -> bytes:
    from tests.support.connector_harness import read_response
    return await read_response(reader)


def test_address_file_and_config_errors(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        (tmp_path / "address.json").write_text('{"host": "127.0.0.1", "port": 1}')  # stale
        ctx = context(tmp_path, inbox, secret=False)
        task = asyncio.create_task(webhook.run(ctx))
        await wait_for(
            lambda: (
                (tmp_path / "address.json").exists()
                and json.loads((tmp_path / "address.json").read_text())["port"] != 1
            ),
            "a fresh address",
        )
        data = json.loads((tmp_path / "address.json").read_text())
        assert data["url"] == f"http://127.0.0.1:{data['port']}/"
        assert (await post(data["url"], {"text": "x"}))[0] == 200
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not (tmp_path / "address.json").exists()
        for config, needle in (({}, "PORT is required"), ({"PORT": "http"}, "integer"),
                               ({"PORT": "70000"}, "between 0 and 65535"),
                               ({"PORT": "0", "MAX_BODY_BYTES": "0"}, "at least 1"),
                               ({"PORT": "0", "PATH": "hooks"}, "must start with '/'"),
                               ({"PORT": "0", "MAX_CONNECTIONS_PER_IP": "0"}, "at least 1"),
                               ({"PORT": "0", "MAX_CONNECTIONS": "many"}, "integer")):
            ctx = make_context(tmp_path, inbox, connector="webhook",
                               config={**config, "ALLOW_UNSIGNED": "true"})
            with pytest.raises(ConnectorError) as info:
                await webhook.run(ctx)
            assert info.value.code == "E_BASE_CONNECTOR_CONFIG" and needle in info.value.message

    asyncio.run(body())


def test_a_large_refused_body_still_gets_its_413(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox, secret=False)) as url:
            huge = b'{"text": "' + b"x" * (4 * 1024 * 1024) + b'"}'
            for _ in range(3):
                assert await post(url, huge) == (413, {"ok": False, "error": "payload_too_large"})
            assert inbox.calls == 0

    asyncio.run(body())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_the_signature_recipe_of_the_example_readme_is_accepted(
    tmp_path: Path, repo_root: Path
) -> None:
    readme = (repo_root / "examples" / "webhook" / "README.md").read_text(encoding="utf-8")
    recipe = next(line for line in readme.splitlines() if line.startswith("SIG=$("))
    payload = json.dumps(
        {"text": "The database is down", "properties": {"route": "ops", "service": "db"}}
    )
    script = f"BODY='{payload}'\n{recipe}\nprintf '%s' \"$SIG\""
    signature = subprocess.run(
        ["sh", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"], "WEBHOOK_SIGNING_SECRET": SECRET},
    ).stdout

    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox, PATH="/hooks")) as url:
            status, _ = await post(
                url + "/hooks", payload, {"X-Signature-256": f"sha256={signature}"}
            )
            assert status == 200
            assert inbox.events[0].properties == {"route": "ops", "service": "db"}

    asyncio.run(body())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_the_timestamped_signature_recipe_of_the_docs_is_accepted(
    tmp_path: Path, repo_root: Path
) -> None:
    doc = (repo_root / "docs" / "base-connectors.md").read_text(encoding="utf-8")
    recipe = next(line for line in doc.splitlines() if line.startswith("SIG=$(printf '%s.%s'"))
    payload = json.dumps({"text": "The database is down"})
    script = (
        f"SECRET={SECRET}\nBODY='{payload}'\nTS=$(date "
        f'+%s)\n{recipe}\nprintf \'%s %s\' "$TS" "$SIG"'
    )
    ts, signature = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                                   env={"PATH": os.environ["PATH"]}).stdout.split()

    async def body() -> None:
        inbox = RecordingInbox()
        async with running(webhook, context(tmp_path, inbox, REQUIRE_TIMESTAMP="true")) as url:
            headers = {"X-Signature-Timestamp": ts, "X-Signature-256": f"sha256={signature}"}
            assert (await post(url, payload, headers))[0] == 200
            assert inbox.events[0].message["text"] == "The database is down"

    asyncio.run(body())


def _deciding(ctx: Any, decided: list[tuple[Any, ...]]) -> Any:
    """``ctx`` whose ``decide_approval`` records its calls (the orchestrator's side)."""
    async def decide(approval: str, approve: bool, by: str, via: str, args: Any, note: Any,
                     reason: Any) -> dict[str, Any]:
        decided.append((approval, approve, by, via))
        return {"id": approval, "status": "approved", "decided": True, "decidedBy": by,
                "via": via}

    ctx._decide = decide
    return ctx


@pytest.mark.parametrize(("secret", "approvers", "status"), [
    (True, None, 403),  # APPROVERS unset: nobody may decide (fail closed)
    (True, "alice, ops-lead", 200),
    (False, "ops-lead", 403),  # an unsigned Connection takes no decisions at all
])
def test_an_approval_decision_needs_a_signature_and_a_listed_approver(
    tmp_path: Path, secret: bool, approvers: str | None, status: int
) -> None:
    async def body() -> None:
        decided: list[tuple[Any, ...]] = []
        config = {"PATH": "/hooks", **({"APPROVERS": approvers} if approvers else {})}
        ctx = _deciding(context(tmp_path, RecordingInbox(), secret=secret, **config), decided)
        async with running(webhook, ctx) as url:
            payload = json.dumps({"decision": "approve", "by": "ops-lead"}).encode()
            got, answer = await post(url + "/hooks/approvals/apr_0123", payload,
                                     {"X-Signature-256": sign(payload)})
            assert got == status, answer
            assert decided == ([("apr_0123", True, "ops-lead", "webhook")] if status == 200
                               else [])
            # another path under PATH stays 404
            got, _ = await post(url + "/hooks/other", payload, {"X-Signature-256": sign(payload)})
            assert got == 404

    asyncio.run(body())
