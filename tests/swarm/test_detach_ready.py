"""When ``run --detach`` calls a swarm ready (goondan/swarm/daemon.py ``_await_workers``;
docs/cli.md "Service mode"): every agent and connector process runs and kept running for
``SETTLE_S`` — and a swarm with no such process is ready as soon as it answers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from goondan.swarm import daemon
from goondan.swarm.state import ActiveRuntime


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A live process standing for the detached orchestrator."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _active(pid: int) -> ActiveRuntime:
    return ActiveRuntime(instance_key="default", bundle_path="/nonexistent/goondan.yaml",
                         swarm="default", pid=pid, started_at="2026-01-01T00:00:00.000Z",
                         control_socket="/nonexistent.sock")


def _answering(monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any]) -> list[float]:
    """Every status query answers ``doc``; the list records when each one was made."""
    import time

    asked: list[float] = []

    def query_status(active: ActiveRuntime, *, timeout_s: float = 10.0) -> dict[str, Any]:
        asked.append(time.monotonic())
        return doc

    monkeypatch.setattr(daemon, "query_status", query_status)
    return asked


def test_a_swarm_without_agent_or_connector_processes_is_ready_at_its_first_answer(
    monkeypatch: pytest.MonkeyPatch, child: subprocess.Popen[bytes],
) -> None:
    asked = _answering(monkeypatch, {"ok": True, "processes": [], "connections": []})
    assert daemon._await_workers(_active(child.pid), child, deadline=float("inf")) is None
    assert len(asked) == 1  # no settle period: no process that could still crash


def test_a_running_connector_must_keep_running_for_the_settle_period(
    monkeypatch: pytest.MonkeyPatch, child: subprocess.Popen[bytes],
) -> None:
    monkeypatch.setattr(daemon, "SETTLE_S", 0.3)
    row = {"connection": "http-in", "connector": "webhook", "process": "connector.http-in",
           "pid": 4242, "status": "running"}
    asked = _answering(monkeypatch, {"ok": True, "processes": [], "connections": [row]})
    assert daemon._await_workers(_active(child.pid), child, deadline=float("inf")) is None
    assert len(asked) >= 2 and asked[-1] - asked[0] >= 0.3
