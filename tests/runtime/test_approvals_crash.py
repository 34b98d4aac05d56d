"""Crash discipline of approvals (issue 30): SIGKILL at random points around the request, the
decision and the resume — then a clean process finishes the turn. Invariants per trial: the
approval is never lost (the turn ends with the final answer), the approval-requiring tool never
runs without an approved record, and no tool runs twice; tool calls and results stay paired.

Few trials under `make test`; `make soak` (GOONDAN_SOAK=1) runs 200.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goondan.workspace.approvals import ApprovalStore
from tests.support.approvals_example import approvals_bundle
from tests.support.soak import trials

pytestmark = [pytest.mark.slow, pytest.mark.soak]
REPO = Path(__file__).resolve().parents[2]

# Every handler run leaves one line "<tool> <toolCallId>" (run exactly once, or not at all).
TOOL = '''
from pathlib import Path

def _log(ctx, what):
    with open(Path(ctx.workdir) / "runs.log", "a", encoding="utf-8") as f:
        f.write(f"{what} {ctx.tool_call_id}\\n")

def delete(ctx, args):
    _log(ctx, "delete")
    (Path(ctx.workdir) / args["path"]).unlink(missing_ok=True)
    return "deleted"

def write(ctx, args):
    _log(ctx, "write")
    path = Path(ctx.workdir) / args["path"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(args["text"])
    return "written"

handlers = {"delete": delete, "write": write, "list": lambda ctx, args: []}
'''


def _bundle(tmp_path: Path) -> Path:
    root = approvals_bundle(tmp_path)
    (root / "tools" / "files.py").write_text(TOOL)
    return root


def _phase(root: Path, state: Path, phase: str, kill_after_s: float | None) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    errors = root.parent / f"{phase}.stderr"
    with errors.open("w") as stderr:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.approval_crash_child",
                str(root),
                str(state),
                phase,
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # "ready": the runtime is open
        if kill_after_s is not None and line.strip() == "ready":
            time.sleep(kill_after_s)  # the random kill point, not a wait for a condition
            child.send_signal(signal.SIGKILL)
        # read() and not communicate(): readline may already have buffered "done"
        out = child.stdout.read()
        child.wait(timeout=180)  # a loaded 2-core machine starts Python slowly
    finally:
        if child.poll() is None:
            child.kill()
        child.stdout.close()  # type: ignore[union-attr]
    if kill_after_s is None:
        assert child.returncode == 0 and "done" in line + out, (
            f"{phase}: {line}{out}{errors.read_text()}"
        )


def _check(root: Path, state: Path) -> None:
    runs = (
        (root / "work" / "runs.log").read_text().splitlines()
        if (root / "work" / "runs.log").exists()
        else []
    )
    ids = [r.split()[1] for r in runs]
    assert len(ids) == len(set(ids)), f"a tool ran twice: {runs}"
    [workspace] = [p.name for p in (state / "workspaces").iterdir()]
    store = ApprovalStore(state, workspace)
    approvals = store.list(status=None)
    approved = {a.request["toolCallId"] for a in approvals if a.status == "approved"}
    for line in runs:
        tool, call = line.split()
        if tool == "delete":
            assert call in approved, f"delete {call} ran without an approved record ({approvals})"
    messages = [
        json.loads(line) for p in state.rglob("base.jsonl") for line in p.read_text().splitlines()
    ]
    assistant = [m for m in messages if m["data"]["role"] == "assistant"]
    assert assistant and "all done" in json.dumps(assistant[-1]), "the turn did not finish"
    calls = [
        c["toolCallId"]
        for m in assistant
        for c in m["data"]["content"]
        if c.get("type") == "tool-call"
    ]
    results = [c["toolCallId"] for m in messages if m["data"]["role"] == "tool"
               for c in m["data"]["content"] if c.get("type") == "tool-result"]
    assert sorted(calls) == sorted(results), "tool calls and results are not paired"
    assert not store.list(status="pending")


@pytest.mark.parametrize("trial", range(trials(3, 200)))
def test_sigkill_around_request_decision_and_resume_loses_nothing_runs_nothing_twice(
        tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)
    root, state = _bundle(tmp_path), tmp_path / "state"
    _phase(root, state, "park", rng.uniform(0.0, 0.15) if rng.random() < 0.7 else None)
    _phase(root, state, "decide", rng.uniform(0.0, 0.15) if rng.random() < 0.7 else None)
    _phase(root, state, "finish", None)
    _check(root, state)
