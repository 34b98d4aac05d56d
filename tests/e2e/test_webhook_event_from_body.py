"""A rule matching an event name the Connector does not declare (connectors.md §3: a name
SHOULD be declared) is a warning, not an error: the built-in ``webhook`` takes the event name
from the body (``{"event": "order", …}``), so such a rule validates and routes (issue 28). With
rules and none matching, an event is dropped (Decision 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from goondan import cli
from goondan.config import validate_bundle
from tests.support.connector_e2e import (
    base_bundle,
    goondan_run,
    http_request,
    instances,
    sign_webhook,
    wait_for,
    webhook_port,
)

SECRET = "order-hook-signing-secret"

# The webhook example's Connection (examples/webhook) with a rule for the body's "order" event.
CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: http-in}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  swarmRef: Swarm/default
  config:
    PORT: {value: "0"}
    PATH: {value: /hooks}
  secrets:
    SIGNING_SECRET: {valueFrom: {env: WEBHOOK_SIGNING_SECRET}}
  ingress:
    rules:
      - match: {event: order}
        route: {agentRef: Agent/orders, instanceKeyProperty: customer, instanceKeyPrefix: "order:"}
      - match: {event: webhook_message, properties: {route: ops}}
        route: {agentRef: Agent/ops, instanceKeyProperty: service, instanceKeyPrefix: "alert:"}
"""


def _bundle(tmp_path: Path) -> Path:
    return base_bundle(
        tmp_path / "bundle", None, {"assistant": "", "ops": "", "orders": ""}, CONNECTION
    )


def test_a_rule_for_an_undeclared_event_validates_with_a_warning(
        tmp_path: Path, state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _bundle(tmp_path)
    report = validate_bundle(bundle, env={"WEBHOOK_SIGNING_SECRET": SECRET}, state_root=state_root)
    assert report.valid and not report.errors, [d.to_dict() for d in report.errors]
    [warning] = [d for d in report.warnings if d.code == "W_CONFIG_UNKNOWN_EVENT"]
    assert warning.resource == "Connection/http-in" and "'order'" in warning.message
    assert warning.field == "spec.ingress.rules[0].match.event"
    # the CLI: exit 0 with the warning; --strict makes warnings errors (exit 4)
    for args, expected in (([], 0), (["--strict"], 4)):
        with pytest.raises(SystemExit) as info:
            cli.main(["--state-root", str(state_root), "validate", str(bundle), *args])
        out, _ = capsys.readouterr()
        assert int(info.value.code or 0) == expected, out
        assert "W_CONFIG_UNKNOWN_EVENT" in out


@pytest.mark.e2e
def test_a_signed_order_event_is_routed_by_the_rule_for_it(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = _bundle(tmp_path)
    with goondan_run(bundle, state_root, {"WEBHOOK_SIGNING_SECRET": SECRET}):
        port = webhook_port(state_root, "http-in")
        # Decision 15: the Connection has rules and none matches a plain message: dropped
        stray = json.dumps({"id": "stray-1", "text": "anyone?"}).encode()
        status, answer = http_request(
            port, "POST", "/hooks", stray, {"X-Signature-256": sign_webhook(SECRET, stray)}
        )
        assert status == 200 and answer["dropped"] is True and answer["id"] == "stray-1", answer
        body = json.dumps({"id": "order-7", "event": "order", "text": "two lamps",
                           "properties": {"customer": "c42"}}).encode()
        status, answer = http_request(
            port, "POST", "/hooks", body, {"X-Signature-256": sign_webhook(SECRET, body)}
        )
        assert status == 200 and answer["eventName"] == "order" and answer["accepted"] is True, (
            answer
        )
        wait_for(lambda: "order:c42" in instances(state_root)
                 and "ok" in instances(state_root)["order:c42"]["messages"], 60, "the order turn")
    stored = instances(state_root)
    assert set(stored) == {"order:c42"}  # the dropped message started no conversation
    assert stored["order:c42"]["metadata"]["agentName"] == "orders"
    assert "two lamps" in stored["order:c42"]["messages"]
    inbox = next(state_root.glob("workspaces/*/connections/default/http-in/inbox.jsonl"))
    [record] = [json.loads(line) for line in inbox.read_text().splitlines()]
    assert (record["agent"], record["instanceKey"], record["event"]["name"]) == (
        "orders",
        "order:c42",
        "order",
    )
