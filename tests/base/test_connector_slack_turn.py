"""Slack end to end in one process: a signed ``app_mention`` reaches the ``slack`` connector,
its event becomes a turn of an embedded Runtime (as the orchestrator's routing would deliver
it), and the agent's ``slack__send`` call reaches the fake Slack Web API in the right thread."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.connectors import ConnectorEvent, event_text
from goondan.llm.testing import ScriptedModel, last_user_text
from goondan.runtime import Runtime
from goondan.types import AgentEvent
from tests.support.connector_harness import (
    RecordingInbox,
    load_connector,
    make_context,
    post,
    running,
)
from tests.support.fake_slack import fake_slack

slack = load_connector("slack")
SECRET = "slack-signing-secret"

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: slack-bot}
spec:
  version: "0.1.0"
  dependencies:
    - {name: "@goondan/base", version: "0.1.0"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: main}
spec: {provider: scripted, model: slack-bot}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: bot}
spec:
  modelConfig: {modelRef: Model/main}
  prompts: {systemPrompt: Answer Slack mentions in their thread.}
  tools:
    - ref: {kind: Tool, name: slack, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/bot, agents: [{ref: Agent/bot}]}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: slack-in}
spec:
  connectorRef: {kind: Connector, name: slack, package: "@goondan/base"}
  config: {SLACK_WEBHOOK_PORT: {value: "0"}}
  secrets: {SLACK_SIGNING_SECRET: {valueFrom: {env: SLACK_SIGNING_SECRET}}}
  ingress:
    rules:
      - match: {event: app_mention}
        route: {agentRef: Agent/bot}
"""


def answer_in_thread(request: Any) -> dict[str, Any]:
    """The model: read the [goondan_context] header and reply with slack__send."""
    header = json.loads(last_user_text(request).split("\n")[1])
    props = header["properties"]
    return {"toolCalls": [{"name": "slack__send", "args": {
        "channelId": props["channel_id"], "threadTs": props.get("thread_ts") or props["ts"],
        "text": "On it!"}}]}


def to_agent_event(event: ConnectorEvent) -> AgentEvent:
    """What the orchestrator's ingress routing hands the agent (docs/connectors.md)."""
    properties = {**event.properties, "connection_name": "slack-in", "connector_name": "slack"}
    return AgentEvent(
        type=event.name,
        input=event_text(event),
        instance_key=event.instance_key,
        source={"kind": "connector", "name": "slack"},
        metadata={"properties": properties},
    )


def test_an_app_mention_is_answered_in_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bundle").mkdir()
    (tmp_path / "bundle" / "goondan.yaml").write_text(BUNDLE)
    model = ScriptedModel([answer_in_thread, "Answered in the thread."])

    async def body() -> None:
        inbox = RecordingInbox()
        ctx = make_context(
            tmp_path / "state",
            inbox,
            connector="slack",
            config={"SLACK_WEBHOOK_PORT": "0"},
            secrets={"SLACK_SIGNING_SECRET": SECRET},
        )
        async with running(slack, ctx) as url:
            raw = json.dumps({"type": "event_callback", "event_id": "Ev42", "event": {
                "type": "app_mention", "user": "U2", "text": "<@UBOT> status?", "channel": "C100",
                "ts": "1715600050.000200", "thread_ts": "1715600000.000100"}}).encode()
            ts = str(int(time.time()))
            sig = (
                "v0="
                + hmac.new(SECRET.encode(), f"v0:{ts}:".encode() + raw, hashlib.sha256).hexdigest()
            )
            status, _ = await post(
                url, raw, {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig}
            )
            assert status == 200
        event = inbox.events[0]
        assert event.instance_key == "slack:C100:1715600000.000100"
        async with Runtime.from_bundle(
            tmp_path / "bundle",
            state_root=tmp_path / "rt",
            models={"bot": model},
            env={"SLACK_SIGNING_SECRET": SECRET},
        ) as rt:
            result = await rt.run_event("bot", to_agent_event(event))
        assert result.finish_reason == "text_response", result.error
        assert result.text == "Answered in the thread."

    with fake_slack() as fake:
        monkeypatch.setenv("SLACK_BOT_TOKEN", fake.token)
        monkeypatch.setenv("SLACK_API_BASE_URL", fake.api_url)
        asyncio.run(body())
        sends = fake.calls_of("chat.postMessage")
        assert len(sends) == 1
        assert sends[0].params == {
            "channel": "C100",
            "thread_ts": "1715600000.000100",
            "text": "On it!",
        }
        assert sends[0].authorization == f"Bearer {fake.token}"
    model.assert_complete()
    header = json.loads(last_user_text(model.requests[0]).split("\n")[1])
    assert (
        header["event"] == "app_mention" and header["instanceKey"] == "slack:C100:1715600000.000100"
    )
    assert header["properties"]["connector_name"] == "slack"
