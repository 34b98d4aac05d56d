"""The Ray engine on a real local two-node Ray cluster (docs/scaling.md).

The session's one cluster (``cluster`` in ``tests/engines/conftest.py``) serves every test
here; skipped without the extra.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import AgentError
from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner, Spawner

pytest.importorskip("ray")

from goondan.engines.ray.spawner import RaySpawner, host_index
from tests.engines.conftest import settle_nodes, stall_node, start_with_a_host_off_head
from tests.engines.gate import gate_bundle, log_lines, until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"
def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle)
    return bundle


async def _ask(spawner: Spawner, bundle: Path) -> str:
    orch = Orchestrator(spawner, swarm_name="default", entry_agent="coordinator",
                        agents=["coordinator", "worker"], project_root=bundle, grace_period_ms=5000)
    async with orch:
        return response_text(
            await orch.request(
                "coordinator", "What is 17 * 23?", instance_key="cli", timeout_ms=60_000
            )
        )


def _transcripts(state_root: Path) -> dict[str, str]:
    return {p.parent.parent.name.split("-")[0] + p.parent.parent.name[-4:]: p.read_text()
            for p in sorted((state_root / "workspaces").glob("*/instances/*/messages/base.jsonl"))}


_HOST_INDEXES = (
    "import json, sys\n"
    "from goondan.engines.ray.spawner import host_index\n"
    "print(json.dumps([host_index('worker', str(i), 4) for i in range(12)]))\n"
)


def test_host_assignment_is_stable() -> None:
    """An instance's host is the same in every process and run (a sha256 of agent and key, not
    Python's per-process salted ``hash()``), and keys spread over all hosts."""
    here = [host_index("worker", str(i), 4) for i in range(12)]
    assert here == [1, 0, 3, 2, 3, 3, 0, 0, 1, 2, 3, 0]  # pinned: the same in every version too
    for seed in ("1", "2"):
        other = subprocess.run(
            [sys.executable, "-c", _HOST_INDEXES],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            timeout=60,
        )
        assert json.loads(other.stdout) == here
    spread = {host_index("a", str(i), 4) for i in range(100)}
    assert spread == {0, 1, 2, 3}


def test_delegation_answers_like_the_local_engine(cluster: Any, tmp_path: Path) -> None:
    local_root, ray_root = tmp_path / "local", tmp_path / "ray"
    bundle = _bundle(tmp_path)
    local = asyncio.run(
        asyncio.wait_for(_ask(ProcessSpawner(bundle, state_root=local_root), bundle), 90)
    )

    async def on_ray() -> tuple[str, list[dict[str, Any]]]:
        spawner = RaySpawner(bundle, state_root=ray_root, hosts=2)
        try:
            answer = await _ask(spawner, bundle)
            return answer, await spawner.host_info()
        finally:
            await spawner.aclose()

    remote, hosts = asyncio.run(asyncio.wait_for(on_ray(), 120))
    assert "17 * 23 = 391" in local
    assert remote == local
    assert len({h["pid"] for h in hosts}) == 2  # two host actors, not one process per instance
    local_files = sorted(
        p.read_text() for p in local_root.glob("workspaces/*/instances/*/messages/base.jsonl")
    )
    ray_files = sorted(
        p.read_text() for p in ray_root.glob("workspaces/*/instances/*/messages/base.jsonl")
    )
    assert len(ray_files) == 2

    def strip(text: str) -> list[str]:  # ids and timestamps differ between runs
        import json
        import re

        return [
            re.sub(r"[0-9a-f]{6,}", "*", json.dumps(json.loads(line)["data"], sort_keys=True))
            for line in text.splitlines()
        ]

    assert [strip(t) for t in ray_files] == [strip(t) for t in local_files]
    assert any("17 * 23 = 391" in line for t in ray_files for line in strip(t))


def test_state_root_not_shared_is_refused(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from goondan.engines.ray import spawner as module
    from goondan.errors import ConfigError

    monkeypatch.setattr(module, "_write_marker", lambda path, token: None)  # as if on another disk
    spawner = RaySpawner(_bundle(tmp_path), state_root=tmp_path / "state", hosts=1)

    async def main() -> None:
        try:
            await spawner.start()
        finally:
            await spawner.aclose()

    with pytest.raises(ConfigError) as info:
        asyncio.run(asyncio.wait_for(main(), 60))
    assert info.value.code == "E_ENGINE_STATE_ROOT"
    _ = AgentError


def test_goondan_run_engine_ray_joins_the_cluster(cluster: Any, state_root: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(EXAMPLE),
            "--engine",
            "ray",
            "--ray-address",
            cluster.address,
            "--input",
            "What is 17 * 23?",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GOONDAN_STATE_ROOT": str(state_root)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # as on the local engine (tests/e2e/test_run.py)
    assert result.stdout.strip() == "The worker says: 17 * 23 = 391"


# 100 keys sent as requests here (1,000 with GOONDAN_RAY_FULL=1, ~11 s); the 1,000 keys of the
# acceptance go through the ingress in tests/engines/test_ray_connectors.py.
KEYS = 1000 if os.environ.get("GOONDAN_RAY_FULL") == "1" else 100


def test_many_instances_exactly_once_in_order_with_idle_release(
    cluster: Any, tmp_path: Path
) -> None:
    bundle = _bundle(tmp_path)
    state_root = tmp_path / "state"

    async def main() -> int:
        spawner = RaySpawner(bundle, state_root=state_root, hosts=4)
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker", agents=["worker"],
                            project_root=bundle, grace_period_ms=5000, idle_timeout_ms=200)
        try:
            async with orch:
                requests = [orch.request("worker", f"event {n} for key {k}", instance_key=f"k{k}",
                                         timeout_ms=300_000) for k in range(KEYS) for n in (1, 2)]
                answers = await asyncio.gather(*requests)
                assert len(answers) == 2 * KEYS
                await orch.wait_until(lambda: orch.released >= KEYS, timeout=120)
                return orch.released
        finally:
            await spawner.aclose()

    released = asyncio.run(asyncio.wait_for(main(), 600))
    assert released >= KEYS
    bases = list(state_root.glob("workspaces/*/instances/*/messages/base.jsonl"))
    assert len(bases) == KEYS
    import json

    for base in bases:
        records = [json.loads(line)["data"] for line in base.read_text().splitlines()]
        users = [r["content"] for r in records if r.get("role") == "user"]
        texts = [u if isinstance(u, str) else json.dumps(u) for u in users]
        # once, in order
        assert len(texts) == 2 and "event 1 " in texts[0] and "event 2 " in texts[1], texts


def test_node_crash_mid_turn_restarts_the_host_elsewhere(cluster: Any, tmp_path: Path) -> None:
    """A node that stalls (its raylet starved for seconds) keeps its host; a node that crashes
    mid-turn loses it: Ray restarts it on another node, the running turn resumes there from the
    state root, the queued request is answered after it."""
    log, go = tmp_path / "calls.log", tmp_path / "go"
    bundle = gate_bundle(tmp_path, log, go)
    state_root = tmp_path / "state"
    head = cluster.head_node.node_id
    settle_nodes(cluster)

    async def main() -> None:
        # two hosts on the head and the other node (the crash leaves the head alone, where the
        # host restarts; tests that need another node add one, as test_ray_postgres.py does)
        spawner, infos, index = await start_with_a_host_off_head(
            lambda n: RaySpawner(bundle, state_root=state_root / str(n), hosts=2), head)
        (doomed,) = [n for n in cluster.list_all_nodes() if n.node_id == infos[index]["nodeId"]]
        key = next(k for k in (f"k{i}" for i in range(1000)) if host_index("worker", k, 2) == index)
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=bundle, grace_period_ms=5000)
        try:
            async with orch:
                first = await orch.request("worker", "hi", instance_key=key, timeout_ms=60_000)
                assert response_text(first) == "hello"
                # Longer than the 3 health checks 0.5 s apart that declare a dead node dead: a
                # stalled node is not one (the test cluster's settings, tests/engines/conftest.py)
                await asyncio.to_thread(stall_node, doomed, 4.0)
                (before,) = [h for h in await spawner.host_info()
                             if h["name"].endswith(f"-{index}")]
                assert before["nodeId"] == doomed.node_id
                assert before["epoch"] == infos[index]["epoch"], "the stalled node lost its host"
                worker = orch.records[("worker", key)]
                turn = asyncio.ensure_future(
                    orch.request("worker", "wait please", instance_key=key, timeout_ms=120_000))
                # the turn runs the tool on the doomed host, which waits for the go file
                await until(lambda: len(log_lines(log)) == 1, 60, "the tool to start")
                assert int(log_lines(log)[0][0]) == before["pid"]
                # queued behind the running turn: not started when the node goes, so it is kept
                queued = asyncio.ensure_future(
                    orch.request("worker", "hi (queued)", instance_key=key, timeout_ms=120_000))
                await orch.wait_until(lambda: len(worker.queue) == 1, timeout=30)
                cluster.remove_node(doomed, allow_graceful=False)
                os.kill(before["pid"], 9)
                # the running turn resumes on the restarted host (docs/conversations.md
                # "Durability"): the idempotent call runs again there, with the same key
                await until(lambda: len(log_lines(log)) == 2, 90, "the resumed call")
                go.write_text("go")
                # its caller gets its answer, not E_AGENT_CRASHED
                assert response_text(await turn) == "done"
                # the queued one: answered after the restart
                assert response_text(await queued) == "hello"
                again = await orch.request("worker", "hi", instance_key=key, timeout_ms=60_000)
                assert response_text(again) == "hello"
                (after,) = [h for h in await spawner.host_info() if h["name"].endswith(f"-{index}")]
                assert after["nodeId"] != doomed.node_id and after["epoch"] != before["epoch"]
                resumed, began = log_lines(log)[1], log_lines(log)[0]
                assert int(resumed[0]) == after["pid"] and resumed[1] == began[1]
        finally:
            await spawner.aclose()

    asyncio.run(asyncio.wait_for(main(), 150))
    # (under the state root of the spawner that ran: state_root/<attempt>)
    (base,) = [p for p in state_root.glob("*/workspaces/*/instances/*/messages/base.jsonl")]
    records = [json.loads(line)["data"] for line in base.read_text().splitlines()]
    # each input once and in order, the interrupted turn's recovered from disk, and its call's
    # result stored once
    assert [r["content"] for r in records if r.get("role") == "user"] == [
        "hi", "wait please", "hi (queued)", "hi"]
    assert [r["content"][0]["text"] for r in records
            if r.get("role") == "assistant" and r["content"][0].get("type") == "text"] == [
        "hello", "done", "hello", "hello"]
    assert sum(1 for r in records if r.get("role") == "tool") == 1
