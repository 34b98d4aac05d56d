"""``Swarm.spec.policy.idleTimeoutMs``: idle workers are released and re-created on demand
(docs/scaling.md, "Idle instances")."""

from __future__ import annotations

import shutil
from pathlib import Path

from goondan.config import load_bundle
from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner, ProcessSpawner
from tests.support.aio import run_bounded as run
from tests.support.ipc_agents import in_process_worker

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def test_idle_workers_are_released_and_the_next_event_respawns_them() -> None:
    async def main() -> None:
        spawner = InProcessSpawner(in_process_worker(["a"], None))
        orch = Orchestrator(spawner, swarm_name="t", entry_agent="a", agents=["a"],
                            reconcile_interval_s=0, idle_timeout_ms=50)
        async with orch:
            for key in ("k1", "k2"):
                answer = await orch.request("a", f"echo:{key}", instance_key=key, timeout_ms=30_000)
                assert response_text(answer) == key
            await orch.wait_until(lambda: orch.released == 2, timeout=30)
            assert all(not r.alive and r.status == "terminated" for r in orch.records.values())
            again = await orch.request("a", "echo:back", instance_key="k1", timeout_ms=30_000)
            assert response_text(again) == "back"
            assert [r.instance_key for r in spawner.spawned] == ["k1", "k2", "k1"]
            assert orch.records[("a", "k1")].consecutive_crashes == 0

    run(main)


def test_without_the_policy_workers_stay() -> None:
    async def main() -> None:
        spawner = InProcessSpawner(in_process_worker(["a"], None))
        orch = Orchestrator(
            spawner, swarm_name="t", entry_agent="a", agents=["a"], reconcile_interval_s=0
        )
        async with orch:
            await orch.request("a", "echo:x", instance_key="k", timeout_ms=30_000)
            assert orch.records[("a", "k")]._idle_timer is None and orch.records[("a", "k")].alive

    run(main)


def test_real_process_is_released_and_history_reopened_from_disk(
    state_root: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle)
    text = (bundle / "goondan.yaml").read_text()
    assert "kind: Swarm" in text
    loaded = load_bundle(bundle, state_root=state_root)
    assert loaded.swarm_spec(None).idle_timeout_ms is None

    async def main() -> None:
        spawner = ProcessSpawner(bundle, state_root=state_root)
        orch = Orchestrator(
            spawner,
            swarm_name="default",
            entry_agent="worker",
            agents=["coordinator", "worker"],
            project_root=bundle,
            reconcile_interval_s=0,
            idle_timeout_ms=100,
        )
        async with orch:
            first = response_text(
                await orch.request(
                    "worker", "What is 17 * 23?", instance_key="cli", timeout_ms=60_000
                )
            )
            rec = orch.records[("worker", "cli")]
            await orch.wait_until(lambda: orch.released >= 1 and not rec.alive, timeout=60)
            second = response_text(
                await orch.request(
                    "worker", "What is 17 * 23?", instance_key="cli", timeout_ms=60_000
                )
            )
            assert first == second and rec.spawn_count == 2

    run(main, 120)
    base = next(p for p in (state_root / "workspaces").glob("*/instances/*/messages/base.jsonl"))
    assert base.read_text().count("What is 17 * 23?") == 2  # the reopened instance kept its history
