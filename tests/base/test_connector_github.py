"""Connector ``github`` of ``@goondan/base`` with GitHub-shaped deliveries over 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    running,
)

github = load_connector("github")
SECRET = "gh-hook-secret"
REPO = {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"}}
SENDER = {"login": "mona", "id": 1}

PUSH = {"ref": "refs/heads/main", "before": "a" * 40, "after": "b" * 40, "repository": REPO,
        "sender": SENDER, "commits": [{"id": "b" * 40, "message": "first"}],
        "head_commit": {"id": "b" * 40, "message": "Fix the parser"}}
PULL = {"action": "opened", "number": 42, "repository": REPO, "sender": SENDER,
        "pull_request": {"number": 42, "title": "Add webhooks", "head": {"ref": "feature/hooks"},
                         "base": {"ref": "main"}}}
ISSUE = {"action": "opened", "repository": REPO, "sender": SENDER,
         "issue": {"number": 7, "title": "It crashes"}}
COMMENT = {"action": "created", "repository": REPO, "sender": SENDER,
           "issue": {"number": 7, "title": "It crashes"}, "comment": {"id": 9, "body": "Me too"}}


def headers(kind: str, body: bytes, delivery: str = "d-1", secret: str = SECRET) -> dict[str, str]:
    return {
        "X-GitHub-Event": kind,
        "X-GitHub-Delivery": delivery,
        "Content-Type": "application/json",
        "X-Hub-Signature-256": "sha256="
        + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
    }


def context(tmp_path: Path, inbox: RecordingInbox, secret_name: str = "SIGNING_SECRET") -> Any:
    return make_context(tmp_path, inbox, connector="github", config={"PORT": "0"},
                        secrets={secret_name: SECRET})


@pytest.mark.parametrize(
    ("kind", "payload", "name", "text", "props"),
    [
        ("push", PUSH, "github_push", "Fix the parser", {"ref": "refs/heads/main"}),
        (
            "pull_request",
            PULL,
            "github_pull_request",
            "Add webhooks",
            {"action": "opened", "number": "42", "ref": "feature/hooks"},
        ),
        ("issues", ISSUE, "github_issue", "It crashes", {"action": "opened", "number": "7"}),
        (
            "issue_comment",
            COMMENT,
            "github_issue_comment",
            "Me too",
            {"action": "created", "number": "7"},
        ),
    ],
)
def test_supported_events(tmp_path: Path, kind: str, payload: dict[str, Any], name: str, text: str,
                          props: dict[str, str]) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(github, context(tmp_path, inbox)) as url:
            raw = json.dumps(payload).encode()
            status, answer = await post(url, raw, headers(kind, raw, delivery=f"guid-{kind}"))
            assert status == 200 and answer["id"] == f"guid-{kind}"
            event = inbox.events[0]
            assert (event.name, event.instance_key, event.message["text"]) == (
                name,
                "github:octo/hello",
                text,
            )
            assert event.properties == {
                "event": kind,
                "repo": "octo/hello",
                "sender": "mona",
                **props,
            }

    asyncio.run(body())


def test_push_without_head_commit_uses_the_last_commit(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(github, context(tmp_path, inbox, "WEBHOOK_SECRET")) as url:
            raw = json.dumps({**PUSH, "head_commit": None}).encode()
            assert (await post(url, raw, headers("push", raw)))[0] == 200
            assert inbox.events[0].message["text"] == "first"

    asyncio.run(body())


def test_redelivery_ping_unsupported_and_refusals(tmp_path: Path) -> None:
    async def body() -> None:
        inbox = RecordingInbox()
        async with running(github, context(tmp_path, inbox, "signingSecret")) as url:
            raw = json.dumps(ISSUE).encode()
            first = await post(url, raw, headers("issues", raw, delivery="same"))
            again = await post(url, raw, headers("issues", raw, delivery="same"))
            assert (first[1]["duplicate"], again[1]["duplicate"]) == (False, True)
            ping = json.dumps({"zen": "Keep it simple.", "hook_id": 1}).encode()
            assert await post(url, ping, headers("ping", ping)) == (200, {"ok": True, "ping": True})
            star = json.dumps({"action": "created", "repository": REPO}).encode()
            assert await post(url, star, headers("star", star)) == (
                200,
                {"ok": True, "ignored": True},
            )
            unsigned = {
                k: v for k, v in headers("issues", raw).items() if k != "X-Hub-Signature-256"
            }
            assert (await post(url, raw, unsigned))[0] == 401
            assert (await post(url, raw, headers("issues", raw, secret="nope")))[0] == 401
            assert (await post(url, b"{oops", headers("issues", b"{oops")))[0] == 400
            no_event = {k: v for k, v in headers("issues", raw).items() if k != "X-GitHub-Event"}
            assert await post(url, raw, no_event) == (400, {"ok": False, "error": "missing_event"})
            assert inbox.calls == 2

    asyncio.run(body())
