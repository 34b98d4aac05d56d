"""Benchmark of a swarm served over MCP and A2A (docs/serving.md). Prints p50/p99 in milliseconds.

    python scripts/bench_serve.py [--quick]

A real ``goondan run --foreground`` (orchestrator, one connector process per Connection, agent
processes) whose Model is the fake provider (``tests/support/fake_provider.py``), which answers
at once: everything measured is goondan's overhead plus one loopback model request.

* **MCP request → answer**: a ``tools/call`` of ``ask_assistant`` POSTed to the ``mcp-server``
  connector on a keep-alive connection, until its JSON-RPC response arrived: HTTP, the connector
  process, IPC to the orchestrator, the durable inbox append, routing, the agent's Turn (one
  model request), the answer back the same way. Sequential (one session: one conversation), then
  20 concurrent clients (a session each, so 20 agent processes; each warmed by one call first).
* **A2A request → answer**: a ``SendMessage`` POSTed to the ``a2a`` connector on a keep-alive
  connection until the completed Task arrived (same path as MCP); sequential in one context,
  then 20 concurrent clients (a context each, so 20 agent processes; each warmed first).
* **webhook request → 200** beside it, same swarm, same client code: a POST to the ``webhook``
  connector answered once the event is durable (it does not wait for the Turn, which runs
  afterwards and competes for the CPU as it would).

Clients are threads of this process with raw ``http.client`` JSON-RPC (the SDK's own cost is
not goondan's); the server is a process tree of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_provider import FakeProvider, FakeReply  # noqa: E402

TOKEN = "bench-serve-token-0123456789"
KEY_ENV = "GOONDAN_BENCH_PROVIDER_KEY"

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: bench-serve}}
spec:
  version: "0.1.0"
  dependencies:
    - {{name: "@goondan/base", version: "0.1.0"}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: main}}
spec:
  provider: openai
  model: fake-model
  endpoint: {endpoint}
  apiKey: {{valueFrom: {{env: {key_env}}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: assistant}}
spec:
  modelConfig: {{modelRef: Model/main}}
  prompts: {{systemPrompt: Answer briefly.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/assistant
  agents: [{{ref: Agent/assistant}}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: mcp-in}}
spec:
  connectorRef: {{kind: Connector, name: mcp-server, package: "@goondan/base"}}
  config:
    PORT: {{value: "0"}}
  secrets:
    AUTH_TOKEN: {{valueFrom: {{env: BENCH_MCP_TOKEN}}}}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: a2a-in}}
spec:
  connectorRef: {{kind: Connector, name: a2a, package: "@goondan/base"}}
  config:
    PORT: {{value: "0"}}
  secrets:
    AUTH_TOKEN: {{valueFrom: {{env: BENCH_MCP_TOKEN}}}}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: hook-in}}
spec:
  connectorRef: {{kind: Connector, name: webhook, package: "@goondan/base"}}
  config:
    PORT: {{value: "0"}}
    ALLOW_UNSIGNED: {{value: "true"}}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _port(state_root: Path, connection: str, proc: subprocess.Popen[bytes]) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "goondan run exited"
        for path in state_root.glob(
            f"workspaces/*/connections/default/{connection}/state/address.json"
        ):
            with contextlib.suppress(OSError, ValueError, KeyError):
                return int(json.loads(path.read_text())["port"])
        time.sleep(0.05)
    raise SystemExit(f"{connection} did not listen")


class McpClient:
    """One MCP session on one keep-alive connection."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.session = ""
        self.ids = 0
        _, headers = self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                            "clientInfo": {"name": "bench", "version": "0"}})
        self.session = headers["mcp-session-id"]

    def rpc(self, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        self.ids += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        self.conn.request("POST", "/mcp", body=body, headers=headers)
        response = self.conn.getresponse()
        data = json.loads(response.read())
        return data, {k.lower(): v for k, v in response.getheaders()}

    def ask(self, text: str) -> float:
        """One call; its latency in ms (raises when the answer is an error)."""
        start = time.perf_counter()
        data, _ = self.rpc("tools/call", {"name": "ask_assistant", "arguments": {"message": text}})
        elapsed = (time.perf_counter() - start) * 1000
        if "result" not in data or data["result"].get("isError"):
            raise RuntimeError(f"call failed: {data}")
        return elapsed


class A2aClient:
    """One A2A context on one keep-alive connection (``SendMessage``, answered once the Task
    ended)."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.context = f"bench-{id(self)}"
        self.ids = 0

    def ask(self, text: str) -> float:
        """One message; its latency in ms (raises unless the Task completed)."""
        self.ids += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": "SendMessage", "params": {
            "message": {"messageId": f"m{self.ids}", "contextId": self.context, "role": "ROLE_USER",
                        "parts": [{"text": text}]}}})
        start = time.perf_counter()
        self.conn.request("POST", "/a2a", body=body, headers={
            "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        data = json.loads(self.conn.getresponse().read())
        elapsed = (time.perf_counter() - start) * 1000
        if (
            data.get("result", {}).get("task", {}).get("status", {}).get("state")
            != "TASK_STATE_COMPLETED"
        ):
            raise RuntimeError(f"message failed: {data}")
        return elapsed


def _webhook(port: int, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    for i in range(n):
        body = json.dumps({"text": f"hook {i}", "instanceKey": f"hook:{i % 4}"})
        start = time.perf_counter()
        conn.request("POST", "/", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        out.append((time.perf_counter() - start) * 1000)
        if response.status != 200:
            raise RuntimeError(f"webhook answered {response.status}")
    return out


def _concurrent(work: Any, clients: int) -> list[float]:
    results: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(clients)

    def body(index: int) -> None:
        try:
            prepared = work(index)
            barrier.wait()
            results[index] = prepared()
        except BaseException as exc:  # reported after the join
            errors.append(exc)
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.abort()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [v for values in results for v in values]


def _line(name: str, values: list[float]) -> str:
    return (f"  {name:<34} n={len(values):<5} p50 {statistics.median(values):7.2f} ms   "
            f"p99 {percentile(values, 0.99):7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    args = parser.parse_args()
    sequential, per_client, clients = (50, 5, 20) if args.quick else (200, 20, 20)
    with FakeProvider() as fake, tempfile.TemporaryDirectory() as tmp:
        # every model request gets an instant reply (webhook Turns included)
        fake.enqueue(*[FakeReply.reply("ok", chunks=1) for _ in range(
            3 * (2 * sequential + clients * (per_client + 1)) + 100)])
        root = Path(tmp)
        (root / "bundle").mkdir()
        (root / "bundle" / "goondan.yaml").write_text(
            BUNDLE.format(endpoint=fake.base_url("openai"), key_env=KEY_ENV), encoding="utf-8")
        state_root = root / "state"
        env = {**os.environ, KEY_ENV: "sk-bench", "BENCH_MCP_TOKEN": TOKEN,
               "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "goondan",
                "--state-root",
                str(state_root),
                "run",
                "--bundle",
                str(root / "bundle"),
                "--foreground",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            mcp_port, hook_port = (
                _port(state_root, "mcp-in", proc),
                _port(state_root, "hook-in", proc),
            )
            a2a_port = _port(state_root, "a2a-in", proc)
            client = McpClient(mcp_port)
            client.ask("warm up")
            seq = [client.ask(f"question {i}") for i in range(sequential)]

            def mcp_worker(index: int) -> Any:
                own = McpClient(mcp_port)
                own.ask("warm up")  # its agent process starts here, not in the figures
                return lambda: [own.ask(f"q{index}-{i}") for i in range(per_client)]

            conc = _concurrent(mcp_worker, clients)
            a2a = A2aClient(a2a_port)
            a2a.ask("warm up")
            a2a_seq = [a2a.ask(f"question {i}") for i in range(sequential)]

            def a2a_worker(index: int) -> Any:
                own = A2aClient(a2a_port)
                own.ask("warm up")
                return lambda: [own.ask(f"q{index}-{i}") for i in range(per_client)]

            a2a_conc = _concurrent(a2a_worker, clients)
            _webhook(hook_port, 10)  # warm
            hook_seq = _webhook(hook_port, sequential)
            hook_conc = _concurrent(lambda index: lambda: _webhook(hook_port, per_client), clients)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print("MCP tools/call → answer (instant fake model; includes the Turn and its model request)")
    print(_line("sequential, one session", seq))
    print(_line(f"{clients} concurrent sessions", conc))
    print("A2A SendMessage → completed Task (same path)")
    print(_line("sequential, one context", a2a_seq))
    print(_line(f"{clients} concurrent contexts", a2a_conc))
    print("webhook POST → 200 (durable append; the Turn runs afterwards)")
    print(_line("sequential", hook_seq))
    print(_line(f"{clients} concurrent clients", hook_conc))


if __name__ == "__main__":
    main()
