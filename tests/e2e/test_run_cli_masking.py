"""Issue 32 item 2: masking hides secrets only, and the output does not depend on the current
directory.

A Connection's ``config`` value and an MCP server's literal ``env`` value are settings: shown.
A Connection's ``secrets`` value and an MCP ``env`` value read from a variable are secrets:
masked. ``goondan logs`` (after the swarm stopped, so no running record names the bundle) and
``goondan validate --check-mcp`` print the same from the bundle's directory and from elsewhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goondan.swarm.state import pid_alive, running_records

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SETTING, TOKEN = "plain-setting-4242", "literal-token-98765"
ZONE, ZONE_KEY = "Europe/Paris", "zone-key-secret-5150"

BUNDLE = f"""\
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: masking}}
spec: {{version: "0.1.0"}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec: {{provider: scripted, model: ok, options: {{loop: true, script: [ok]}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: helper}}
spec:
  modelConfig: {{modelRef: Model/m}}
  prompts: {{systemPrompt: Help.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec: {{entryAgent: Agent/helper, agents: [Agent/helper]}}
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {{name: shout}}
spec: {{entry: ./shout.py, events: [{{name: shout}}]}}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: loud}}
spec:
  connectorRef: Connector/shout
  config: {{SETTING: {{value: "{SETTING}"}}}}
  secrets: {{TOKEN: {{value: "{TOKEN}"}}}}
  ingress: {{rules: [{{route: {{}}}}]}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: zone}}
spec:
  mcp:
    command: ["{sys.executable}", "zone_server.py"]
    env:
      ZONE_NAME: {{value: "{ZONE}"}}
      ZONE_KEY: {{valueFrom: {{env: ZONE_KEY}}}}
"""

SHOUT = """\
import asyncio
import sys


async def run(ctx):
    setting, token = ctx.config['SETTING'], ctx.secrets['TOKEN']
    print(f"setting={setting} token={token}", file=sys.stderr, flush=True)
    await asyncio.Event().wait()
"""

ZONE_SERVER = """\
import os
import sys

print("zone", os.environ["ZONE_NAME"], "key", os.environ["ZONE_KEY"], file=sys.stderr, flush=True)
sys.exit(1)
"""


def goondan(*args: str, cwd: Path, state_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "ZONE_KEY": ZONE_KEY}
    return subprocess.run([sys.executable, "-m", "goondan", *args, "--state-root", str(state_root)],
                          capture_output=True, text=True, timeout=90, cwd=cwd, check=False,
                          stdin=subprocess.DEVNULL, env=env)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "goondan.yaml").write_text(BUNDLE, encoding="utf-8")
    (root / "shout.py").write_text(SHOUT, encoding="utf-8")
    (root / "zone_server.py").write_text(ZONE_SERVER, encoding="utf-8")
    return root


def test_logs_mask_connection_secrets_not_config_from_any_directory(
        bundle: Path, tmp_path: Path, state_root: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    started = goondan("run", "--detach", cwd=bundle, state_root=state_root)
    assert started.returncode == 0, started.stderr
    pids = [r.pid for r in running_records(state_root)]
    try:
        deadline = time.monotonic() + 60
        while (
            "setting="
            not in goondan(
                "logs", "-p", "connection.loud", cwd=bundle, state_root=state_root
            ).stdout
        ):
            assert time.monotonic() < deadline, "the connector never wrote its line"
            time.sleep(0.2)
    finally:
        stopped = goondan("stop", cwd=bundle, state_root=state_root)
    assert stopped.returncode == 0, stopped.stderr
    assert not [pid for pid in pids if pid_alive(pid)]

    here = goondan("logs", "-p", "connection.loud", "--stream", "stderr", "--no-color", cwd=bundle,
                   state_root=state_root)
    there = goondan(
        "logs",
        "-p",
        "connection.loud",
        "--stream",
        "stderr",
        "--no-color",
        cwd=elsewhere,
        state_root=state_root,
    )  # the most recent swarm's logs: the same ones
    named = goondan(
        "logs",
        "-p",
        "connection.loud",
        "--stream",
        "stderr",
        "--no-color",
        "--bundle",
        str(bundle),
        cwd=elsewhere,
        state_root=state_root,
    )
    assert f"setting={SETTING} token=***" in here.stdout, here.stdout
    for done in (here, there, named):
        assert done.returncode == 0, done.stderr
        assert done.stdout == here.stdout
        assert TOKEN not in done.stdout + done.stderr


def test_check_mcp_shows_literal_env_masks_env_secrets_from_any_directory(
        bundle: Path, tmp_path: Path, state_root: Path) -> None:
    here = goondan("validate", "--check-mcp", cwd=bundle, state_root=state_root)
    there = goondan("validate", "--check-mcp", str(bundle), cwd=tmp_path, state_root=state_root)
    for done in (here, there):
        assert done.returncode == 4, done.stdout + done.stderr
        shown = done.stdout + done.stderr
        assert f"zone {ZONE} key ***" in shown, shown
        assert ZONE_KEY not in shown
    def server_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
        lines = (done.stdout + done.stderr).splitlines()
        return [re.sub(r"after \d+ ms", "after N ms", line) for line in lines if "zone " in line]

    assert server_lines(here) == server_lines(there)
