"""Connectors under the Ray engine, on the session's local two-node cluster (docs/scaling.md):
the connector runs in the connector host actor, its ``emit``/``answer`` frames cross the engine
boundary, the orchestrator writes the inbox and routes each event to its instance's host.

* the webhook example answers under ``goondan run --engine ray`` with the local engine's
  transcripts;
* 1,000 instance keys × 2 events through the ingress (a connector's ``ctx.emit``) on 4 host
  actors with idle release on: every event processed exactly once, in order per instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from goondan.config import load_bundle
from goondan.swarm.connections import ConnectionRuntime
from goondan.swarm.orchestrator import Orchestrator
from tests.support.connector_e2e import (
    goondan_run,
    http_request,
    instances,
    sign_webhook,
    wait_for,
    webhook_port,
)

pytest.importorskip("ray")

from goondan.engines.ray.spawner import CONNECTOR_HOST, RaySpawner

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SECRET = "ray-webhook-signing-secret"


def _webhook_bundle(tmp_path: Path) -> Path:
    """examples/webhook on a free port (``PORT: 0``; the port is in ``address.json``)."""
    bundle = tmp_path / "webhook"
    shutil.copytree(EXAMPLES / "webhook", bundle)
    manifest = bundle / "goondan.yaml"
    text = manifest.read_text()
    assert 'PORT: {value: "8080"}' in text
    manifest.write_text(text.replace('PORT: {value: "8080"}', 'PORT: {value: "0"}'))
    return bundle


def _post(port: int, body: dict[str, Any]) -> dict[str, Any]:
    raw = json.dumps(body).encode()
    status, answer = http_request(
        port, "POST", "/hooks", raw, {"X-Signature-256": sign_webhook(SECRET, raw)}
    )
    assert status == 200, answer
    return answer


def _listener(port: int) -> str:
    """The command line of the process listening on 127.0.0.1:``port`` (Linux ``/proc``)."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
            inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                    return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    raise AssertionError(f"nobody listens on port {port}")


def _webhook_transcripts(
    bundle: Path, state_root: Path, args: list[str]
) -> tuple[dict[str, list[str]], str]:
    """Two signed POSTs (one routed to ``ops``, one to ``assistant``) and a retried one; the
    stored conversations without ids and timestamps, and who listened on the webhook's port."""
    with goondan_run(bundle, state_root, {"WEBHOOK_SIGNING_SECRET": SECRET}, args) as proc:
        port = webhook_port(state_root, "http-in", timeout=120)
        listener = _listener(port)
        alert = {
            "id": "alert-1",
            "text": "The database is down",
            "properties": {"route": "ops", "service": "db"},
        }
        assert _post(port, alert)["duplicate"] is False
        assert (
            _post(port, {"id": "hello-1", "instanceKey": "customer-17", "text": "Hello!"})[
                "duplicate"
            ]
            is False
        )
        wait_for(lambda: {"alert:db", "customer-17"} <= set(instances(state_root))
                 and all('"assistant"' in i["messages"] for i in instances(state_root).values()),
                 120, "both answers")
        assert _post(port, alert)["duplicate"] is True  # a retried delivery starts no second turn
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
    stored = instances(state_root)

    def strip(text: str) -> list[str]:  # ids and timestamps differ between runs
        return [
            re.sub(
                r"[0-9a-f]{6,}|\d{4}-\d\d-\d\dT[0-9:.]+Z?",
                "*",
                json.dumps(json.loads(line)["data"], sort_keys=True),
            )
            for line in text.splitlines()
        ]

    return (
        {
            key: [stored[key]["metadata"]["agentName"], *strip(stored[key]["messages"])]
            for key in sorted(stored)
        },
        listener,
    )


def test_webhook_example_answers_under_ray_like_the_local_engine(
    cluster: Any, tmp_path: Path
) -> None:
    bundle = _webhook_bundle(tmp_path)
    local, local_listener = _webhook_transcripts(bundle, tmp_path / "local", [])
    remote, ray_listener = _webhook_transcripts(
        bundle, tmp_path / "ray", ["--engine", "ray", "--ray-address", cluster.address]
    )
    # Locally a connector process listens; on Ray the connector host actor, on this (the driver's)
    # node.
    assert "multiprocessing" in local_listener and not local_listener.startswith("ray::")
    assert ray_listener.startswith("ray::AgentHost"), ray_listener
    assert set(local) == {"alert:db", "customer-17"}
    assert local["alert:db"][0] == "ops" and local["customer-17"][0] == "assistant"
    assert any("Ops here: alert received" in line for line in local["alert:db"])
    assert any("your webhook message arrived" in line for line in local["customer-17"])
    assert remote == local
    # the orchestrator wrote each inbox once per event
    for root in (tmp_path / "local", tmp_path / "ray"):
        inbox = next(root.glob("workspaces/*/connections/default/http-in/inbox.jsonl"))
        assert [json.loads(line)["event"]["id"] for line in inbox.read_text().splitlines()] == [
            "alert-1",
            "hello-1",
        ]


KEYS = 1000
BURST = """\
import asyncio


async def run(ctx):
    keys = int(ctx.config["KEYS"])
    for n in (1, 2):  # every key's first event is accepted before any second one
        await asyncio.gather(*(ctx.emit({
            "id": f"k{k}-e{n}", "name": "burst", "instanceKey": f"k{k}",
            "message": {"type": "text", "text": f"event {n} for key k{k}"},
        }) for k in range(keys)))
"""
BUNDLE = f"""\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: ok}}
spec:
  provider: scripted
  model: ok
  options: {{loop: true, script: [{{text: ok}}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: worker}}
spec:
  modelConfig: {{modelRef: Model/ok}}
  prompts: {{systemPrompt: Answer ok.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/worker
  agents: [{{ref: Agent/worker}}]
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {{name: burst}}
spec:
  entry: ./burst.py
  events: [{{name: burst}}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: burst-in}}
spec:
  connectorRef: Connector/burst
  config: {{KEYS: {{value: "{KEYS}"}}}}
  ingress:
    rules:
      - route: {{}}
"""


def test_many_instances_through_the_ingress_exactly_once_in_order(
    cluster: Any, tmp_path: Path
) -> None:
    root = tmp_path / "burst"
    root.mkdir()
    (root / "goondan.yaml").write_text(BUNDLE)
    (root / "burst.py").write_text(BURST)
    state_root = tmp_path / "state"
    bundle = load_bundle(root, state_root=state_root)
    swarm = bundle.swarm_spec(None)

    async def main() -> list[dict[str, Any]]:
        spawner = RaySpawner(bundle.root, state_root=state_root, swarm=swarm.name, hosts=4)
        orch = Orchestrator(
            spawner,
            swarm_name=swarm.name,
            entry_agent=swarm.entry_agent,
            agents=swarm.agents,
            project_root=bundle.root,
            grace_period_ms=5000,
            idle_timeout_ms=200,
        )
        connections = ConnectionRuntime(bundle, swarm, orch, spawner, state_root=state_root)
        record = connections.supervisor.records["burst-in"]
        try:
            async with orch:
                await connections.start()
                await orch.wait_until(lambda: record.status == "completed", timeout=240)
                assert record.emitted == 2 * KEYS and record.spawn_count == 1
                await orch.wait_until(
                    lambda: (
                        sum(r.processed for r in orch.records.values()) >= 2 * KEYS
                        and orch.released >= KEYS
                    ),
                    timeout=240,
                )
                await connections.stop()
                import ray

                driver_node = ray.get_runtime_context().get_node_id()
                info = await spawner.host_info()
                (connector_host,) = [h for h in info if h["name"].endswith(CONNECTOR_HOST)]
                assert spawner.connector_host is not None
                assert connector_host["nodeId"] == driver_node, info  # pinned next to the driver
                return info
        finally:
            await spawner.aclose()

    hosts = asyncio.run(asyncio.wait_for(main(), 480))
    agent_hosts = [h for h in hosts if not h["name"].endswith(CONNECTOR_HOST)]
    # 4 agent hosts + the connector host
    assert len(agent_hosts) == 4 and len({h["pid"] for h in hosts}) == 5
    # a host loads the bundle once, not per instance
    assert all(h["bundleLoads"] <= 2 for h in agent_hosts)
    inbox = next(state_root.glob("workspaces/*/connections/default/burst-in/inbox.jsonl"))
    accepted = [json.loads(line)["event"]["id"] for line in inbox.read_text().splitlines()]
    # each once
    assert sorted(accepted) == sorted(f"k{k}-e{n}" for k in range(KEYS) for n in (1, 2))
    bases = list(state_root.glob("workspaces/*/instances/*/messages/base.jsonl"))
    assert len(bases) == KEYS
    for base in bases:
        records = [json.loads(line)["data"] for line in base.read_text().splitlines()]
        users = [json.dumps(r["content"]) for r in records if r.get("role") == "user"]
        assert (
            len(users) == 2 and "event 1 for key" in users[0] and "event 2 for key" in users[1]
        ), users
        assert sum(1 for r in records if r.get("role") == "assistant") == 2


def test_a_lost_connector_host_restarts_its_connector(cluster: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The connector host's process is killed: Ray restarts the actor, the supervisor sees the
    connector crash and starts it again (once, at once), and the inbox still knows every id."""
    from tests.support.trigger_client import FIXTURE, send_trigger, wait_port

    root = tmp_path / "durable"
    shutil.copytree(FIXTURE, root)
    port_file = tmp_path / "port.json"
    # read by the connector in the connector host: the driver forwards its environment
    monkeypatch.setenv("TRIGGER_PORT_FILE", str(port_file))
    monkeypatch.setenv("TRIGGER_FAIL", "")
    state_root = tmp_path / "state"
    bundle = load_bundle(root, state_root=state_root)
    swarm = bundle.swarm_spec(None)

    async def main() -> None:
        spawner = RaySpawner(bundle.root, state_root=state_root, swarm=swarm.name, hosts=1)
        orch = Orchestrator(
            spawner,
            swarm_name=swarm.name,
            entry_agent=swarm.entry_agent,
            agents=swarm.agents,
            project_root=bundle.root,
            grace_period_ms=5000,
        )
        connections = ConnectionRuntime(bundle, swarm, orch, spawner, state_root=state_root)
        record = connections.supervisor.records["trig"]
        try:
            async with orch:
                await connections.start()
                port = await asyncio.to_thread(wait_port, port_file, 60)
                first_pid = json.loads(port_file.read_text())["pid"]
                assert await asyncio.to_thread(send_trigger, port, "e1", "before") == {
                    "id": "e1",
                    "duplicate": False,
                }
                port_file.unlink()
                os.kill(first_pid, signal.SIGKILL)  # the connector host's process
                await orch.wait_until(
                    lambda: record.spawn_count == 2 and record.status == "running", timeout=90
                )
                port = await asyncio.to_thread(wait_port, port_file, 60)
                assert json.loads(port_file.read_text())["pid"] != first_pid
                assert await asyncio.to_thread(send_trigger, port, "e2", "after") == {
                    "id": "e2",
                    "duplicate": False,
                }
                assert (await asyncio.to_thread(send_trigger, port, "e1", "again"))[
                    "duplicate"
                ] is True
                await orch.wait_until(
                    lambda: sum(r.processed for r in orch.records.values()) >= 2, timeout=60
                )
                assert record.total_crashes == 1 and record.emitted == 2
                await connections.stop()
        finally:
            await spawner.aclose()

    asyncio.run(asyncio.wait_for(main(), 240))
    inbox = next(state_root.glob("workspaces/*/connections/default/trig/inbox.jsonl"))
    assert [json.loads(line)["event"]["id"] for line in inbox.read_text().splitlines()] == [
        "e1",
        "e2",
    ]
