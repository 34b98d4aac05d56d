"""Hostile input, item 2 (memory): a tool printing 500 MB keeps the agent small.

Repro: ``bash__exec`` of 500 MB used 1.9 GB RSS and stored a 500 MB JSONL line. The turn runs
in a child process that reports its own peak RSS (``VmHWM`` of ``/proc/self/status``; the shell
pipeline that produces the bytes is not the agent and is not counted). Not ``ru_maxrss``: Linux
carries it over ``execve``, so it would report the forking pytest process's size.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.tools.output import DEFAULT_MAX_OUTPUT_BYTES
from tests.support.hostile import write_bundle

MIB = 1024 * 1024

SCRIPT = """\
import asyncio, json, sys
from pathlib import Path
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime

bundle, state_root = Path(sys.argv[1]), Path(sys.argv[2])
command = "head -c 500000000 /dev/zero | tr '\\\\0' a"
model = ScriptedModel([
    {"toolCalls": [{"name": "bash__exec", "args": {"command": command, "timeoutMs": 600000}}]},
    "done",
])

async def main():
    async with Runtime.from_bundle(bundle, state_root=state_root, models={"main": model}) as rt:
        result = await rt.run_turn("main", "make a lot of output")
        assert result.text == "done", result.error

asyncio.run(main())
status = Path("/proc/self/status").read_text()
peak_kib = int(next(l for l in status.splitlines() if l.startswith("VmHWM:")).split()[1])
print(json.dumps({"peakKiB": peak_kib}))
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/status")
def test_a_500_mb_tool_output_keeps_the_agent_under_100_mib(tmp_path: Path) -> None:
    bundle = write_bundle(
        tmp_path, tools='    - ref: {kind: Tool, name: bash, package: "@goondan/base"}\n'
    )
    state_root = tmp_path / "state"
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(bundle), str(state_root)],
                          capture_output=True, text=True, cwd=root, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    peak = json.loads(done.stdout.strip().splitlines()[-1])["peakKiB"] * 1024
    assert peak < 100 * MIB, f"agent peak RSS {peak / MIB:.1f} MiB"
    lines = next(state_root.rglob("base.jsonl")).read_bytes().splitlines()
    tool_line = next(line for line in lines if b'"role":"tool"' in line)
    assert len(tool_line) < DEFAULT_MAX_OUTPUT_BYTES + 4096   # the cap plus the record around it
    output = json.loads(tool_line)["data"]["content"][0]["output"]["value"]
    assert output["truncated"] is True and "…[truncated 4998" in output["stdout"]
