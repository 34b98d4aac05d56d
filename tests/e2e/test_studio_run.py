"""Issue 35 under `goondan run --detach`: `goondan studio` over a running swarm whose tool
needs approval (scripted model, offline).

The studio (a real `goondan studio --port 0` process) shows the running swarm with its pending
approval, masks a secret that the user put into the tool call's arguments (the value of a
Model's API key variable), streams the parked turn's new messages over server-sent events while
it resumes, and an approval decided in the studio — recorded as `studio:<user>` — makes the
parked turn actually finish; a second decision is 409. A denial with a reason reaches the model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.commands.approvals import local_user
from goondan.swarm.daemon import wait_for
from tests.support.process_tree import ProcessWatch, supported
from tests.support.studio_client import EventStream, request, studio_url

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SECRET_ENV = "STUDIO_TEST_API_KEY"
SECRET = "sk-studio-test-4f1c9a27e8b3"

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: demo}
spec:
  provider: scripted
  model: studio-demo
  options:
    loop: true
    script:
      - when: '(?i)^delete'
        steps:
          - toolCalls: [{name: files__delete, args: {path: "{{input}}"}}]
          - text: "Done: {{toolResult}}"
      - when: '(?i)^slow'
        steps:
          - {text: "a slow answer", delayMs: 1500}
      - text: "Say delete something."
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: spare}
spec:
  provider: openai
  model: gpt-4o-mini
  apiKey: {valueFrom: {env: STUDIO_TEST_API_KEY}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: files}
spec:
  entry: ./tools/files.py
  exports:
    - name: delete
      description: Delete a file.
      approval: required
      parameters:
        type: object
        properties: {path: {type: string}}
        required: [path]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: assistant}
spec:
  modelConfig: {modelRef: Model/demo}
  prompt: {system: You delete files when asked.}
  tools: [{ref: Tool/files}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/assistant
  agents: [Agent/assistant]
"""

TOOL = '''
def delete(ctx, args):
    return f"deleted {args['path']}"

handlers = {"delete": delete}
'''


class Studio:
    """A swarm under `goondan run --detach` and a `goondan studio --port 0` over it."""

    def __init__(self, root: Path, state_root: Path) -> None:
        self.root, self.state_root = root, state_root
        self.env = {**os.environ, SECRET_ENV: SECRET}
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def goondan(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "goondan", "--state-root", str(self.state_root), *args],
            capture_output=True, text=True, timeout=timeout, cwd=self.root, env=self.env,
            check=False)

    def start_studio(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "goondan", "--state-root", str(self.state_root), "studio",
             "--port", "0"], cwd=self.root, env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = studio_url(self.proc.stdout.readline())

    def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        status, _, body = request(self.url, path, **kwargs)
        return status, body

    def park(self, text: str) -> dict[str, Any]:
        sent = self.goondan("send", text, "--json", timeout=30)
        assert sent.returncode == 0, sent.stderr
        answer = json.loads(sent.stdout)
        assert answer["status"] == "waitingForApproval", answer
        [row] = answer["approvals"]
        return dict(row)


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Studio]:
    """One swarm and one studio for the module. The swarm outlives each test, so the check that
    ``goondan run`` leaves no process behind (tests/e2e/conftest.py) is made here, once the
    module's swarm and studio are stopped, rather than after each test."""
    watch = ProcessWatch() if supported() else None
    base = tmp_path_factory.mktemp("studio-run")
    root = base / "bundle"
    (root / "tools").mkdir(parents=True)
    (root / "goondan.yaml").write_text(BUNDLE)
    (root / "tools" / "files.py").write_text(TOOL)
    running = Studio(root, base / "state")
    started = running.goondan("run", "--detach", str(root))
    assert started.returncode == 0, started.stderr
    try:
        running.start_studio()
        yield running
    finally:
        if running.proc is not None and running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait(10)
        running.goondan("stop", "-b", str(root))
    if watch is not None:
        leftovers = watch.leftovers()
        assert leftovers == [], f"processes outlived the module's swarm: {leftovers}"


def _conversation_href(studio: Studio) -> str:
    status, doc = studio.get("/api/overview")
    assert status == 200
    [workspace] = doc["workspaces"]
    [instance] = workspace["instances"]
    return str(instance["href"])


def test_approving_in_the_studio_resumes_the_parked_turn_live_and_masked(studio: Studio) -> None:
    row = studio.park(f"delete report-{SECRET}.txt")
    status, overview = studio.get("/api/overview")
    [swarm] = overview["swarms"]
    assert swarm["status"] == "running" and swarm["name"] == "default"
    assert swarm["pendingApprovals"] == 1
    assert swarm["workspaceId"] == overview["workspaces"][0]["workspaceId"]

    status, listed = studio.get("/api/approvals?status=pending")
    assert status == 200
    [approval] = listed["approvals"]
    assert approval["id"] == row["id"] and approval["toolName"] == "files__delete"
    assert approval["arguments"] == {"path": "delete report-***.txt"}  # masked
    assert approval["swarm"] == "default" and approval["status"] == "pending"
    assert SECRET not in json.dumps(listed)

    href = _conversation_href(studio)
    with EventStream(studio.url, f"/api{href}/stream") as stream:
        assert stream.status == 200
        status, decided = studio.get(f"/api/approvals/{row['id']}", method="POST",
                                     body={"decision": "approve"})
        assert status == 200, decided
        assert decided["approval"]["status"] == "approved" and decided["notified"] is True
        assert decided["approval"]["decidedBy"] == f"studio:{local_user()}"
        assert decided["approval"]["via"] == "studio"
        seen: list[dict[str, Any]] = []
        for name, data in stream.events(deadline_s=30):
            if name == "message":
                seen.append(data)
                if (data["text"] or "").startswith("Done:"):
                    break
    texts = [m["text"] for m in seen]
    assert "Done: deleted delete report-***.txt" in texts, texts
    assert any(m["role"] == "tool" and m["toolName"] == "files__delete" for m in seen)
    assert SECRET not in json.dumps(seen)

    # the turn finished: its answer is in the committed conversation, masked
    assert wait_for(lambda: studio.get(f"/api{href}")[1]["messages"][-1]["pending"] is False, 30)
    status, doc = studio.get(f"/api{href}")
    assert doc["messages"][-1]["text"] == "Done: deleted delete report-***.txt"
    assert SECRET not in json.dumps(doc)
    assert any("***" in json.dumps(m.get("toolCalls")) for m in doc["messages"])

    again = studio.get(f"/api/approvals/{row['id']}", method="POST", body={"decision": "deny"})
    assert again[0] == 409 and again[1]["error"]["code"] == "E_STUDIO_ALREADY_DECIDED"
    stored = json.loads(studio.goondan("approvals", "list", "--all", "--json").stdout)
    assert [(a["id"], a["decidedBy"], a["via"]) for a in stored] == [
        (row["id"], f"studio:{local_user()}", "studio")]


def test_a_denial_from_the_studio_reaches_the_model_with_its_reason(studio: Studio) -> None:
    row = studio.park("delete notes.txt")
    status, decided = studio.get(f"/api/approvals/{row['id']}", method="POST",
                                 body={"decision": "deny", "reason": "keep the notes"})
    assert status == 200 and decided["approval"]["status"] == "denied"
    assert decided["approval"]["denyReason"] == "keep the notes"
    href = _conversation_href(studio)

    def answered() -> bool:
        last = studio.get(f"/api{href}")[1]["messages"][-1]
        return bool(last["role"] == "assistant" and not last["pending"]
                    and "keep the notes" in (last["text"] or ""))

    assert wait_for(answered, 30)


def test_the_conversation_stream_shows_a_running_turn_before_it_commits(studio: Studio) -> None:
    href = _conversation_href(studio)
    with EventStream(studio.url, f"/api{href}/stream") as stream:
        assert stream.status == 200
        sender = subprocess.Popen(
            [sys.executable, "-m", "goondan", "--state-root", str(studio.state_root), "send",
             "slow please"], cwd=studio.root, env=studio.env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            seen: list[tuple[str | None, bool]] = []
            for name, data in stream.events(deadline_s=30):
                if name == "message":
                    seen.append((data["text"], data["pending"]))
                    if data["text"] == "a slow answer" and not data["pending"]:
                        break
            out, err = sender.communicate(timeout=30)
        finally:
            if sender.poll() is None:
                sender.kill()
                sender.wait(10)
    assert sender.returncode == 0, err
    assert "a slow answer" in out
    # the user message while the model thinks (pending, from events.jsonl), then committed
    assert seen.index(("slow please", True)) < seen.index(("slow please", False))
    assert seen[-1] == ("a slow answer", False)


def test_ctrl_c_stops_the_studio_and_frees_its_record(studio: Studio) -> None:
    proc = studio.proc
    assert proc is not None
    records = list((studio.state_root / "runtime" / "studios").glob("*.json"))
    assert [p.stem for p in records] == [str(proc.pid)]
    with EventStream(studio.url, "/api/stream") as stream:  # an open stream does not hold it
        assert next(stream.events(deadline_s=10))[0] == "overview"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 130
        assert list(stream.events(deadline_s=10)) == []  # the stream ended
    assert not list((studio.state_root / "runtime" / "studios").glob("*.json"))
