"""The gated bundle of the Ray crash tests (test_ray_engine.py and test_ray_postgres.py here).

Agent ``worker`` answers ``hello``, except to a message starting with ``wait``: then it calls
the idempotent tool ``gate__wait``, which logs ``<pid> <idempotencyKey>`` and waits for the
``go`` file the test writes, and answers ``done``. A test thus holds a turn inside a tool call
on a known host process, for as long as it needs, without a timed delay.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

# A tool that waits for a file the test writes (no sleep in the test): each call first appends
# "<pid> <idempotencyKey>" to the log, so the test sees which host process ran it.
_GATE = '''
import asyncio
import os
import sys
from pathlib import Path


async def wait(ctx, input):
    print("gate-canary: the tool ran", file=sys.stderr, flush=True)
    with open(input["log"], "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()} {ctx.idempotency_key}\\n")
    while not Path(input["go"]).exists():
        await asyncio.sleep(0.02)
    return "opened"


handlers = {"wait": wait}
'''


def gate_bundle(tmp_path: Path, log: Path, go: Path) -> Path:
    bundle = tmp_path / "gate"
    (bundle / "tools").mkdir(parents=True)
    (bundle / "tools" / "gate.py").write_text(_GATE, encoding="utf-8")
    args = json.dumps({"log": str(log), "go": str(go)})
    (bundle / "goondan.yaml").write_text(f"""\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: ray-gate
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: fake
spec:
  provider: scripted
  model: fake
  options:
    loop: true
    script:
      - when: "^wait"
        steps:
          - toolCalls:
              - {{name: gate__wait, args: {args}}}
          - text: done
      - text: hello
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: gate
spec:
  entry: ./tools/gate.py
  exports:
    - name: wait
      description: Wait until the go file exists.
      idempotent: true
      parameters:
        type: object
        properties:
          log: {{type: string}}
          go: {{type: string}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: worker
spec:
  modelConfig:
    modelRef: Model/fake
  prompts:
    systemPrompt: You are a test agent.
  tools:
    - ref: Tool/gate
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/worker
  agents:
    - ref: Agent/worker
""", encoding="utf-8")
    return bundle


async def until(predicate: Any, timeout: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := predicate()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
    return value


def log_lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []
