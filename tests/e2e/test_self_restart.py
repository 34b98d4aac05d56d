"""Base tool ``self-restart`` under ``goondan run``: the agent's process is replaced after the
Turn, its conversation kept (docs/base-package.md#self-restart)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.swarm.service import send_control
from goondan.swarm.state import list_live_processes, read_active

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUNDLE = """apiVersion: goondan.ai/v1
kind: Package
metadata: {name: restarter}
spec:
  version: "0.1.0"
  dependencies: [{name: "@goondan/base", version: "^0.0.3-alpha17"}]
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: s
  options:
    script:
      - when: "(?i)restart"
        steps:
          - toolCalls: [{name: self-restart__request, args: {reason: reload prompt}}]
          - text: "restarting: {{toolResult.restartReason}}"
      - when: "(?i)hello"
        text: "hello again"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: solo}
spec:
  modelConfig: {modelRef: Model/m}
  prompt: {system: You restart when asked.}
  tools:
    - ref: {kind: Tool, name: self-restart, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/solo, agents: [Agent/solo]}
"""


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _control(state_root: Path, request: dict[str, Any]) -> dict[str, Any]:
    active = read_active(state_root)
    assert active is not None and active.control_socket
    return asyncio.run(send_control(Path(active.control_socket), request, timeout_s=30))


def _solo_pid(state_root: Path) -> tuple[int, str | None] | None:
    """The idle agent's (pid, start time): with pooled isolation a replacement runs in the same
    host process, a new instance with a new start time."""
    rows = {r.process: r for r in list_live_processes(state_root)}
    row = rows.get("solo.control")
    if row is None or row.status != "idle" or row.pid is None:
        return None
    return row.pid, row.started_at


def test_self_restart_replaces_the_agent_process_after_the_turn(
    state_root: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), "run", "--bundle",
         str(bundle), "--foreground"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        _wait(lambda: (a := read_active(state_root)) is not None and a.pid == proc.pid
              and Path(a.control_socket or "").exists(), 30, "the orchestrator")
        first = _control(state_root, {"command": "request", "input": "hello"})
        assert first["ok"] and first["response"] == "hello again"
        _wait(lambda: _solo_pid(state_root) is not None, 30, "the agent process")
        old_pid = _solo_pid(state_root)
        answer = _control(state_root, {"command": "request", "input": "please restart"})
        assert answer["response"] == "restarting: reload prompt"
        _wait(lambda: _solo_pid(state_root) not in (None, old_pid), 30, "the replacement process")
        again = _control(state_root, {"command": "request", "input": "hello"})
        assert again["response"] == "hello again"
        # the conversation survived the restart: one base.jsonl with all three turns
        bases = list((state_root / "workspaces").glob("*/instances/*/messages/base.jsonl"))
        assert len(bases) == 1
        users = [json.loads(line)["data"]["content"] for line in bases[0].read_text().splitlines()
                 if json.loads(line)["data"]["role"] == "user"]
        assert users == ["hello", "please restart", "hello"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
