"""Under ``goondan run`` (one process per agent) the orchestrator enforces the trace budget."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]

SCRIPT = """\
script:
  - when: "go"
    steps:
      - toolCalls:
          - {name: agents__request, args: {target: worker, input: "Compute 17 * 23."}}
      - toolCalls:
          - {name: agents__request, args: {target: worker, input: "Compute 17 * 23 again."}}
      - text: "unreachable"
"""


def test_the_orchestrator_refuses_the_request_past_the_trace_budget(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = tmp_path / "delegation"
    shutil.copytree(REPO / "examples" / "delegation", bundle)
    (bundle / "scripts" / "coordinator.yaml").write_text(SCRIPT)
    text = (bundle / "goondan.yaml").read_text()
    (bundle / "goondan.yaml").write_text(
        text.replace(
            "    maxStepsPerTurn: 6\n",
            "    maxStepsPerTurn: 6\n    budget:\n      maxAgentRequestsPerTrace: 1\n",
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(bundle),
            "--input",
            "go",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert "E_BUDGET_EXCEEDED" in result.stdout + result.stderr, (result.stdout, result.stderr)
    assert "unreachable" not in result.stdout
    trace = subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "inspect",
            "trace",
            "--last",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert trace.returncode == 0, trace.stderr
    assert trace.stdout.count("turn worker") == 1  # the second request never reached the worker
    assert "ERROR E_BUDGET_EXCEEDED" in trace.stdout
