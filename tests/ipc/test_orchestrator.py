"""Orchestrator behaviour through the in-process transport (same code paths as processes)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import AgentError
from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner
from goondan.types import AgentEvent
from tests.support.aio import run_bounded as run
from tests.support.ipc_agents import in_process_worker

AGENTS = ["a", "b", "c"]


def make(
    record: list[str] | None = None, agents: list[str] = AGENTS, **kwargs: Any
) -> tuple[Orchestrator, InProcessSpawner]:
    spawner = InProcessSpawner(in_process_worker(agents, record))
    kwargs.setdefault("reconcile_interval_s", 0)
    orch = Orchestrator(spawner, swarm_name="test", entry_agent=agents[0], agents=agents, **kwargs)
    return orch, spawner


async def ask(orch: Orchestrator, agent: str, text: str, key: str = "default") -> str:
    return response_text(await orch.request(agent, text, instance_key=key, timeout_ms=30_000))


def test_request_spawns_on_demand_and_answers() -> None:
    async def main() -> None:
        orch, spawner = make()
        async with orch:
            assert await ask(orch, "a", "echo:hello") == "hello"
            assert await ask(orch, "a", "echo:again") == "again"
            assert [r.agent_name for r in spawner.spawned] == ["a"]  # one process per instance
            await ask(orch, "a", "echo:x", key="other")
            assert len(spawner.spawned) == 2
            row = next(r for r in orch.snapshot() if r["instanceKey"] == "default")
            assert row["status"] == "idle" and row["processed"] == 2
        assert all(not r.alive for r in orch.records.values())

    run(main)


def test_unknown_agent_is_refused() -> None:
    async def main() -> None:
        orch, _ = make()
        async with orch:
            with pytest.raises(AgentError) as info:
                await orch.request("nobody", "echo:x")
            assert info.value.code == "E_AGENT_NOT_FOUND"

    run(main)


def test_agent_to_agent_request_through_the_broker() -> None:
    async def main() -> None:
        record: list[str] = []
        orch, _ = make(record)
        async with orch:
            assert await ask(orch, "a", "ask:b:echo:from a") == "asked:from a"
            # nested: a asks b, b asks c
            assert await ask(orch, "a", "ask:b:ask:c:echo:deep") == "asked:asked:deep"
        assert "b@default echo:from a" in record

    run(main)


def test_cycles_are_refused_with_the_chain_and_never_hang() -> None:
    async def main() -> None:
        orch, _ = make()
        async with orch:
            two = await ask(orch, "a", "ask:b:ask:a:echo:loop")
            assert two.startswith("asked:error:E_AGENT_CYCLE:")
            assert "a@default → b@default → a@default" in two
            three = await ask(orch, "a", "ask:b:ask:c:ask:a:echo:loop")
            assert "E_AGENT_CYCLE" in three
            assert "a@default → b@default → c@default → a@default" in three
            self_call = await ask(orch, "a", "ask:a:echo:me")
            assert self_call.startswith("error:E_AGENT_CYCLE:")

    run(main)


def test_depth_limit() -> None:
    async def main() -> None:
        spawner = InProcessSpawner(in_process_worker(AGENTS, max_depth=2))
        orch = Orchestrator(
            spawner, swarm_name="t", entry_agent="a", agents=AGENTS, reconcile_interval_s=0
        )
        async with orch:
            answer = await ask(orch, "a", "ask:b:ask:c:echo:x")
            assert "E_AGENT_DEPTH" in answer

    run(main)


def test_fifty_instances_twenty_events_exactly_once_in_order() -> None:
    async def main() -> None:
        record: list[str] = []
        orch, spawner = make(record)
        async with orch:
            keys = [f"k{i}" for i in range(50)]
            for n in range(20):
                for key in keys:
                    await orch.submit(
                        "a", AgentEvent(type="message", input=f"sleep:0:{n}", instance_key=key)
                    )
            await orch.wait_until(lambda: len(record) == 1000, timeout=30)
            assert len(spawner.spawned) == 50
        for key in keys:
            mine = [line.split()[1] for line in record if line.startswith(f"a@{key} ")]
            assert mine == [f"sleep:0:{n}" for n in range(20)], key

    run(main)


def test_killed_worker_mid_turn_caller_gets_error_and_worker_respawns(tmp_path: Path) -> None:
    async def main() -> None:
        record: list[str] = []
        orch, _ = make(record)
        async with orch:
            gate = tmp_path / "gate"
            caller = asyncio.ensure_future(ask(orch, "a", f"ask:b:block:{gate}:never"))
            await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=30)
            other = await ask(orch, "c", "echo:unaffected")
            orch.records[("b", "default")].handle.kill()  # type: ignore[union-attr]
            answer = await caller
            assert answer.startswith("error:E_AGENT_CRASHED:"), answer
            assert other == "unaffected"
            await orch.wait_until(lambda: orch.records[("b", "default")].ready, timeout=30)
            assert await ask(orch, "b", "echo:back") == "back"
            rec = orch.records[("b", "default")]
            assert rec.spawn_count == 2 and rec.consecutive_crashes == 0
            assert orch.records[("c", "default")].spawn_count == 1

    run(main)


def test_crash_loop_backoff_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        orch, _ = make(crash_threshold=2)
        async with orch:
            await ask(orch, "a", "echo:up")
            rec = orch.records[("a", "default")]  # one record survives every respawn
            for _ in range(3):
                await orch.wait_until(lambda: rec.ready, timeout=30)
                rec.handle.kill()  # type: ignore[union-attr]
                await orch.wait_until(lambda: not rec.alive or not rec.ready, timeout=30)
                await orch.wait_until(
                    lambda: rec.status in ("crashed", "crashLoopBackOff") or rec.ready, timeout=30
                )
            assert rec.consecutive_crashes == 3
            assert rec.status == "crashLoopBackOff"
            plan = await orch.reconcile()
            assert plan.to_respawn == []  # backoff (1 s) not over yet

    with caplog.at_level(logging.WARNING, logger="goondan.swarm.orchestrator"):
        run(main)
    records = [
        r for r in caplog.records if getattr(r, "event", None) == "orchestrator.crashLoopBackOff"
    ]
    assert records, "no structured crashLoopBackOff record"
    rec = records[-1]
    assert rec.agentName == "a" and rec.crashThreshold == 2 and rec.backoffMs == 1000  # type: ignore[attr-defined]
    assert rec.consecutiveCrashes == 3 and rec.nextSpawnAllowedAt.endswith("Z")  # type: ignore[attr-defined]


def test_restart_during_a_turn_finishes_it_first(tmp_path: Path) -> None:
    async def main() -> None:
        record: list[str] = []
        orch, spawner = make(record)
        async with orch:
            gate = tmp_path / "gate"
            answer = asyncio.ensure_future(ask(orch, "a", f"block:{gate}:finished"))
            await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=30)
            queued = asyncio.ensure_future(ask(orch, "a", "echo:after restart"))
            restarting = asyncio.ensure_future(orch.restart("a"))
            await orch.wait_until(
                lambda: orch.records[("a", "default")].status == "draining", timeout=30
            )
            assert len(spawner.spawned) == 1  # not replaced while the turn runs
            gate.write_text("go")
            assert await answer == "finished"
            assert await restarting == ["a.default"]
            assert await queued == "after restart"
            assert len(spawner.spawned) == 2
        assert record == [f"a@default block:{gate}:finished", "a@default echo:after restart"]

    run(main)


def test_a_turn_asking_for_a_restart_replaces_its_process_only() -> None:
    async def main() -> None:
        record: list[str] = []
        orch, spawner = make(record)
        async with orch:
            await ask(orch, "b", "echo:b stays")
            assert await ask(orch, "a", "restart:reload prompt") == "restart:reload prompt"
            await orch.wait_until(lambda: len(spawner.spawned) == 3, timeout=30)
            assert await ask(orch, "a", "echo:after") == "after"  # served by the new process
            assert await ask(orch, "b", "echo:b again") == "b again"
            assert [r.agent_name for r in spawner.spawned] == ["b", "a", "a"]
            assert orch.records[("a", "default")].processed >= 1

    run(main)


def test_send_and_spawn_and_list() -> None:
    async def main() -> None:
        record: list[str] = []
        orch, _ = make(record)
        async with orch:
            assert await ask(orch, "a", "send:b:echo:note") == "sent"
            await orch.wait_until(lambda: "b@default echo:note" in record, timeout=30)
            result = await orch.spawn_instance("c", "job-1", cwd="/tmp", owner=("a", "default"))
            assert result == {"target": "c", "instanceKey": "job-1", "spawned": True, "cwd": "/tmp"}
            again = await orch.spawn_instance("c", "job-1", owner=("a", "default"))
            assert again["spawned"] is False
            rows = orch.list_spawned(("a", "default"), include_all=False)
            assert [r["instanceKey"] for r in rows] == ["job-1"]
            assert orch.list_spawned(("b", "default"), include_all=False) == []

    run(main)


def test_removed_agent_is_stopped_on_config_change() -> None:
    async def main() -> None:
        orch, _ = make()
        async with orch:
            await ask(orch, "c", "echo:x")
            assert orch.records[("c", "default")].alive
            await orch.update_agents(["a", "b"])
            await orch.wait_until(lambda: ("c", "default") not in orch.records, timeout=30)
            with pytest.raises(AgentError):
                await orch.request("c", "echo:y")

    run(main)


def test_a_spawned_instance_gets_its_cwd_as_workdir(tmp_path: Path) -> None:
    """Decision 16: ``ToolContext.workdir`` can be set per spawned instance — the ``cwd`` of
    ``agents__spawn`` (relative to the project root) reaches the agent process as ``--workdir``."""
    from goondan.swarm.agent_process import parse_args
    from goondan.swarm.spawner import ProcessSpawner

    async def main() -> None:
        orch, spawner = make(project_root=tmp_path)
        async with orch:
            result = await orch.spawn_instance("c", "job-1", cwd="sub", owner=("a", "default"))
            await orch.wait_until(lambda: len(spawner.spawned) == 1, timeout=30)
        expected = str((tmp_path / "sub").resolve())
        assert result["cwd"] == expected
        [request] = spawner.spawned
        assert (request.agent_name, request.instance_key, request.workdir) == (
            "c",
            "job-1",
            expected,
        )
        argv = ProcessSpawner(tmp_path, state_root=tmp_path / "state", swarm="test").argv(request)
        assert parse_args(argv).workdir == expected

    run(main)
