"""Two swarms talking A2A (docs/serving.md, docs/tools.md "A2A agents"): swarm A declares
``Tool.spec.a2a`` pointing at swarm B's ``a2a`` Connection; both run under ``goondan run`` on
127.0.0.1, each with its own fake provider as the model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.connector_e2e import FAKE_KEY, REPO, base_bundle, goondan_run, webhook_port
from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOKEN = "a2a-interop-token-9012"

B_CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: a2a-in}
spec:
  connectorRef: {kind: Connector, name: a2a, package: "@goondan/base"}
  swarmRef: Swarm/default
  config:
    PORT: {value: "0"}
  secrets:
    AUTH_TOKEN: {valueFrom: {env: A2A_AUTH_TOKEN}}
"""

A_TOOL = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: peer}}
spec:
  a2a:
    url: http://127.0.0.1:{port}/a2a
    headers: {{Authorization: {{valueFrom: {{env: PEER_AUTH}}}}}}
    timeoutMs: 60000
"""


def test_a_swarm_calls_another_swarms_agent_over_a2a_as_a_tool(tmp_path: Path) -> None:
    with FakeProvider() as fake_a, FakeProvider() as fake_b:
        fake_b.enqueue(FakeReply.reply("the answer from B"))
        fake_a.enqueue(FakeReply.calls(("peer__assistant", {"message": "question for B"})),
                       FakeReply.reply("A relays: the answer from B"))
        bundle_b = base_bundle(
            tmp_path / "b", fake_b.base_url("openai"), {"assistant": ""}, B_CONNECTION
        )
        state_b = tmp_path / "state-b"
        with goondan_run(bundle_b, state_b, {"A2A_AUTH_TOKEN": TOKEN}):
            port = webhook_port(state_b, "a2a-in")
            tools = "  tools:\n    - ref: Tool/peer\n"
            bundle_a = base_bundle(tmp_path / "a", fake_a.base_url("openai"), {"caller": tools},
                                   A_TOOL.format(port=port))
            state_a = tmp_path / "state-a"
            env = {**os.environ, FAKE_KEY_ENV: FAKE_KEY, "PEER_AUTH": f"Bearer {TOKEN}"}
            run = subprocess.run(
                [sys.executable, "-m", "goondan", "--state-root", str(state_a), "run", "--bundle",
                 str(bundle_a), "--input", "ask B"], capture_output=True, text=True, timeout=120,
                cwd=REPO, env=env)
            assert run.returncode == 0, (run.stdout, run.stderr)
            assert "A relays: the answer from B" in run.stdout

            # B got A's message; A's model saw B's answer as the tool result
            assert "question for B" in fake_b.requests[0].json["messages"][-1]["content"]
            tool_results = [m for m in fake_a.requests[1].json["messages"] if m["role"] == "tool"]
            assert "the answer from B" in tool_results[0]["content"]
            # the catalog A's model saw: the card's skill as a tool
            names = [t["function"]["name"] for t in fake_a.requests[0].json["tools"]]
            assert "peer__assistant" in names

            trace = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "goondan",
                    "--state-root",
                    str(state_a),
                    "inspect",
                    "trace",
                    "--last",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=REPO,
                env=env,
            )
            assert trace.returncode == 0, trace.stderr
            # the tool call's span, under A's first step: "    peer__assistant  599.0 ms"
            lines = [line.strip() for line in trace.stdout.splitlines()]
            assert any(
                line.startswith("peer__assistant ") and line.endswith(" ms")
                for line in lines[lines.index(next(x for x in lines if x.startswith("step 0"))) :]
            ), trace.stdout
    assert TOKEN not in run.stdout + run.stderr + trace.stdout
