"""Benchmark of the built-in ``webhook`` connector's HTTP path (docs/base-connectors.md).

    python scripts/bench_webhook_server.py [--quick]

Signed POST → parse → ``ctx.emit`` → 200, on loopback with keep-alive clients, with an
in-memory emit: this isolates the connector and its HTTP server (the durable inbox of
``goondan run`` adds its append on top). Prints p50/p99 sequentially and with 20 concurrent
clients (in this process, so their latencies include client-side GIL queueing) — target
sequential p50 < 3 ms, zero errors.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

from goondan.connectors import ConnectorContext, ConnectorEvent, EmitReceipt
from goondan.tools import load_entry_module

ROOT = Path(__file__).resolve().parent.parent
CONNECTOR = (
    ROOT / "goondan" / "builtin_packages" / "@goondan" / "base" / "connectors" / "webhook.py"
)
SECRET = "bench-secret"


def client(url: str, count: int, latencies: list[float], errors: list[int]) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    for i in range(count):
        body = json.dumps({"text": f"message {i}", "id": f"{threading.get_ident()}-{i}"}).encode()
        signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        started = time.perf_counter()
        conn.request(
            "POST", "/", body, {"X-Signature-256": signature, "Content-Type": "application/json"}
        )
        response = conn.getresponse()
        response.read()
        latencies.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            errors.append(response.status)
    conn.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def bench(
    module: ModuleType, state: Path, sequential: int, per_client: int, clients: int
) -> None:
    seen: set[str] = set()

    async def emit(event: ConnectorEvent) -> EmitReceipt:
        duplicate = event.id in seen
        seen.add(event.id)
        return EmitReceipt(event.id, duplicate)

    ctx = ConnectorContext(connection_name="bench", connector_name="webhook", config={"PORT": "0"},
                           secrets={"SIGNING_SECRET": SECRET}, emit=emit, state_dir=state)
    task = asyncio.create_task(module.run(ctx))
    address = state / "address.json"
    while not address.exists():
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    url = f"http://127.0.0.1:{json.loads(address.read_text())['port']}"
    try:
        latencies: list[float] = []
        errors: list[int] = []
        await asyncio.to_thread(client, url, sequential, latencies, errors)
        print(f"sequential     n={len(latencies):5d}  p50={percentile(latencies, 0.5):.2f} ms  "
              f"p99={percentile(latencies, 0.99):.2f} ms  errors={len(errors)}")
        met = percentile(latencies, 0.5) < 3.0 and not errors
        print("target sequential p50 < 3 ms, zero errors:", "met" if met else "NOT met")
        latencies, errors = [], []
        threads = [threading.Thread(target=client, args=(url, per_client, latencies, errors))
                   for _ in range(clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        print(
            f"{clients} concurrent  n={len(latencies):5d}  "
            f"p50={percentile(latencies, 0.5):.2f} ms  "
            f"p99={percentile(latencies, 0.99):.2f} ms  "
            f"errors={len(errors)}  {len(latencies) / elapsed:.0f} req/s"
        )
        # The client threads share this process (and its GIL) with the server, so these
        # latencies include client-side queueing; they show throughput and zero errors.
        print("concurrent errors:", len(errors))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def main() -> None:
    quick = "--quick" in sys.argv
    module = load_entry_module(CONNECTOR, kind="connector")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench(module, Path(tmp), 300 if quick else 2000, 50 if quick else 250, 20))


if __name__ == "__main__":
    main()
