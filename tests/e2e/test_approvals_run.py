"""Issue 30 acceptance under `goondan run --detach` with the fake provider (docs/approvals.md).

A message that makes the model call an `approval: required` export parks the turn; `send`
returns reporting it; `approvals list --json` lists it; SIGKILL of every process and a new
start keep it pending; `approvals approve` runs the tool exactly once and the final answer lands
in the conversation; a second approve changes nothing. Deny with a reason: the tool never runs
and the model's next request holds E_APPROVAL_DENIED and the reason (`send --wait` gets that
final answer). An approval that expires while the swarm is down is denied with
E_APPROVAL_EXPIRED when it starts again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from goondan.swarm.daemon import wait_for
from goondan.swarm.state import pid_alive
from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "approvals"

# The example's tool, plus one line per handler run in work/runs.log (what ran, how often).
TOOL = '''
from pathlib import Path

def _log(ctx, what):
    with open(Path(ctx.workdir) / "runs.log", "a", encoding="utf-8") as f:
        f.write(f"{what} {ctx.tool_call_id}\\n")

def delete(ctx, args):
    _log(ctx, "delete")
    path = Path(ctx.workdir) / args["path"]
    path.unlink()
    return f"deleted {args['path']}"

def write(ctx, args):
    _log(ctx, "write")
    (Path(ctx.workdir) / args["path"]).write_text(args["text"])
    return "written"

def list_files(ctx, args):
    return []

handlers = {"delete": delete, "write": write, "list": list_files}
'''


def _bundle(tmp_path: Path, endpoint: str) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(EXAMPLE, root)
    docs = list(yaml.safe_load_all((root / "goondan.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "Model":
            doc["spec"] = {"provider": "openai", "model": "fake-approver", "endpoint": endpoint,
                           "apiKey": {"valueFrom": {"env": FAKE_KEY_ENV}}}
        if doc["kind"] == "Tool":
            write = next(e for e in doc["spec"]["exports"] if e["name"] == "write")
            write.update(approval="required", approvalTimeoutMs=1500)
        if doc["kind"] == "Agent":
            doc["spec"].pop("extensions")
    docs = [d for d in docs if d["kind"] != "Extension"]
    (root / "goondan.yaml").write_text(yaml.safe_dump_all(docs))
    (root / "tools" / "files.py").write_text(TOOL)
    (root / "work").mkdir()
    (root / "work" / "old.txt").write_text("old")
    (root / "work" / "keep.txt").write_text("keep")
    return root


class Swarm:
    def __init__(self, root: Path, state_root: Path) -> None:
        self.root, self.state_root = root, state_root
        self.env = {**os.environ, FAKE_KEY_ENV: "sk-approvals-test"}

    def goondan(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "goondan", "--state-root", str(self.state_root), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env=self.env,
            check=False,
        )

    def start(self) -> None:
        done = self.goondan("run", "--detach", str(self.root))
        assert done.returncode == 0, done.stderr

    def pids(self) -> list[int]:
        doc = json.loads(self.goondan("status", "--json").stdout)
        out: list[int] = []
        for swarm in doc["swarms"]:
            out.append(swarm["pid"])
            out.extend(p["pid"] for p in swarm["processes"] if p.get("pid"))
        return out

    def kill_all(self) -> None:
        pids = self.pids()
        assert pids
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: not any(pid_alive(p) for p in pids), 20)

    def stop(self) -> None:
        self.goondan("stop", "-b", str(self.root))

    def approvals(self, *extra: str) -> list[dict[str, Any]]:
        listed = self.goondan("approvals", "list", "--json", *extra)
        assert listed.returncode == 0, listed.stderr
        rows: list[dict[str, Any]] = json.loads(listed.stdout)
        return rows

    def runs(self) -> list[str]:
        log = self.root / "work" / "runs.log"
        return log.read_text().splitlines() if log.exists() else []

    def conversation(self) -> str:
        return "".join(p.read_text() for p in self.state_root.rglob("base.jsonl"))


def _park(swarm: Swarm, text: str) -> dict[str, Any]:
    started = time.monotonic()
    sent = swarm.goondan("send", text, "--json", timeout=30)
    assert sent.returncode == 0, sent.stderr
    assert time.monotonic() - started < 10
    answer = json.loads(sent.stdout)
    assert answer["status"] == "waitingForApproval"
    [row] = answer["approvals"]
    return dict(row)


def test_park_restart_approve_deny_and_expire_under_run_detach(
    tmp_path: Path, state_root: Path
) -> None:
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(("files__delete", {"path": "old.txt"})),
            FakeReply.reply("old.txt is gone."),
            FakeReply.calls(("files__delete", {"path": "keep.txt"})),
            FakeReply.reply("I kept keep.txt."),
            FakeReply.calls(("files__write", {"path": "late.txt", "text": "x"})),
            FakeReply.reply("The write expired."),
        )
        swarm = Swarm(_bundle(tmp_path, fake.base_url("openai")), state_root)
        swarm.start()
        try:
            # -- park, list, SIGKILL everything, start again: still pending --------------------
            row = _park(swarm, "delete old.txt")
            assert row["tool"] == "files__delete" and row["args"] == {"path": "old.txt"}
            [listed] = swarm.approvals()
            for key in ("id", "tool", "args", "agent", "instanceKey", "status", "requestedAt"):
                assert key in listed, key
            assert listed["id"] == row["id"] and listed["status"] == "pending"
            assert listed["tool"] == "files__delete" and listed["agent"] == "assistant"
            assert swarm.runs() == []
            status = json.loads(swarm.goondan("status", "--json").stdout)
            assert [a["id"] for a in status["swarms"][0]["approvals"]] == [row["id"]]
            text = swarm.goondan("status").stdout
            assert f"assistant.default waits for approval: {row['id']} (files__delete)" in text
            swarm.kill_all()
            swarm.start()
            assert [r["status"] for r in swarm.approvals()] == ["pending"]
            assert swarm.runs() == [] and (swarm.root / "work" / "old.txt").exists()

            # -- approve: runs once, the final answer lands; a second approve changes nothing --
            approved = swarm.goondan("approvals", "approve", row["id"], "--note", "ok")
            assert approved.returncode == 0, approved.stderr
            assert wait_for(lambda: "old.txt is gone." in swarm.conversation(), 30)
            assert [line.split()[0] for line in swarm.runs()] == ["delete"]
            again = swarm.goondan("approvals", "approve", row["id"])
            assert again.returncode == 0 and "nothing changed" in again.stdout
            assert len(swarm.runs()) == 1 and len(fake.requests) == 2
            assert swarm.approvals() == []

            # -- deny with a reason; send --wait gets the final answer --------------------------
            waiting = subprocess.Popen(
                [sys.executable, "-m", "goondan", "--state-root", str(state_root), "send", "--wait",
                 "delete keep.txt"], cwd=swarm.root, env=swarm.env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
            try:
                assert wait_for(lambda: len(swarm.approvals()) == 1, 30)
                [pending] = swarm.approvals()
                denied = swarm.goondan("approvals", "deny", pending["id"], "--reason", "we keep it")
                assert denied.returncode == 0, denied.stderr
                out, err = waiting.communicate(timeout=30)
            finally:
                if waiting.poll() is None:
                    waiting.kill()
            assert waiting.returncode == 0, err
            assert out.strip() == "I kept keep.txt."
            after_deny = json.dumps(fake.requests[3].json["messages"])
            assert "E_APPROVAL_DENIED" in after_deny and "we keep it" in after_deny
            assert len(swarm.runs()) == 1 and (swarm.root / "work" / "keep.txt").exists()

            # -- expiry while the swarm is down is applied at start ----------------------------
            late = _park(swarm, "write late.txt")
            swarm.kill_all()
            assert wait_for(lambda: [r["status"] for r in swarm.approvals("--all")
                                     if r["id"] == late["id"]] == ["expired"], 10)
            swarm.start()
            assert wait_for(lambda: "The write expired." in swarm.conversation(), 30)
            assert "E_APPROVAL_EXPIRED" in json.dumps(fake.requests[5].json["messages"])
            assert not (swarm.root / "work" / "late.txt").exists()
            assert len(swarm.runs()) == 1
        finally:
            swarm.stop()
