"""Issue 7 acceptance: examples/delegation end to end through the fake provider HTTP server.

The example's two scripted Models are swapped for OpenAI-wire Models pointing at the fake
server; `goondan run --input` then runs coordinator and worker as separate processes, and every
model call crosses real HTTP: coordinator (asks the worker) → worker (answers) → coordinator
(uses the answer in the same turn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.runtime_harness import FAKE_KEY_ENV, delegation_over_http

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _bundle(tmp_path: Path, endpoint: str) -> Path:
    return delegation_over_http(tmp_path, endpoint, provider="openai")


def test_coordinator_uses_the_workers_answer_through_http(tmp_path: Path, state_root: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(("agents__request", {"target": "worker", "input": "Compute 17 * 23."}),
                            text="Let me ask the worker."),
            FakeReply.reply("17 * 23 = 391"),
            FakeReply.reply("The worker computed 391."),
        )
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-delegation-test-key"}
        done = subprocess.run(
            [sys.executable, "-m", "goondan", "--state-root", str(state_root), "run",
             "--bundle", str(bundle), "--input", "What is 17 * 23?"],
            capture_output=True, text=True, timeout=90, env=env, check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "The worker computed 391."
        fake.assert_all_used()
        coordinator_first, worker, coordinator_second = fake.requests
    assert [r.json["model"] for r in fake.requests] == [
        "fake-coordinator",
        "fake-worker",
        "fake-coordinator",
    ]
    assert all(r.header("Authorization") == "Bearer sk-delegation-test-key" for r in fake.requests)
    assert [t["function"]["name"] for t in coordinator_first.json["tools"]] == [
        "agents__request", "agents__send", "agents__spawn", "agents__list", "agents__catalog"]
    # The worker's turn is the coordinator's request, tagged with who asked.
    worker_user = worker.json["messages"][-1]
    assert worker_user["role"] == "user" and worker_user["content"].endswith("Compute 17 * 23.")
    assert '"from_agent":"coordinator"' in worker_user["content"].replace(" ", "")
    # The coordinator's second call carries the worker's answer as the tool result.
    tool_message = coordinator_second.json["messages"][-1]
    assert tool_message["role"] == "tool"
    result = json.loads(tool_message["content"])
    assert result["target"] == "worker" and result["response"] == "17 * 23 = 391"
    assert (
        tool_message["tool_call_id"]
        == coordinator_second.json["messages"][-2]["tool_calls"][0]["id"]
    )
