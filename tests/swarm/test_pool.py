"""Pooled isolation's host (issue 33, docs/scaling.md "Pooled hosts"): many instances in one
host process, each one as isolated from its neighbours as a shared interpreter allows.

* :class:`InstanceHost` in this process: a worker that fails to start, or is killed, ends alone
  — its neighbour keeps answering;
* :class:`PooledSpawner` with one real host process under an :class:`Orchestrator`: instances
  share the host's pid, killing one instance leaves the host and its neighbour running, and the
  killed one is opened again on the same host by its next request.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from goondan.ipc.protocol import IpcMessage
from goondan.runtime.agents import response_text
from goondan.swarm.hosting import InstanceHost
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.pool import PooledSpawner
from goondan.swarm.spawner import ProcessSpawner, SpawnRequest
from goondan.types import JsonObject

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def _bundle(tmp_path: Path) -> Path:
    target = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_a_hosted_worker_that_fails_or_is_killed_ends_alone(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    argv = ProcessSpawner(bundle, state_root=tmp_path / "state").argv

    async def main() -> None:
        posted: list[tuple[str, IpcMessage | None, JsonObject | None]] = []
        host = InstanceHost(lambda *entry: posted.append(entry))

        def exits() -> dict[str, Any]:
            return {hid: info for hid, message, info in posted if message is None}

        def frames(hid: str) -> list[str]:
            return [str(m.payload.get("type")) for h, m, _ in posted if h == hid and m]

        async def until(predicate: Any) -> None:
            async with asyncio.timeout(60):
                while not predicate():
                    await asyncio.sleep(0.01)

        host.open("good", argv(SpawnRequest("worker", "a")), "agent", None)
        host.open("bad", [*argv(SpawnRequest("worker", "b")), "--bundle-dir", "/nonexistent"],
                  "agent", None)
        host.open("doomed", argv(SpawnRequest("worker", "c")), "agent", None)
        await until(lambda: "bad" in exits() and "runtime.ready" in frames("good")
                    and "runtime.ready" in frames("doomed"))
        assert exits()["bad"] == {"reason": "exited", "code": 3}  # its start error, alone
        assert "runtime.startError" in frames("bad")
        host.kill("doomed")
        await until(lambda: "doomed" in exits())
        assert exits()["doomed"] == {"reason": "killed", "signal": 9}
        assert set(host.hosted) == {"good"}  # the neighbour still runs
        await host.eof("good")  # and drains as on the EOF of its pipe
        await until(lambda: "good" in exits())
        assert exits()["good"] == {"reason": "exited", "code": 0}

    asyncio.run(main())


@pytest.mark.e2e
@pytest.mark.slow
def test_instances_share_a_host_and_killing_one_spares_the_host_and_its_neighbour(
        tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)

    async def main() -> None:
        spawner = PooledSpawner(bundle, state_root=tmp_path / "state", hosts=1)
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=bundle, reconcile_interval_s=0,
                            grace_period_ms=10_000)
        try:
            async with orch:
                for key in ("a", "b"):
                    answer = await orch.request("worker", "What is 17 * 23?", instance_key=key,
                                                timeout_ms=60_000)
                    assert "391" in response_text(answer)
                a, b = orch.records[("worker", "a")], orch.records[("worker", "b")]
                assert a.handle is not None and b.handle is not None
                host_pid = a.handle.pid
                assert host_pid and b.handle.pid == host_pid  # one host process
                [host] = spawner.hosts_status()
                assert host["instances"] == ["worker.a", "worker.b"]
                old = a.handle
                old.kill()
                await old.wait()
                for key in ("b", "a"):
                    answer = await orch.request("worker", "What is 17 * 23?", instance_key=key,
                                                timeout_ms=60_000)
                    assert "391" in response_text(answer)
                assert a.handle is not old and a.handle is not None
                assert a.handle.pid == host_pid and spawner.starts == [1]  # the same host
        finally:
            await spawner.aclose()

    asyncio.run(main())


def test_status_rows_get_cpu_and_rss_and_pooled_instances_an_even_share_of_their_host() -> None:
    import os

    from goondan.swarm.procstats import process_stats, with_process_stats

    me = os.getpid()
    doc: JsonObject = {
        "processes": [{"process": "worker.a", "pid": me}, {"process": "worker.b", "pid": me},
                      {"process": "solo.x", "pid": None}],
        "hosts": [{"host": "pool-0", "pid": me, "instances": ["worker.a", "worker.b"]}],
    }
    with_process_stats(doc)
    cpu, rss = process_stats(me)
    assert cpu is not None and rss is not None and rss > 1 << 20
    host = doc["hosts"][0]
    a, b, solo = doc["processes"]
    assert host["rssBytes"] > 0 and a["rssBytes"] == host["rssBytes"]  # the host's figures
    assert a["host"] == "pool-0" and a["sharedBy"] == 2
    assert a["rssShareBytes"] == a["rssBytes"] // 2 and b["cpuShareSeconds"] is not None
    assert solo["cpuSeconds"] is None and "host" not in solo  # no pid: nothing to say


def test_pooled_instances_are_opened_on_the_swarms_store(tmp_path: Path) -> None:
    """``goondan run --store`` with ``policy.isolation: pooled``: each hosted instance gets the
    store URL in its arguments (before, the hosts' instances opened the JSONL state root while
    the orchestrator kept the inputs in the store)."""
    url = "postgresql://goondan:secret@127.0.0.1:5432/goondan"
    spawner = PooledSpawner(tmp_path, state_root=tmp_path / "state", store_url=url)
    argv = spawner.local.argv(SpawnRequest("worker", "k1"))
    assert argv[argv.index("--store") + 1] == url
    assert "--store" not in PooledSpawner(tmp_path, state_root=tmp_path).local.argv(
        SpawnRequest("worker", "k1"))
