"""Every ``agents__*`` tool under ``goondan run``: real agent processes, real HTTP.

``agents__spawn`` and ``agents__list`` used to time out there (the orchestrator's
``runtime.answer`` was dropped by the agent process); ``request``, ``send`` and ``catalog``
are exercised in the same turn, and an ``async`` request's answer comes back through the
orchestrator as a later turn. The example delegation bundle's scripted Models are swapped for
OpenAI-wire Models pointing at the fake server, one reply queue per model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import FAKE_KEY_ENV, delegation_over_http

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def _bundle(tmp_path: Path, endpoint: str) -> Path:
    return delegation_over_http(tmp_path, endpoint, provider="openai-compatible")


def _run(bundle: Path, state_root: Path, text: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, FAKE_KEY_ENV: "sk-agents-tools-key"}
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), "run",
         "--bundle", str(bundle), "--input", text],
        capture_output=True, text=True, timeout=150, env=env, check=False,
    )


def _results(body: dict[str, Any]) -> dict[str, Any]:
    """Tool results of a request, by the called tool's name."""
    names = {c["id"]: c["function"]["name"] for m in body["messages"] if m["role"] == "assistant"
             for c in m.get("tool_calls") or []}
    return {names[m["tool_call_id"]]: json.loads(m["content"])
            for m in body["messages"] if m["role"] == "tool"}


def test_every_agents_tool_works_under_goondan_run(tmp_path: Path, state_root: Path) -> None:
    coordinator, worker = "fake-coordinator", "fake-worker"
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(
                FakeToolCall("agents__catalog", {}),
                FakeToolCall("agents__spawn", {"target": "worker", "instanceKey": "w1"}),
                FakeToolCall("agents__list", {}),
                for_model=coordinator,
            ),
            FakeReply.calls(
                FakeToolCall(
                    "agents__send", {"target": "worker", "instanceKey": "w1", "input": "note this"}
                ),
                FakeToolCall(
                    "agents__request",
                    {
                        "target": "worker",
                        "instanceKey": "w1",
                        "input": "Compute 17 * 23.",
                        "timeoutMs": 120000,
                    },
                ),
                for_model=coordinator,
            ),
            FakeReply.reply("The worker computed 391.", for_model=coordinator),
            # The worker runs the send first (its own FIFO), then the request.
            FakeReply.reply("noted", for_model=worker),
            FakeReply.reply("17 * 23 = 391", for_model=worker),
        )
        done = _run(_bundle(tmp_path, fake.base_url("openai")), state_root, "Go.")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "The worker computed 391."
        fake.assert_all_used()
        final = [r.json for r in fake.requests if r.json["model"] == coordinator][-1]
    results = _results(final)
    assert results["agents__catalog"]["callableAgents"] == ["worker"]
    assert results["agents__spawn"] == {
        "target": "worker",
        "instanceKey": "w1",
        "spawned": True,
        "cwd": None,
    }
    assert results["agents__list"]["count"] == 1
    assert results["agents__list"]["agents"][0]["instanceKey"] == "w1"
    assert results["agents__send"]["accepted"] is True
    assert results["agents__request"]["response"] == "17 * 23 = 391"


def test_an_async_request_under_the_orchestrator_answers_with_a_later_turn(
    tmp_path: Path, state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer of ``agents__request {async: true}`` crosses the orchestrator as a new event of
    the calling process and runs a turn of its own."""
    import asyncio

    from goondan.runtime.agents import response_text
    from goondan.swarm.orchestrator import Orchestrator
    from goondan.swarm.spawner import ProcessSpawner

    coordinator, worker = "fake-coordinator", "fake-worker"
    monkeypatch.setenv(FAKE_KEY_ENV, "sk-agents-tools-key")
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(
                FakeToolCall(
                    "agents__request",
                    {"target": "worker", "input": "Compute 2 + 2.", "async": True},
                ),
                for_model=coordinator,
            ),
            FakeReply.reply("I asked the worker; the answer will follow.", for_model=coordinator),
            FakeReply.reply("2 + 2 = 4", for_model=worker),
            FakeReply.reply("The worker says 4.", for_model=coordinator),
        )
        bundle = _bundle(tmp_path, fake.base_url("openai"))

        async def main() -> str:
            spawner = ProcessSpawner(bundle, state_root=state_root, log_dir=state_root / "logs")
            orch = Orchestrator(
                spawner,
                swarm_name="default",
                entry_agent="coordinator",
                agents=["coordinator", "worker"],
                project_root=bundle,
                grace_period_ms=5000,
            )
            async with orch:
                first = response_text(await orch.request("coordinator", "Go.", instance_key="cli",
                                                         timeout_ms=60_000))
                record = orch.records[("coordinator", "cli")]
                async with asyncio.timeout(60):  # failure-only deadline
                    while record.processed < 2:
                        await asyncio.sleep(0.05)
                return first

        first = asyncio.run(main())
        fake.assert_all_used()
        bodies = [r.json for r in fake.requests if r.json["model"] == coordinator]
    assert first == "I asked the worker; the answer will follow."
    returned = json.loads(bodies[1]["messages"][-1]["content"])
    assert returned["async"] is True and returned["response"] is None
    answer = bodies[2]["messages"][-1]
    assert answer["role"] == "user" and answer["content"].endswith("2 + 2 = 4")
    assert '"asyncResponseTo"' in answer["content"]
