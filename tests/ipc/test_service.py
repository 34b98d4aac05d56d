"""Pieces of `goondan run` that need no process: .env loading, backoff, reconcile plans, state
files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from goondan.errors import ConfigError
from goondan.swarm.service import load_env_files, parse_env_file
from goondan.swarm.state import ActiveRuntime, list_live_processes, read_active, write_active
from goondan.swarm.supervision import InstanceRecord, backoff_ms, plan_reconcile


def test_env_files_order_and_real_env_wins(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("A=from-env\nB=from-env\nexport C='quoted # kept'\n# comment\n")
    (tmp_path / ".env.local").write_text('A=from-local\nD="line\\nbreak"\n')
    (tmp_path / "extra.env").write_text("A=from-extra  # trailing comment\n")
    env = {"B": "real"}
    files = load_env_files(tmp_path, "extra.env", env)
    assert [f.name for f in files] == ["extra.env", ".env.local", ".env"]
    assert env == {"A": "from-extra", "B": "real", "C": "quoted # kept", "D": "line\nbreak"}
    with pytest.raises(ConfigError) as info:
        load_env_files(tmp_path, "nope.env", {})
    assert info.value.code == "E_RUN_ENV_FILE" and info.value.exit_code == 3
    (tmp_path / "bad.env").write_text("this is not an assignment\n")
    with pytest.raises(ConfigError):
        parse_env_file(tmp_path / "bad.env")


def test_backoff_follows_decision_11() -> None:
    assert [backoff_ms(n) for n in range(1, 10)] == [0, 0, 0, 0, 0, 1000, 2000, 4000, 8000]
    assert backoff_ms(40) == 300_000


def test_reconcile_plan() -> None:
    crashed = InstanceRecord("a", "k", status="crashLoopBackOff", next_spawn_at=5.0)
    waiting = InstanceRecord("b", "k")
    waiting.queue.append(object())  # type: ignore[arg-type]
    removed = InstanceRecord("gone", "k")
    removed.queue.append(object())  # type: ignore[arg-type]
    assert plan_reconcile(["a", "b"], [crashed, waiting, removed], now=1.0).to_dict() == {
        "toSpawn": [{"agentName": "b", "instanceKey": "k"}],
        "toTerminate": [{"agentName": "gone", "instanceKey": "k", "reason": "config_change"}],
        "toRespawn": [],
    }
    assert plan_reconcile(["a"], [crashed], now=6.0).to_respawn == [("a", "k", 0)]


def test_active_file_and_live_process_rows(state_root: Path) -> None:
    active = ActiveRuntime(
        "demo",
        "/x/goondan.yaml",
        "default",
        os.getpid(),
        "2026-01-01T00:00:00.000Z",
        status_file=str(state_root / "st.json"),
    )
    (state_root / "st.json").write_text(
        json.dumps(
            {
                "processes": [
                    {
                        "process": "a.k",
                        "agentName": "a",
                        "instanceKey": "k",
                        "pid": os.getpid(),
                        "status": "idle",
                        "startedAt": "2026-01-01T00:00:00.000Z",
                    },
                    {
                        "process": "b.k",
                        "agentName": "b",
                        "instanceKey": "k",
                        "pid": 999999999,
                        "status": "idle",
                    },
                ]
            }
        )
    )
    write_active(state_root, active)
    assert read_active(state_root) == active and read_active(state_root, "demo") == active
    rows = {r.process: r for r in list_live_processes(state_root)}
    assert rows["orchestrator"].status == "running" and rows["a.k"].pid == os.getpid()
    assert rows["a.k"].uptime_s and rows["a.k"].uptime_s > 0
    assert rows["b.k"].status == "terminated" and rows["b.k"].pid is None
    (state_root / "runtime" / "active.json").write_text("{broken")
    with pytest.raises(ConfigError):
        read_active(state_root)


FRESH_BUNDLE = """apiVersion: goondan.ai/v1
kind: Package
metadata: {name: fresh}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s, options: {script: ["ok"]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec: {modelConfig: {modelRef: Model/m}, prompts: {systemPrompt: x}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: b}
spec: {modelConfig: {modelRef: Model/m}, prompts: {systemPrompt: x}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: main}
spec: {entryAgent: Agent/a, agents: [{ref: Agent/a}, {ref: Agent/b}]}
"""


def test_restart_fresh_clears_the_history_of_that_agent_only(
    tmp_path: Path, state_root: Path
) -> None:
    """Decision 10 (spec README): ``goondan restart --agent A --fresh`` clears A's history —
    every conversation of A in this bundle's workspace — and keeps the other agents'; a restart
    without ``--fresh`` keeps the history."""
    import asyncio

    from goondan.config import load_bundle
    from goondan.conversation import Message, MessageEvent
    from goondan.swarm.service import SwarmService
    from goondan.workspace import InstanceStore
    from goondan.workspace.paths import workspace_id_for

    bundle_dir = tmp_path / "bundle"
    bundle_dir.mkdir()
    (bundle_dir / "goondan.yaml").write_text(FRESH_BUNDLE)
    bundle = load_bundle(bundle_dir, state_root=state_root)
    workspace = workspace_id_for(bundle.root, bundle.package_name)
    for agent, key in (("a", "k1"), ("a", "k2"), ("b", "k1")):
        store = InstanceStore.open(state_root, workspace, agent, key, fsync=False)
        state = store.load()
        event = MessageEvent.append(Message.user(f"hello {agent}"))
        state.emit(event)
        store.append_event(event, "turn-1")
        store.close()

    def agents_with_history() -> list[str]:
        return sorted(
            json.loads(p.read_text())["agentName"] + ":" + json.loads(p.read_text())["instanceKey"]
            for p in (state_root / "workspaces" / workspace / "instances").glob("*/metadata.json")
        )

    service = SwarmService(bundle, state_root=state_root, log_to_file=False)
    asyncio.run(service.restart("a"))
    assert agents_with_history() == ["a:k1", "a:k2", "b:k1"]
    asyncio.run(service.restart("a", fresh=True))
    assert agents_with_history() == ["b:k1"]
