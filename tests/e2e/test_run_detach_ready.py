"""``goondan run --detach`` says "started" only for a swarm that works (issue 32 item 1).

It waits until every connector runs (and no worker crashed while it started); a connector that
cannot start — its webhook port is taken — fails the start with ``E_RUN_START_FAILED`` naming
the port, and nothing is left running (the ``no_leftover_processes`` fixture of
tests/e2e/conftest.py checks the process tree). ``status`` shows a crash-looping connector as
``crashLoopBackOff`` with its last error; the connector's log has no traceback for it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.swarm.state import running_records
from tests.support.connector_e2e import address_file, base_bundle, goondan_run, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
SECRET = "detach-ready-signing-secret"


def _connection(port: int) -> str:
    return ("apiVersion: goondan.ai/v1\nkind: Connection\nmetadata: {name: http-in}\nspec:\n"
            "  connectorRef: {kind: Connector, name: webhook, package: \"@goondan/base\"}\n"
            "  swarmRef: Swarm/default\n"
            f"  config:\n    PORT: {{value: \"{port}\"}}\n    PATH: {{value: /hooks}}\n"
            "  secrets:\n    SIGNING_SECRET: {valueFrom: {env: WEBHOOK_SIGNING_SECRET}}\n")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 another process listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def goondan(*args: str, cwd: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WEBHOOK_SIGNING_SECRET": SECRET}
    return subprocess.run([sys.executable, "-m", "goondan", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, check=False, env=env)


def test_detach_with_the_webhook_port_taken_fails_naming_the_port_and_leaves_nothing(
        tmp_path: Path, state_root: Path, taken_port: int) -> None:
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, _connection(taken_port))
    began = time.monotonic()
    result = goondan("--state-root", str(state_root), "run", "--detach", str(bundle), cwd=tmp_path)
    took = time.monotonic() - began
    assert result.returncode != 0, result.stdout
    assert took < 15, f"run --detach took {took:.1f} s to fail"
    assert "started in the background" not in result.stdout
    assert "E_RUN_START_FAILED" in result.stderr and f"127.0.0.1:{taken_port}" in result.stderr, (
        result.stderr
    )
    assert "Connection http-in" in result.stderr and "Traceback" not in result.stderr
    assert running_records(state_root) == []
    # the same with --json: one error document
    again = goondan(
        "--state-root", str(state_root), "--json", "run", "-d", str(bundle), cwd=tmp_path
    )
    doc = json.loads(again.stdout or again.stderr)
    assert (
        again.returncode != 0
        and doc["code"] == "E_RUN_START_FAILED"
        and str(taken_port) in doc["message"]
    )
    assert running_records(state_root) == []


def test_detach_returns_once_the_connector_listens(tmp_path: Path, state_root: Path) -> None:
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, _connection(0))
    started = goondan(
        "--state-root",
        str(state_root),
        "run",
        "-d",
        "--ready-timeout",
        "60",
        str(bundle),
        cwd=tmp_path,
    )
    try:
        assert started.returncode == 0, started.stderr
        assert "started in the background" in started.stdout
        # ready means listening: the connector wrote its address before run --detach returned
        assert address_file(state_root, "http-in") is not None
        doc = json.loads(
            goondan(
                "--state-root", str(state_root), "status", "--json", "-b", str(bundle), cwd=tmp_path
            ).stdout
        )
        [row] = [p for p in doc["swarms"][0]["processes"] if p["kind"] == "connector"]
        assert row["status"] == "running" and row["lastError"] is None
    finally:
        stopped = goondan("--state-root", str(state_root), "stop", "-b", str(bundle), cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr


def _connector_row(state_root: Path, bundle: Path) -> dict[str, Any] | None:
    status = goondan(
        "--state-root", str(state_root), "status", "--json", "-b", str(bundle), cwd=REPO
    )
    if status.returncode != 0:
        return None
    rows = [
        p
        for s in json.loads(status.stdout)["swarms"]
        for p in s["processes"]
        if p["kind"] == "connector"
    ]
    return rows[0] if rows else None


def test_status_shows_a_crash_looping_connector_and_its_last_error(
        tmp_path: Path, state_root: Path, taken_port: int) -> None:
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, _connection(taken_port))
    with goondan_run(bundle, state_root, {"WEBHOOK_SIGNING_SECRET": SECRET}) as proc:
        seen: list[dict[str, Any]] = []

        def looping() -> bool:
            row = _connector_row(state_root, bundle)
            seen.append(row or {})
            return row is not None and row["status"] == "crashLoopBackOff"

        wait_for(looping, 60, "the connector in crashLoopBackOff")
        row = seen[-1]
        assert f"127.0.0.1:{taken_port}" in row["lastError"] and row["consecutiveCrashes"] > 5
        # the text view: the status and the last error
        text = goondan("--state-root", str(state_root), "status", "-b", str(bundle), cwd=REPO)
        assert "crashLoopBackOff" in text.stdout and f"127.0.0.1:{taken_port}" in text.stdout, (
            text.stdout
        )
        # a connector's start error is one line in its log: no traceback without --debug
        logs = goondan("--state-root", str(state_root), "logs", "-b", str(bundle), "--process",
                       "connection.http-in", cwd=REPO)
        assert f"127.0.0.1:{taken_port}" in logs.stdout and "Traceback" not in logs.stdout, (
            logs.stdout
        )
        proc.terminate()
        proc.wait(timeout=30)
