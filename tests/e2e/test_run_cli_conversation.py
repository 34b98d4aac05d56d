"""Issue 32 item 4: one agent, one conversation from the command line.

``repl``, ``run`` (its own orchestrator, and attached to a running one) and ``send`` talk to the
same conversation of an agent by default (the Swarm's ``instanceKey``), and take the same
option for another one (``-k/--instance-key``; ``-i``/``--instance`` are hidden old spellings).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.swarm.state import pid_alive, running_records

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: ok, options: {loop: true, script: [noted]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/m}
  prompts: {systemPrompt: Help.}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/helper, agents: [Agent/helper], instanceKey: desk}
"""


def goondan(*args: str, cwd: Path, state_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", *args, "--state-root", str(state_root)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=cwd,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "GOONDAN_STATE_ROOT": str(state_root)},
    )


def _user_texts(bundle: Path, state_root: Path, key: str) -> list[str]:
    shown = goondan(
        "inspect",
        "instance",
        key,
        "--agent",
        "helper",
        "--messages",
        "--json",
        cwd=bundle,
        state_root=state_root,
    )
    assert shown.returncode == 0, shown.stderr
    texts = []
    for message in json.loads(shown.stdout)["messages"]:
        if message["data"]["role"] == "user":
            content = message["data"]["content"]
            texts.append(content if isinstance(content, str) else " ".join(
                part.get("text", "") for part in content if isinstance(part, dict)))
    return texts


def test_repl_run_and_send_continue_one_conversation_by_default(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE, encoding="utf-8")
    # another conversation: the same option on every command, the old spellings still work
    steps = [
        ("repl", "--input", "from repl"),
        ("run", "--input", "from run"),
        ("repl", "-i", "other", "--input", "x"),
        ("run", "--instance", "other", "--input", "y"),
    ]
    for args in steps:
        done = goondan(*args, cwd=bundle, state_root=state_root)
        assert done.returncode == 0 and "noted" in done.stdout, (args, done.stderr)
    started = goondan("run", "--detach", cwd=bundle, state_root=state_root)
    assert started.returncode == 0, started.stderr
    pids = [r.pid for r in running_records(state_root)]
    try:
        attached = goondan("run", "--input", "from attached run", cwd=bundle, state_root=state_root)
        assert attached.returncode == 0 and "noted" in attached.stdout, attached.stderr
        sent = goondan("send", "from send", "--json", cwd=bundle, state_root=state_root)
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["instanceKey"] == "desk"
        other = goondan("send", "-k", "other", "elsewhere", cwd=bundle, state_root=state_root)
        assert other.returncode == 0, other.stderr
    finally:
        stopped = goondan("stop", cwd=bundle, state_root=state_root)
    assert stopped.returncode == 0, stopped.stderr
    assert not [pid for pid in pids if pid_alive(pid)]
    texts = _user_texts(bundle, state_root, "desk")
    for said in ("from repl", "from run", "from attached run", "from send"):
        assert sum(said in text for text in texts) == 1, (said, texts)
    assert len(texts) == 4, texts
    assert len(_user_texts(bundle, state_root, "other")) == 3


def test_help_shows_one_instance_key_option() -> None:
    for command in ("repl", "run", "send"):
        shown = subprocess.run(
            [sys.executable, "-m", "goondan", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert "-k, --instance-key" in shown.stdout, command
        assert "--instance " not in shown.stdout and "-i," not in shown.stdout, command
