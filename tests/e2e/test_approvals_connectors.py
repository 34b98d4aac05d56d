"""Issue 30: approvals announced and answered where the conversation came from, under
``goondan run --foreground`` with the fake provider (docs/approvals.md, "Connectors").

Slack: the request appears with Approve / Deny buttons in the mention's thread; a signed
``block_actions`` press decides it; a replayed press changes nothing; a press from a user not in
``APPROVERS`` is refused. Telegram: the same with an inline keyboard and ``callback_query``
updates. Webhook: a signed ``POST <PATH>/approvals/<id>``."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from goondan.commands.trace import load_spans
from goondan.runtime.traces import build_tree, format_tree
from goondan.workspace.approvals import Approval, ApprovalStore
from tests.support.connector_e2e import (
    base_bundle,
    goondan_run,
    http_request,
    sign_webhook,
    wait_for,
    webhook_port,
)
from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.fake_slack import fake_slack
from tests.support.fake_telegram import fake_telegram

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BASH = ('  tools:\n    - ref: {kind: Tool, name: bash, package: "@goondan/base"}\n'
        "      approval: required\n")
SECRET = "approvals-e2e-signing-secret"
THREAD = "1715600000.000100"

SLACK = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: slack-in}
spec:
  connectorRef: {kind: Connector, name: slack, package: "@goondan/base"}
  config:
    SLACK_WEBHOOK_PORT: {value: "0"}
    SLACK_WEBHOOK_PATH: {value: /slack/events}
    SLACK_API_BASE_URL: {valueFrom: {env: SLACK_API_BASE_URL}}
    APPROVERS: {value: "U2, U3"}
  secrets:
    SLACK_SIGNING_SECRET: {valueFrom: {env: SLACK_SIGNING_SECRET}}
    SLACK_BOT_TOKEN: {valueFrom: {env: SLACK_BOT_TOKEN}}
"""

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
    APPROVERS: {value: "77"}
  secrets:
    TELEGRAM_BOT_TOKEN: {valueFrom: {env: TG_TOKEN}}
"""

WEBHOOK = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: http-in}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config: {PORT: {value: "0"}, PATH: {value: /hooks}, APPROVERS: {value: ops-lead}}
  secrets: {SIGNING_SECRET: {valueFrom: {env: WEBHOOK_SIGNING_SECRET}}}
"""


def _approvals(state_root: Path) -> list[Approval]:
    found: list[Approval] = []
    for directory in state_root.glob("workspaces/*"):
        found.extend(ApprovalStore(state_root, directory.name).list())
    return found


def _tool_result(fake: FakeProvider) -> str:
    """The content of the tool message the model saw after the approval was decided."""
    message = fake.requests[1].json["messages"][-1]
    assert message["role"] == "tool", message
    return str(message["content"])


def _slack_headers(raw: bytes, content_type: str) -> dict[str, str]:
    ts = str(int(time.time()))
    sig = "v0=" + sign_webhook(SECRET, f"v0:{ts}:".encode() + raw).removeprefix("sha256=")
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig,
            "Content-Type": content_type}


def _press(port: int, user: str, action: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A signed ``block_actions`` interactivity request: ``user`` pressed ``action``."""
    payload = {"type": "block_actions", "user": {"id": user, "username": user},
               "container": {"type": "message", "message_ts": "1715600001.000100",
                             "channel_id": "C100"},
               "channel": {"id": "C100", "name": "ops"},
               "message": {"ts": "1715600001.000100", "text": "Approval needed"},
               "actions": [{**action, "block_id": "b1", "action_ts": "1715600009.1"}],
               "response_url": "http://127.0.0.1:9/unused", "trigger_id": "t1"}
    raw = urlencode({"payload": json.dumps(payload)}).encode()
    return http_request(port, "POST", "/slack/events", raw,
                        _slack_headers(raw, "application/x-www-form-urlencoded"))


def test_slack_approval_buttons_in_the_thread_decide_once_for_approvers_only(
    state_root: Path, tmp_path: Path
) -> None:
    with FakeProvider() as fake, fake_slack() as slack:
        fake.enqueue(FakeReply.calls(("bash__exec", {"command": "echo approved-run"})),
                     FakeReply.reply("Done after approval."))
        bundle = base_bundle(tmp_path / "bundle", fake.base_url("openai"), {"bot": BASH}, SLACK)
        env = {"SLACK_SIGNING_SECRET": SECRET, "SLACK_BOT_TOKEN": slack.token,
               "SLACK_API_BASE_URL": slack.api_url}
        with goondan_run(bundle, state_root, env) as proc:
            port = webhook_port(state_root, "slack-in")
            raw = json.dumps({"type": "event_callback", "event_id": "Ev7", "event": {
                "type": "app_mention", "user": "U2", "text": "<@UBOT> clean up",
                "channel": "C100", "ts": "1715600050.000200", "thread_ts": THREAD}}).encode()
            status, _ = http_request(port, "POST", "/slack/events", raw,
                                     _slack_headers(raw, "application/json"))
            assert status == 200
            wait_for(lambda: slack.calls_of("chat.postMessage"), 60, "the announcement")
            [post] = slack.calls_of("chat.postMessage")
            [pending] = _approvals(state_root)
            assert pending.status == "pending"
            # a press from someone not in APPROVERS: refused, nothing decided
            buttons = {e["action_id"]: e for e in post.params["blocks"][1]["elements"]}
            approve = {k: buttons["goondan_approve"][k] for k in ("action_id", "value", "type")}
            status, answer = _press(port, "U9", approve)
            assert (status, answer["error"]) == (403, "not_an_approver")
            assert _approvals(state_root)[0].status == "pending"
            # an unsigned press: refused before anything else
            status, _ = http_request(port, "POST", "/slack/events", b"payload=%7B%7D",
                                     {"Content-Type": "application/x-www-form-urlencoded"})
            assert status == 401
            status, answer = _press(port, "U2", approve)
            assert status == 200 and answer["decided"] is True and answer["status"] == "approved"
            status, replay = _press(port, "U2", approve)  # the same press again
            assert status == 200 and (replay["decided"], replay["status"]) == (False, "approved")
            # Slack retries, a person double-clicks: the first decision stands
            status, replay = _press(port, "U3", {**approve, "action_id": "goondan_deny"})
            assert status == 200 and replay["decided"] is False
            assert (replay["status"], replay["decidedBy"]) == ("approved", "U2")
            wait_for(lambda: len(fake.requests) >= 2, 60, "the resumed turn")
            wait_for(lambda: slack.calls_of("chat.update"), 60, "the message update")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        fake.assert_all_used()
        updates = slack.calls_of("chat.update")
    assert post.params["channel"] == "C100" and post.params["thread_ts"] == THREAD
    assert post.authorization == f"Bearer {slack.token}"
    assert "bash__exec" in post.params["text"] and pending.id in post.params["text"]
    assert buttons["goondan_approve"]["value"] == pending.id == buttons["goondan_deny"]["value"]
    assert "approved-run" in _tool_result(fake)
    [decided] = _approvals(state_root)
    assert (decided.status, decided.to_dict()["decidedBy"], decided.to_dict()["via"]) == (
        "approved", "U2", "slack:U2")
    assert [u.params["text"] for u in updates] == ["Approved by <@U2>"]


def test_telegram_inline_keyboard_decides_once_for_approvers_only(
    state_root: Path, tmp_path: Path
) -> None:
    with FakeProvider() as fake, fake_telegram() as telegram:
        fake.enqueue(FakeReply.calls(("bash__exec", {"command": "echo approved-run"})),
                     FakeReply.reply("Done after approval."))
        bundle = base_bundle(tmp_path / "bundle", fake.base_url("openai"), {"bot": BASH},
                             TELEGRAM)
        env = {"TG_API": telegram.url, "TG_TOKEN": telegram.token}
        telegram.add_text(42, "clean up")
        with goondan_run(bundle, state_root, env) as proc:
            wait_for(lambda: [c for c in telegram.calls_of("sendMessage")
                              if "reply_markup" in c.params], 60, "the announcement")
            [send] = telegram.calls_of("sendMessage")
            [[approve, deny]] = send.params["reply_markup"]["inline_keyboard"]
            telegram.add_callback(42, 99, approve["callback_data"])  # not an approver
            telegram.add_callback(42, 77, approve["callback_data"])
            telegram.add_callback(42, 77, deny["callback_data"])  # a later press: no change
            wait_for(lambda: len(telegram.calls_of("answerCallbackQuery")) >= 3, 60,
                     "the three answers")
            wait_for(lambda: len(fake.requests) >= 2, 60, "the resumed turn")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        fake.assert_all_used()
        answers = [c.params["text"] for c in telegram.calls_of("answerCallbackQuery")]
    [decided] = _approvals(state_root)
    assert str(send.params["chat_id"]) == "42" and decided.id in send.params["text"]
    assert approve["callback_data"] == f"gdn:a:{decided.id}"
    assert answers[0] == "You may not decide this approval."
    assert answers[1] == f"{decided.id} approved"
    assert answers[2] == f"{decided.id} approved (already, by 77)"
    assert (decided.status, decided.to_dict()["via"]) == ("approved", "telegram:77")
    assert "approved-run" in _tool_result(fake)


def test_webhook_signed_decision_post_denies_once_for_approvers_only(
    state_root: Path, tmp_path: Path
) -> None:
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.calls(("bash__exec", {"command": "echo never"})),
                     FakeReply.reply("Understood, not run."))
        bundle = base_bundle(tmp_path / "bundle", fake.base_url("openai"), {"bot": BASH}, WEBHOOK)
        with goondan_run(bundle, state_root, {"WEBHOOK_SIGNING_SECRET": SECRET}) as proc:
            port = webhook_port(state_root, "http-in")

            def post(path: str, body: dict[str, Any], signed: bool = True) -> Any:
                raw = json.dumps(body).encode()
                headers = {"X-Signature-256": sign_webhook(SECRET, raw)} if signed else {}
                return http_request(port, "POST", path, raw, headers)

            assert post("/hooks", {"text": "clean up"})[0] == 200
            wait_for(lambda: _approvals(state_root), 60, "the approval request")
            ident = _approvals(state_root)[0].id
            deny = {"decision": "deny", "by": "ops-lead", "reason": "not today"}
            assert post(f"/hooks/approvals/{ident}", deny, signed=False)[0] == 401
            status, answer = post(f"/hooks/approvals/{ident}", {**deny, "by": "mallory"})
            assert (status, answer["error"]) == (403, "not_an_approver")
            assert post(f"/hooks/approvals/{ident}", {**deny, "decision": "maybe"})[0] == 400
            assert post("/hooks/approvals/apr_unknown", deny)[0] == 404
            status, answer = post(f"/hooks/approvals/{ident}", deny)
            assert status == 200 and (answer["status"], answer["decided"]) == ("denied", True)
            status, answer = post(f"/hooks/approvals/{ident}", {**deny, "decision": "approve"})
            assert status == 200 and (answer["status"], answer["decided"]) == ("denied", False)
            wait_for(lambda: len(fake.requests) >= 2, 60, "the resumed turn")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
        fake.assert_all_used()
    result = _tool_result(fake)
    assert "E_APPROVAL_DENIED" in result and "not today" in result
    [decided] = _approvals(state_root)
    assert (decided.to_dict()["decidedBy"], decided.to_dict()["via"]) == ("ops-lead", "webhook")
    # inspect trace shows the wait: a span under the waiting tool call, closed by the decision
    spans = load_spans(state_root)
    [wait] = [s for s in spans if s.kind == "approval"]
    [call] = [s for s in spans if s.span_id == wait.parent_span_id]
    assert (call.kind, wait.name, wait.attributes["approvalId"]) == (
        "toolCall", "approval bash__exec", decided.id)
    assert wait.duration_ms is not None and wait.duration_ms > 0
    lines = format_tree(build_tree(s for s in spans if s.trace_id == wait.trace_id))
    [line] = [line for line in lines if "approval bash__exec" in line]
    assert line.endswith(": denied by ops-lead via webhook"), lines
