"""One supervision model for every worker kind (issue 29): agent instances and Connections move
through the one status table and count crashes the one way."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import itertools
import time
from pathlib import Path
from typing import Any, cast

import pytest

from goondan.connectors.spec import ConnectionSpec
from goondan.ipc.channel import Transport
from goondan.swarm.connector_supervisor import (
    STABLE_AFTER_S,
    ConnectorRecord,
    ConnectorSupervisor,
)
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import AgentHandle, InProcessSpawner, SpawnRequest
from goondan.swarm.supervision import TRANSITIONS, InstanceRecord, WorkerRecord, next_status
from goondan.swarm.supervisor import ProcessSupervisor, WorkerSupervisor
from goondan.types import AgentEvent

GOONDAN = Path(__file__).resolve().parents[2] / "goondan"
SWARM = GOONDAN / "swarm"


def _spec() -> ConnectionSpec:
    return ConnectionSpec(
        name="trig",
        connector="trigger",
        connector_package=None,
        entry=Path("trigger.py"),
        swarm="main",
        events=(),
        rules=(),
    )


def test_connector_statuses_are_in_the_one_transition_table() -> None:
    assert next_status("pending", "spawn") == "spawning"
    assert next_status("spawning", "run") == "running"
    assert next_status("running", "done") == "completed"
    assert next_status("completed", "exit") == "terminated"
    assert next_status("completed", "spawn") == "spawning"  # a replaced Connection starts again
    assert next_status("running", "backoff") == "crashLoopBackOff"
    assert next_status("draining", "run") == "draining"  # a late report does not undo a stop
    assert ("running", "spawn") not in TRANSITIONS and ("idle", "run") not in TRANSITIONS


def test_a_connector_record_walks_the_table_like_an_instance_record() -> None:
    connector, instance = ConnectorRecord(_spec()), InstanceRecord("a", "k")
    assert isinstance(connector, WorkerRecord) and isinstance(instance, WorkerRecord)
    assert connector.status == "pending"
    assert [connector.transition(t) for t in ("spawn", "run", "done", "exit")] == [
        "spawning", "running", "completed", "terminated"]
    assert [instance.transition(t) for t in ("spawn", "ready", "exit")] == [
        "spawning",
        "idle",
        "terminated",
    ]


def test_crashes_are_counted_and_backed_off_the_same_way_for_every_kind() -> None:
    for rec in (ConnectorRecord(_spec()), InstanceRecord("a", "k")):
        delays = [rec.count_crash(2) for _ in range(4)]
        assert delays == [0, 0, 1000, 2000]
        assert (rec.status, rec.consecutive_crashes, rec.total_crashes) == (
            "crashLoopBackOff",
            4,
            4,
        )
    stable = ConnectorRecord(
        _spec(), consecutive_crashes=7, started_monotonic=time.monotonic() - STABLE_AFTER_S - 1
    )
    assert stable.count_crash(5, stable_after_s=STABLE_AFTER_S) == 0
    assert (stable.status, stable.consecutive_crashes) == ("crashed", 1)


@pytest.mark.parametrize("name", ["supervisor.py", "orchestrator.py", "connector_supervisor.py"])
def test_supervisors_change_a_status_only_through_transition(name: str) -> None:
    tree = ast.parse((SWARM / name).read_text(encoding="utf-8"))
    writes = [
        f"{name}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for t in (target.elts if isinstance(target, ast.Tuple) else [target])
        if isinstance(t, ast.Attribute) and t.attr == "status"
    ]
    assert writes == []


def _record_fields() -> set[str]:
    # The names an AgentEvent has too (instance_key) are written on events; a syntax check
    # cannot tell the two apart, and a record's identity is never written anyway.
    event_fields = {f.name for f in dataclasses.fields(AgentEvent)}
    records = {f.name for f in dataclasses.fields(InstanceRecord)}
    records |= {f.name for f in dataclasses.fields(ConnectorRecord)}
    return records - event_fields


def test_record_fields_change_only_through_the_record_s_methods() -> None:
    """Issue 29: an InstanceRecord, a ConnectorRecord (and what every WorkerRecord has) change
    only through their methods — no module of the swarm or an engine (where records live) other than
    goondan/swarm/supervision.py assigns one of its fields on another object."""
    fields = _record_fields()
    writes: list[str] = []
    for path in sorted([*SWARM.rglob("*.py"), *(GOONDAN / "engines").rglob("*.py")]):
        if path == SWARM / "supervision.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if (isinstance(t, ast.Attribute) and t.attr in fields
                            and not (isinstance(t.value, ast.Name) and t.value.id == "self")):
                        writes.append(f"{path.relative_to(GOONDAN.parent)}:{node.lineno} .{t.attr}")
    assert writes == []


# The supervision loop: spawn, watch, exit, crash, respawn, graceful stop.
LOOP = ("_ensure_running", "_timer_fired", "_start", "_pump", "_watch", "_on_exit", "_crashed",
        "_stop_record")


def test_every_worker_kind_runs_on_the_one_supervision_loop() -> None:
    """Issue 29: agents and connectors have one supervisor loop — each of its steps is defined
    once, in WorkerSupervisor, and neither kind has its own."""
    defined: dict[str, list[str]] = {name: [] for name in LOOP}
    for path in sorted([*SWARM.rglob("*.py"), *(GOONDAN / "engines").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and (
                    "Supervisor" in node.name or "Orchestrator" in node.name):
                for item in node.body:
                    if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                            and item.name in defined):
                        defined[item.name].append(f"{path.name}:{node.name}")
    assert defined == {name: ["supervisor.py:WorkerSupervisor"] for name in LOOP}
    kinds = [ConnectorSupervisor, ProcessSupervisor, Orchestrator]
    assert all(issubclass(kind, WorkerSupervisor) for kind in kinds)
    assert [name for kind in kinds for name in LOOP if name in vars(kind)] == []


class _Crashing(InProcessSpawner):
    """Every worker, of either kind, exits 1 at once (``fail_spawn``: cannot even be spawned);
    records when each kind was spawned."""

    def __init__(self, fail_spawn: bool) -> None:
        super().__init__(self._exit_1)
        self.fail_spawn = fail_spawn
        self.times: dict[str, list[float]] = {"agent": [], "connector": []}

    @staticmethod
    async def _exit_1(request: SpawnRequest, transport: Transport) -> int:
        return 1

    async def spawn(self, request: SpawnRequest) -> AgentHandle:
        self.times[request.kind].append(time.monotonic())
        if self.fail_spawn:
            raise OSError("no such executable")
        return await super().spawn(request)


@pytest.mark.parametrize("fail_spawn", [False, True], ids=["exit-1", "spawn-fails"])
def test_a_crash_looping_agent_and_connector_back_off_on_the_same_schedule(
    fail_spawn: bool,
) -> None:
    """Two crashes respawn at once, the third waits 1 s (threshold 2), for both kinds alike —
    whether the process exits non-zero or cannot be spawned at all."""

    async def main() -> None:
        spawner = _Crashing(fail_spawn)
        orch = Orchestrator(spawner, swarm_name="s", entry_agent="a", agents=["a"],
                            reconcile_interval_s=0, crash_threshold=2)
        connectors = ConnectorSupervisor(spawner, cast(Any, None), [_spec()], crash_threshold=2)
        async with orch:
            await orch.submit("a", AgentEvent(type="message", input="hi"))
            connectors.start()
            agent = orch.records[("a", "default")]
            connector = connectors.records["trig"]
            try:
                await orch.wait_until(
                    lambda: all(len(t) == 4 for t in spawner.times.values())
                    and agent.consecutive_crashes == connector.consecutive_crashes == 4, 10)
            finally:
                await connectors.shutdown()
        for rec in (agent, connector):
            assert (rec.consecutive_crashes, rec.crash_looping, rec.last_error is not None) == (
                4, True, True)
        # at once, at once, then 1 s (not 0, not 2 s): the same for both kinds
        schedule = {
            kind: ["now" if b - a < 0.5 else "1s" if 0.9 <= b - a < 1.9 else f"{b - a:.1f}s"
                   for a, b in itertools.pairwise(times)]
            for kind, times in spawner.times.items()
        }
        assert schedule == {"agent": ["now", "now", "1s"], "connector": ["now", "now", "1s"]}

    asyncio.run(main())
