"""Connector processes as a worker kind, and their supervision, with in-process workers.

The connector "processes" here run :func:`goondan.connectors.process.serve` as tasks over
in-process transports (the same code as a real process after argument parsing), so the
supervision policy is checked without spawning interpreters. Real processes:
``tests/e2e/test_connectors_run.py``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from goondan.config import load_bundle
from goondan.connectors.process import parse_args, serve
from goondan.ipc.channel import Transport
from goondan.swarm.connections import ConnectionRuntime
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import (
    WORKER_ENTRIES,
    InProcessSpawner,
    ProcessSpawner,
    SpawnRequest,
    resolve_worker_entry,
)
from tests.support.ipc_agents import in_process_worker
from tests.support.trigger_client import FIXTURE, send_trigger, wait_port


def test_worker_kinds_have_entry_points_names_and_arguments(tmp_path: Path) -> None:
    from goondan.connectors.process import process_main as connector_main
    from goondan.swarm.agent_process import process_main as agent_main

    assert set(WORKER_ENTRIES) == {"agent", "connector"}
    assert resolve_worker_entry("agent") is agent_main
    assert resolve_worker_entry("connector") is connector_main
    with pytest.raises(ValueError, match="unknown worker kind"):
        resolve_worker_entry("robot")
    request = SpawnRequest.connector("slack in", "slack")
    assert (request.kind, request.worker_name, request.process_name) == (
        "connector",
        "slack in",
        "connection.slack-in",
    )
    assert SpawnRequest("a", "k").kind == "agent" and SpawnRequest("a", "k").process_name == "a.k"
    spawner = ProcessSpawner(
        tmp_path, state_root=tmp_path / "s", swarm="sw", log_dir=tmp_path / "logs"
    )
    argv = spawner.argv(request)
    args = parse_args(argv)
    assert (args.connection_name, args.connector_name, args.swarm, args.process_name) == (
        "slack in", "slack", "sw", "connection.slack-in")
    assert "--agent-name" in spawner.argv(SpawnRequest("a", "k"))


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(60):
            return await fn()

    return asyncio.run(main())


def _bundle(tmp_path: Path, connections: dict[str, str]) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    (bundle / "norun.py").write_text(
        "raise RuntimeError('cannot import this connector')\n\n\nasync def run(ctx):\n    pass\n")
    extra = """---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: norun}
spec:
  entry: ./norun.py
  events: [{name: trigger_message}]
"""
    for name, mode in connections.items():
        connector = "norun" if mode == "norun" else "trigger"
        extra += f"""---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: {name}}}
spec:
  connectorRef: Connector/{connector}
  config:
    PORT_FILE: {{value: "{tmp_path / (name + '.json')}"}}
    FAIL: {{value: "{mode}"}}
"""
    with (bundle / "goondan.yaml").open("a") as handle:
        handle.write(extra)
    return bundle


def _runtime(
    bundle_dir: Path, state_root: Path, record: list[str]
) -> tuple[Orchestrator, ConnectionRuntime]:
    bundle = load_bundle(bundle_dir, state_root=state_root)
    swarm = bundle.swarm_spec(None)
    argv_of = ProcessSpawner(bundle.root, state_root=state_root, swarm=swarm.name)
    agents = in_process_worker(swarm.agents, record)

    async def worker(request: SpawnRequest, transport: Transport) -> int | None:
        if request.kind == "connector":
            return await serve(transport, parse_args(argv_of.argv(request)))
        result: int | None = await agents(request, transport)
        return result

    spawner = InProcessSpawner(worker)
    orch = Orchestrator(
        spawner,
        swarm_name=swarm.name,
        entry_agent=swarm.entry_agent,
        agents=swarm.agents,
        reconcile_interval_s=0,
    )
    runtime = ConnectionRuntime(bundle, swarm, orch, spawner, state_root=state_root)
    runtime.supervisor.crash_threshold = 2
    return orch, runtime


def test_failures_are_logged_and_retried_with_backoff_while_the_rest_runs(
    tmp_path: Path,
    state_root: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = _bundle(tmp_path, {"broken": "start", "norun": "norun", "done": "return"})
    record: list[str] = []
    caplog.set_level(logging.INFO, logger="goondan")

    async def main() -> None:
        orch, runtime = _runtime(bundle, state_root, record)
        records = runtime.supervisor.records
        async with orch:
            monkeypatch.setenv("TRIGGER_PORT_FILE", str(tmp_path / "port.json"))
            monkeypatch.setenv("TRIGGER_FAIL", "")
            await runtime.start()
            await orch.wait_until(lambda: records["broken"].status == "crashLoopBackOff"
                                  and records["norun"].status == "crashLoopBackOff"
                                  and records["done"].status == "completed", 30)
            port = await asyncio.to_thread(wait_port, tmp_path / "port.json")
            answer = await asyncio.to_thread(send_trigger, port, "x1", "echo:still served")
            assert answer == {"id": "x1", "duplicate": False}
            await orch.wait_until(lambda: record == ["assistant@durable echo:still served"], 30)
            assert records["trig"].status == "running" and records["trig"].spawn_count == 1
            assert records["broken"].consecutive_crashes == 3 and records["broken"].spawn_count == 3
            assert records["done"].spawn_count == 1  # returned: not restarted
            await runtime.stop()
            assert all(r.handle is None for r in records.values())
            assert {r.status for r in records.values()} <= {
                "terminated",
                "completed",
                "crashLoopBackOff",
            }

    run(main)
    crashed = [r for r in caplog.records if getattr(r, "event", None) == "connector.crashed"]
    broken = [r for r in crashed if r.connection == "broken"]  # type: ignore[attr-defined]
    assert [r.backoffMs for r in broken] == [0, 0, 1000]  # type: ignore[attr-defined]
    assert all(r.code == "E_CONNECTOR" for r in crashed)  # type: ignore[attr-defined]
    assert "refuses to start (FAIL=start)" in broken[0].getMessage()
    norun = [r.getMessage() for r in crashed if r.connection == "norun"]  # type: ignore[attr-defined]
    assert norun and "cannot import this connector" in norun[0] and "norun" in norun[0]
    completed = [r for r in caplog.records if getattr(r, "event", None) == "connector.completed"]
    assert [r.connection for r in completed] == ["done"]  # type: ignore[attr-defined]


def test_connections_of_another_swarm_are_logged_not_started(
    tmp_path: Path,
    state_root: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    with (bundle / "goondan.yaml").open("a") as handle:
        handle.write("""---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: second}
spec:
  entryAgent: Agent/other
  agents: [{ref: Agent/other}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: elsewhere}
spec:
  connectorRef: Connector/trigger
  swarmRef: Swarm/second
""")
    caplog.set_level(logging.INFO, logger="goondan")

    async def main() -> None:
        orch, runtime = _runtime(bundle, state_root, [])
        assert [c.name for c in runtime.connections] == ["trig"]
        assert [c.name for c in runtime.skipped] == ["elsewhere"]
        monkeypatch.setenv("TRIGGER_PORT_FILE", str(tmp_path / "port.json"))
        monkeypatch.setenv("TRIGGER_FAIL", "")
        async with orch:
            await runtime.start()
            await runtime.stop()

    run(main)
    assert any(
        "Connection elsewhere is bound to Swarm second" in r.getMessage() for r in caplog.records
    )


def _connection(name: str, port_file: Path, instance_key: str) -> str:
    return f"""---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: {name}}}
spec:
  connectorRef: Connector/trigger
  config:
    PORT_FILE: {{value: "{port_file}"}}
  ingress:
    rules:
      - match: {{event: trigger_message}}
        route: {{instanceKey: {instance_key}}}
"""


def test_reload_restarts_changed_starts_added_and_stops_removed_connections(
    tmp_path: Path, state_root: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    manifest = bundle / "goondan.yaml"
    original = manifest.read_text()
    ports = {name: tmp_path / f"{name}.json" for name in ("keep", "change", "gone", "new")}
    manifest.write_text(original + _connection("keep", ports["keep"], "k1")
                        + _connection("change", ports["change"], "c1")
                        + _connection("gone", ports["gone"], "g1"))
    record: list[str] = []

    async def main() -> None:
        monkeypatch.setenv("TRIGGER_PORT_FILE", str(tmp_path / "port.json"))
        monkeypatch.setenv("TRIGGER_FAIL", "")
        orch, runtime = _runtime(bundle, state_root, record)
        records = runtime.supervisor.records
        async with orch:
            await runtime.start()
            await orch.wait_until(lambda: all(r.status == "running" for r in records.values()), 30)
            gone_port = await asyncio.to_thread(wait_port, ports["gone"])
            old_change_port = await asyncio.to_thread(wait_port, ports["change"])
            ports["change"].unlink()
            # v2: "change" routes elsewhere, "gone" left the bundle, "new" arrived; "keep" and
            # "trig" are untouched.
            manifest.write_text(original + _connection("keep", ports["keep"], "k1")
                                + _connection("change", ports["change"], "c2")
                                + _connection("new", ports["new"], "n1"))
            changes = await runtime.reload(load_bundle(bundle, state_root=state_root))
            assert changes == {
                "restarted": ["change"],
                "updated": [],
                "added": ["new"],
                "removed": ["gone"],
            }
            assert sorted(records) == ["change", "keep", "new", "trig"]
            await orch.wait_until(lambda: records["change"].spawn_count == 2
                                  and all(r.status == "running" for r in records.values()), 30)
            assert records["keep"].spawn_count == 1 and records["trig"].spawn_count == 1
            # The restarted connector serves with the new rules; the added one is accepted.
            change_port = await asyncio.to_thread(wait_port, ports["change"])
            answer = await asyncio.to_thread(send_trigger, change_port, "e1", "echo:moved")
            assert answer == {"id": "e1", "duplicate": False}
            new_port = await asyncio.to_thread(wait_port, ports["new"])
            assert await asyncio.to_thread(send_trigger, new_port, "e2", "echo:arrived") == {
                "id": "e2", "duplicate": False}
            await orch.wait_until(lambda: sorted(record) == ["assistant@c2 echo:moved",
                                                             "assistant@n1 echo:arrived"], 30)
            # The removed connector stopped listening.
            for port in (gone_port, old_change_port):
                with pytest.raises(OSError):
                    await asyncio.to_thread(send_trigger, port, "e3", "echo:nobody")
            assert runtime.ingress.inboxes.keys() == {"trig", "keep", "change", "new"}
            # A reload that changes nothing restarts nothing.
            assert await runtime.reload(load_bundle(bundle, state_root=state_root)) == {
                "restarted": [], "updated": [], "added": [], "removed": []}
            assert records["change"].spawn_count == 2
            await runtime.stop()

    run(main)


SYNC_CONNECTOR = '''\
import threading


def run(ctx):
    assert threading.current_thread() is not threading.main_thread()
    receipt = ctx.emit_sync({"id": "s1", "name": "trigger_message", "instanceKey": "sync",
                             "message": {"type": "text", "text": "echo:from a thread"}})
    ctx.logger.info("sync connector emitted %s", receipt.id)
    ctx.stopping.wait()
    ctx.logger.info("sync connector stopping")
'''


def test_a_sync_run_runs_in_a_thread_with_the_same_ctx_until_told_to_stop(
    tmp_path: Path,
    state_root: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 18: ``def run(ctx)`` (sync) is a valid connector entry: it runs in a thread,
    emits through ``ctx.emit_sync`` and returns when ``ctx.stopping`` is set."""
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    (bundle / "sync_connector.py").write_text(SYNC_CONNECTOR)
    with (bundle / "goondan.yaml").open("a") as handle:
        handle.write("""---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: syncer}
spec:
  entry: ./sync_connector.py
  events: [{name: trigger_message}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: sync}
spec:
  connectorRef: Connector/syncer
""")
    monkeypatch.setenv("TRIGGER_PORT_FILE", str(tmp_path / "port.json"))
    monkeypatch.setenv("TRIGGER_FAIL", "")
    caplog.set_level(logging.INFO, logger="goondan")
    record: list[str] = []

    async def main() -> None:
        orch, runtime = _runtime(bundle, state_root, record)
        records = runtime.supervisor.records
        async with orch:
            await runtime.start()
            await orch.wait_until(lambda: record == ["assistant@sync echo:from a thread"], 30)
            assert records["sync"].status == "running" and records["sync"].spawn_count == 1
            assert records["sync"].emitted == 1 and records["sync"].last_error is None
            await runtime.stop()
            assert records["sync"].status == "terminated"

    run(main)
    # The stop waited for the thread to see ctx.stopping and return (SYNC_STOP_GRACE_S).
    messages = [r.getMessage() for r in caplog.records]
    assert "sync connector emitted s1" in messages and "sync connector stopping" in messages
    # connectors.md §3 (Python adaptation): ctx.logger is a logging.Logger named after the
    # Connection.
    assert {r.name for r in caplog.records if r.getMessage().startswith("sync connector")} == {
        "goondan.connector.sync"}
