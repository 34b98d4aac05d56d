"""The built-in connectors end to end under ``goondan run --foreground`` (real processes:
orchestrator, connector, agents) with the fake provider (OpenAI wire) as every agent's model:
``webhook`` routing and refusals, ``slack`` answering in the thread through the fake Slack Web
API, ``discord`` answering a signed slash command through the fake Discord API,
``telegram-polling`` consuming each update once across a restart of the swarm."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.connector_e2e import (
    base_bundle,
    goondan_run,
    http_request,
    instances,
    sign_webhook,
    wait_for,
    webhook_port,
)
from tests.support.fake_discord import fake_discord
from tests.support.fake_provider import FakeProvider, FakeReply, RecordedRequest
from tests.support.fake_slack import fake_slack
from tests.support.fake_telegram import fake_telegram

pytestmark = [pytest.mark.e2e]
SECRET = "webhook-e2e-signing-secret"

WEBHOOK = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: http-in}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config:
    PORT: {value: "0"}
    PATH: {value: /hooks}
    MAX_BODY_BYTES: {value: "2048"}
  secrets:
    SIGNING_SECRET: {valueFrom: {env: WEBHOOK_SIGNING_SECRET}}
  ingress:
    rules:
      - match: {event: webhook_message, properties: {route: ops}}
        route: {agentRef: Agent/ops, instanceKeyProperty: service, instanceKeyPrefix: "alert:"}
      - route: {}
"""


def context_header(request: RecordedRequest) -> tuple[dict[str, Any], str]:
    """The ``[goondan_context]`` JSON and the text after it, from the last user message."""
    user = [m for m in request.json["messages"] if m["role"] == "user"][-1]["content"]
    head, _, text = user.partition("[/goondan_context]\n")
    lines = head.splitlines()
    assert lines[0] == "[goondan_context]", user
    return json.loads(lines[1]), text


def test_webhook_routes_signed_posts_and_refuses_the_rest(state_root: Path, tmp_path: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.reply("ops on it"), FakeReply.reply("assistant here"))
        bundle = base_bundle(
            tmp_path / "bundle", fake.base_url("openai"), {"assistant": "", "ops": ""}, WEBHOOK
        )
        with goondan_run(bundle, state_root, {"WEBHOOK_SIGNING_SECRET": SECRET}) as proc:
            port = webhook_port(state_root, "http-in")
            good = json.dumps(
                {
                    "id": "alert-1",
                    "text": "disk full on db-1",
                    "properties": {"route": "ops", "service": "db", "severity": 2},
                }
            ).encode()
            refused = [
                ("POST", "/hooks", good, {}, 401, "missing_signature"),
                (
                    "POST",
                    "/hooks",
                    good,
                    {"X-Signature-256": sign_webhook("wrong", good)},
                    401,
                    "invalid_signature",
                ),
                (
                    "POST",
                    "/hooks",
                    b"{not json",
                    {"X-Signature-256": sign_webhook(SECRET, b"{not json")},
                    400,
                    "invalid_json",
                ),
                (
                    "POST",
                    "/hooks",
                    b"[1]",
                    {"X-Signature-256": sign_webhook(SECRET, b"[1]")},
                    400,
                    "invalid_payload",
                ),
                (
                    "POST",
                    "/hooks",
                    b"x" * 4096,
                    {"X-Signature-256": sign_webhook(SECRET, b"x" * 4096)},
                    413,
                    "payload_too_large",
                ),
                (
                    "POST",
                    "/other",
                    good,
                    {"X-Signature-256": sign_webhook(SECRET, good)},
                    404,
                    "not_found",
                ),
                ("GET", "/hooks", b"", {}, 405, "method_not_allowed"),
            ]
            for method, path, body, headers, status, error in refused:
                assert http_request(port, method, path, body, headers) == (
                    status,
                    {"ok": False, "error": error},
                ), (method, path, status)
            # a signed POST matching the properties rule → the non-entry agent ops, key
            # alert:<service>
            status, answer = http_request(
                port, "POST", "/hooks", good, {"X-Signature-256": sign_webhook(SECRET, good)}
            )
            assert (status, answer) == (
                200,
                {
                    "accepted": True,
                    "eventName": "webhook_message",
                    "instanceKey": "webhook:default",
                    "id": "alert-1",
                    "duplicate": False,
                },
            )
            first = fake.wait_for_requests(1, timeout=60)[0]
            # the catch-all → the entry agent, the body's own instanceKey
            other = json.dumps(
                {"text": "hello", "instanceKey": "web:42", "properties": {"route": "dev"}}
            ).encode()
            status, answer = http_request(
                port, "POST", "/hooks", other, {"X-Hub-Signature-256": sign_webhook(SECRET, other)}
            )
            assert status == 200 and answer["instanceKey"] == "web:42"
            wait_for(
                lambda: (
                    {"alert:db", "web:42"} <= set(instances(state_root))
                    and all("assistant" in i["messages"] for i in instances(state_root).values())
                ),
                60,
                "both turns",
            )
            # a retried delivery (same id) is accepted once
            status, answer = http_request(
                port, "POST", "/hooks", good, {"X-Signature-256": sign_webhook(SECRET, good)}
            )
            assert status == 200 and answer["duplicate"] is True
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        fake.assert_all_used()
    # exactly the two accepted events reached a model: no refused request started a turn
    assert len(fake.requests) == 2
    header, text = context_header(first)
    assert text == "disk full on db-1"
    assert first.json["messages"][0]["content"].startswith("You are ops.")
    assert header["event"] == "webhook_message" and header["instanceKey"] == "alert:db"
    assert header["source"] == {"kind": "connector", "name": "webhook"}
    assert header["properties"] == {"route": "ops", "service": "db", "severity": "2",
                                    "connection_name": "http-in", "connector_name": "webhook"}
    header, text = context_header(fake.requests[1])
    assert (header["instanceKey"], text) == ("web:42", "hello")
    assert fake.requests[1].json["messages"][0]["content"].startswith("You are assistant.")
    stored = instances(state_root)
    assert set(stored) == {"alert:db", "web:42"}
    assert stored["alert:db"]["metadata"]["agentName"] == "ops"
    assert stored["web:42"]["metadata"]["agentName"] == "assistant"
    assert (
        "disk full on db-1" in stored["alert:db"]["messages"]
        and "ops on it" in stored["alert:db"]["messages"]
    )
    inbox = next(state_root.glob("workspaces/*/connections/default/http-in/inbox.jsonl"))
    assert [json.loads(line)["instanceKey"] for line in inbox.read_text().splitlines()] == [
        "alert:db",
        "web:42",
    ]


SLACK = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: slack-in}
spec:
  connectorRef: {kind: Connector, name: slack, package: "@goondan/base"}
  config: {SLACK_WEBHOOK_PORT: {value: "0"}, SLACK_WEBHOOK_PATH: {value: /slack/events}}
  secrets: {SLACK_SIGNING_SECRET: {valueFrom: {env: SLACK_SIGNING_SECRET}}}
  ingress:
    rules:
      - match: {event: app_mention}
        route: {agentRef: Agent/bot}
"""
SLACK_TOOLS = "  tools:\n    - ref: {kind: Tool, name: slack, package: \"@goondan/base\"}\n"


def test_slack_app_mention_is_answered_in_its_thread(state_root: Path, tmp_path: Path) -> None:
    secret = "slack-e2e-signing-secret"
    with FakeProvider() as fake, fake_slack() as slack:
        # the model answers with slack__send in the channel and thread of the context header
        fake.enqueue(
            FakeReply.calls(("slack__send", {"channelId": "C100", "threadTs": "1715600000.000100",
                                             "text": "On it!"})),
            FakeReply.reply("Answered in the thread."),
        )
        bundle = base_bundle(
            tmp_path / "bundle", fake.base_url("openai"), {"triage": "", "bot": SLACK_TOOLS}, SLACK
        )
        env = {
            "SLACK_SIGNING_SECRET": secret,
            "SLACK_BOT_TOKEN": slack.token,
            "SLACK_API_BASE_URL": slack.api_url,
        }
        with goondan_run(bundle, state_root, env) as proc:
            port = webhook_port(state_root, "slack-in")
            raw = json.dumps({"type": "event_callback", "event_id": "Ev42", "event": {
                "type": "app_mention", "user": "U2", "text": "<@UBOT> status?", "channel": "C100",
                "ts": "1715600050.000200", "thread_ts": "1715600000.000100"}}).encode()
            ts = str(int(time.time()))
            sig = "v0=" + sign_webhook(secret, f"v0:{ts}:".encode() + raw).removeprefix("sha256=")
            headers = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig}
            status, answer = http_request(port, "POST", "/slack/events", raw, headers)
            assert status == 200 and answer["accepted"] is True
            # Slack retries a slow delivery: the retry starts no second turn
            status, answer = http_request(
                port, "POST", "/slack/events", raw, {**headers, "X-Slack-Retry-Num": "1"}
            )
            assert status == 200 and answer["duplicate"] is True
            wait_for(
                lambda: len(fake.requests) >= 2 and slack.calls_of("chat.postMessage"),
                60,
                "the answer",
            )
            wait_for(
                lambda: (
                    "Answered in the thread."
                    in instances(state_root)
                    .get("slack:C100:1715600000.000100", {})
                    .get("messages", "")
                ),
                60,
                "the turn",
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        fake.assert_all_used()
        sends = slack.calls_of("chat.postMessage")
    assert [s.params for s in sends] == [
        {"channel": "C100", "thread_ts": "1715600000.000100", "text": "On it!"}
    ]
    assert sends[0].authorization == f"Bearer {slack.token}"
    header, text = context_header(fake.requests[0])
    assert text == "<@UBOT> status?"
    assert (
        header["event"] == "app_mention" and header["instanceKey"] == "slack:C100:1715600000.000100"
    )
    props = header["properties"]
    assert (props["channel_id"], props["thread_ts"], props["connector_name"]) == (
        "C100",
        "1715600000.000100",
        "slack",
    )
    assert "slack__send" in [t["function"]["name"] for t in fake.requests[0].json["tools"]]
    assert fake.requests[0].json["messages"][0]["content"].startswith("You are bot.")
    tool_result = fake.requests[1].json["messages"][-1]
    assert tool_result["role"] == "tool" and json.loads(tool_result["content"])["ok"] is True


DISCORD = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: discord-in}
spec:
  connectorRef: {kind: Connector, name: discord, package: "@goondan/base"}
  config: {PORT: {value: "0"}, PATH: {value: /interactions}}
  secrets: {DISCORD_PUBLIC_KEY: {valueFrom: {env: DISCORD_PUBLIC_KEY}}}
  ingress:
    rules:
      - match: {event: slash_command}
        route: {agentRef: Agent/bot}
"""
DISCORD_TOOLS = "  tools:\n    - ref: {kind: Tool, name: discord, package: \"@goondan/base\"}\n"


def test_discord_slash_command_is_answered_through_the_interaction(
    state_root: Path, tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        .hex()
    )
    token = "aW50ZXJhY3Rpb24-e2e-token"
    with FakeProvider() as fake, fake_discord() as discord:
        discord.interaction_tokens.add(token)
        fake.enqueue(
            FakeReply.calls(("discord__reply", {"applicationId": "1042", "interactionToken": token,
                                                "content": "Deployed main to staging."})),
            FakeReply.reply("Answered."),
        )
        bundle = base_bundle(
            tmp_path / "bundle",
            fake.base_url("openai"),
            {"triage": "", "bot": DISCORD_TOOLS},
            DISCORD,
        )
        env = {"DISCORD_PUBLIC_KEY": public, "DISCORD_API_BASE_URL": discord.api}
        with goondan_run(bundle, state_root, env) as proc:
            port = webhook_port(state_root, "discord-in")
            ping = json.dumps(
                {"id": "1", "application_id": "1042", "type": 1, "token": "t", "version": 1}
            ).encode()
            raw = json.dumps(
                {
                    "id": "1100",
                    "application_id": "1042",
                    "type": 2,
                    "token": token,
                    "version": 1,
                    "channel_id": "C9",
                    "guild_id": "G1",
                    "member": {"user": {"id": "U5", "username": "alice"}},
                    "data": {
                        "id": "c1",
                        "name": "deploy",
                        "type": 1,
                        "options": [{"name": "branch", "type": 3, "value": "main"}],
                    },
                }
            ).encode()

            def headers(body: bytes) -> dict[str, str]:
                ts = str(int(time.time()))
                return {
                    "X-Signature-Ed25519": key.sign(ts.encode() + body).hex(),
                    "X-Signature-Timestamp": ts,
                }

            assert http_request(port, "POST", "/interactions", ping, headers(ping)) == (
                200,
                {"type": 1},
            )
            assert http_request(port, "POST", "/interactions", ping, {})[0] == 401
            assert http_request(port, "POST", "/interactions", raw, headers(raw)) == (
                200,
                {"type": 5},
            )
            wait_for(
                lambda: (
                    "Answered." in instances(state_root).get("discord:C9", {}).get("messages", "")
                ),
                60,
                "the turn",
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        fake.assert_all_used()
    assert [(m, p, b) for m, p, b, _ in discord.calls] == [
        (
            "PATCH",
            f"/api/v10/webhooks/1042/{token}/messages/@original",
            {"content": "Deployed main to staging."},
        )
    ]
    header, text = context_header(fake.requests[0])
    assert text == "/deploy branch=main"
    assert header["event"] == "slash_command" and header["instanceKey"] == "discord:C9"
    props = header["properties"]
    assert (props["application_id"], props["interaction_token"], props["command_name"]) == (
        "1042",
        token,
        "deploy",
    )
    assert fake.requests[0].json["messages"][0]["content"].startswith("You are bot.")


TELEGRAM = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: tg}
spec:
  connectorRef: {kind: Connector, name: telegram-polling, package: "@goondan/base"}
  config:
    TELEGRAM_POLL_TIMEOUT_SECONDS: {value: "1"}
    TELEGRAM_RETRY_DELAY_MS: {value: "50"}
    TELEGRAM_API_BASE_URL: {valueFrom: {env: TG_API}}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: TG_TOKEN}}
"""


def _user_texts(fake: FakeProvider) -> list[str]:
    return [context_header(r)[1] for r in fake.requests]


def test_telegram_updates_are_consumed_once_across_a_restart(
    state_root: Path, tmp_path: Path
) -> None:
    with FakeProvider() as fake, fake_telegram() as telegram:
        fake.enqueue(*[FakeReply.reply(f"reply {i}") for i in range(6)])
        bundle = base_bundle(tmp_path / "bundle", fake.base_url("openai"), {"bot": ""}, TELEGRAM)
        env = {"TG_API": telegram.url, "TG_TOKEN": telegram.token}
        for i in range(3):
            telegram.add_text(42, f"msg {i}")
        with goondan_run(bundle, state_root, env) as proc:
            # stop as soon as the first turn started: the others may be stored but not yet run
            fake.wait_for_requests(1, timeout=60)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        first_run = len(fake.requests)
        for i in range(3, 6):
            telegram.add_text(42 if i < 5 else 7, f"msg {i}")
        with goondan_run(bundle, state_root, env) as proc:
            wait_for(lambda: len(fake.requests) >= 6, 60, "every update's turn")
            wait_for(
                lambda: (
                    "reply 5" in "".join(i["messages"] for i in instances(state_root).values())
                    and sum(i["messages"].count("reply ") for i in instances(state_root).values())
                    >= 6
                ),
                60,
                "the stored answers",
            )
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        fake.assert_all_used()
        texts = sorted(_user_texts(fake))
        offsets = [c.params.get("offset") for c in telegram.calls_of("getUpdates")]
    assert texts == [f"msg {i}" for i in range(6)]  # none lost, none twice
    assert 1 <= first_run <= 3
    stored = instances(state_root)
    assert set(stored) == {"telegram:42", "telegram:7"}
    for i in range(6):
        key = "telegram:7" if i == 5 else "telegram:42"
        assert (
            stored[key]["messages"].count(f"msg {i}\\") + stored[key]["messages"].count(f'msg {i}"')
            == 1
        ), i
    # the second run resumed from the stored offset (past the first three updates)
    assert any(o is not None and int(o) >= 1003 for o in offsets)
