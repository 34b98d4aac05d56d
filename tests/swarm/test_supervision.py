"""One supervision model for every worker kind (issue 29): agent instances and Connections move
through the one status table and count crashes the one way."""

from __future__ import annotations

import ast
import dataclasses
import time
from pathlib import Path

import pytest

from goondan.connectors.spec import ConnectionSpec
from goondan.swarm.connector_supervisor import STABLE_AFTER_S, ConnectorRecord
from goondan.swarm.supervision import TRANSITIONS, InstanceRecord, WorkerRecord, next_status
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
    return {f.name for f in dataclasses.fields(InstanceRecord)} - event_fields


def test_record_fields_change_only_through_the_record_s_methods() -> None:
    """Issue 29: an InstanceRecord (and what every WorkerRecord has) changes only through its
    methods — no module of the swarm or an engine (where records live) other than
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
