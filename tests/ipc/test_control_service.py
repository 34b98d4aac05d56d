"""The control socket of a real :class:`SwarmService`: error answers and attached clients that
stop reading (docs/orchestrator.md "Control socket")."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from goondan.config import load_bundle
from goondan.ipc.controlwire import encode_line
from goondan.swarm import service as service_module
from goondan.swarm.service import SwarmService, send_control

BUNDLE = """apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: ctl}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec: {{provider: scripted, model: s, options: {{script: {script}}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: a}}
spec: {{modelConfig: {{modelRef: Model/m}}, prompts: {{systemPrompt: x}}}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: main}}
spec: {{entryAgent: Agent/a, agents: [{{ref: Agent/a}}]}}
"""


def _service(tmp_path: Path, state_root: Path, script: list[str]) -> SwarmService:
    bundle_dir = tmp_path / "bundle"
    bundle_dir.mkdir()
    (bundle_dir / "goondan.yaml").write_text(BUNDLE.format(script=json.dumps(script)))
    return SwarmService(load_bundle(bundle_dir, state_root=state_root), state_root=state_root,
                        log_to_file=False)


async def _until(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_goondan_error_is_answered_with_its_code_message_and_suggestion(tmp_path: Path,
                                                                        state_root: Path) -> None:
    async def main() -> dict[str, Any]:
        async with _service(tmp_path, state_root, ["ok"]) as service:
            await service.orchestrator.shutdown()  # a request racing the orchestrator's stop
            return await send_control(service.socket_path, {"command": "request", "input": "hi"},
                                      timeout_s=30)

    answer = asyncio.run(main())
    assert answer == {
        "ok": False,
        "code": "E_IPC_SHUTDOWN",
        "message": "the orchestrator is shutting down",
        "suggestion": None,
    }


def test_a_bug_in_a_control_request_is_logged_and_answered_without_its_details(
        tmp_path: Path, state_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> dict[str, Any]:
        async with _service(tmp_path, state_root, ["ok"]) as service:
            # int([1]) inside the handler: a TypeError, i.e. a bug of the orchestrator's code
            return await send_control(service.socket_path, {"command": "request", "input": "hi",
                                                            "timeoutMs": [1]}, timeout_s=30)

    with caplog.at_level(logging.ERROR, logger="goondan.swarm.service"):
        answer = asyncio.run(main())
    assert answer["ok"] is False and answer["code"] == "E_INTERNAL"
    assert "int()" not in answer["message"] and "list" not in answer["message"]
    failures = [r for r in caplog.records if r.name == "goondan.swarm.service" and r.exc_info]
    assert failures and failures[0].exc_info is not None and failures[0].exc_info[0] is TypeError


@pytest.mark.e2e
def test_a_streaming_client_that_stops_reading_loses_events_not_the_turn(
        tmp_path: Path, state_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An attached client that does not read (Ctrl-Z) makes the orchestrator hold at most about
    STREAM_BUFFER_BYTES of its events; the Turn goes on, and its answer is kept and sent."""
    monkeypatch.setattr(service_module, "STREAM_BUFFER_BYTES", 16 * 1024)
    chunk = 300_000  # the scripted model streams a reply in 3 text deltas
    big = "a" * (3 * chunk)

    async def main() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with _service(tmp_path, state_root, [big, "second"]) as service:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(service.socket_path))
            client.sendall(encode_line({"command": "request", "input": "hi", "stream": True}))
            # the client reads nothing; the next Turn of the same conversation runs after that one
            await _until(
                lambda: ("a", "control") in service.orchestrator.records, "the streamed request"
            )
            second = await send_control(
                service.socket_path, {"command": "request", "input": "again"}, timeout_s=60
            )
            assert second == {
                "ok": True,
                "agent": "a",
                "instanceKey": "control",
                "response": "second",
            }
            client.setblocking(False)
            received = bytearray()

            def read() -> bool:
                try:
                    data = client.recv(1 << 20)
                except BlockingIOError:
                    return False
                received.extend(data)
                return not data

            await _until(read, "the end of the streamed answer")
            client.close()
        lines = [json.loads(line) for line in bytes(received).splitlines()]
        return [line["event"] for line in lines if "event" in line], lines[-1]

    events, answer = asyncio.run(main())
    assert answer["ok"] is True and answer["response"] == big  # the Turn's whole answer
    assert answer["eventsDropped"] >= 2  # the client knows its stream was cut
    streamed = sum(len(e["text"]) for e in events if e["type"] == "llm.delta")
    assert streamed <= chunk, (
        f"{streamed} bytes of deltas were buffered for a client that did not read"
    )


@pytest.mark.e2e
def test_a_client_that_never_reads_its_answer_is_dropped_after_the_drain_timeout(
        tmp_path: Path, state_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing waits forever on a stuck client: after DRAIN_TIMEOUT_S its connection is dropped."""
    monkeypatch.setattr(service_module, "DRAIN_TIMEOUT_S", 0.2)
    big = "a" * 900_000  # more than the kernel's socket buffer holds

    async def main() -> None:
        async with _service(tmp_path, state_root, [big, "second"]) as service:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(str(service.socket_path))
            client.sendall(encode_line({"command": "request", "input": "hi", "stream": True}))
            await _until(
                lambda: ("a", "control") in service.orchestrator.records, "the streamed request"
            )
            second = await send_control(
                service.socket_path, {"command": "request", "input": "again"}, timeout_s=60
            )
            assert second["response"] == "second"  # the first Turn ended
            await _until(
                lambda: not service._control_tasks, "the stuck client's request to end", 10
            )
            client.close()

    asyncio.run(main())
