"""``goondan run`` on a terminal while the swarm already runs: an attached chat (issue 28 item
5)."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
from pathlib import Path

import pytest

from goondan.conversation.messages import Message
from goondan.conversation.repair import INTERRUPTED, repair_tool_pairs
from goondan.swarm.daemon import wait_for
from goondan.swarm.state import pid_alive, running_records
from tests.e2e.test_repl_pty import Terminal
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle, goondan_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.slow,
              pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a pty")]
DELEGATION = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def test_run_on_a_terminal_attaches_a_streaming_chat_and_leaving_keeps_the_swarm(
    state_root: Path, tmp_path: Path,
) -> None:
    bundle = tmp_path / "delegation"
    shutil.copytree(DELEGATION, bundle)
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "TERM": "xterm", "COLUMNS": "200"}
    started = subprocess.run(
        goondan_cmd("--json", "run", str(bundle), "--detach"),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    term = Terminal(goondan_cmd("run", "--bundle", str(bundle)), env)
    try:
        term.expect(f"attached to the running orchestrator (pid {pid})")
        term.expect("coordinator> ")
        term.send("What is 17 * 23?\r")
        term.expect("Let me ask the worker.")  # streamed from the running swarm's agent process
        term.expect('✓ agents__request(target="worker"')
        term.expect("17 * 23 = 391")
        term.expect("coordinator> ")
        term.send("/history\r")  # asked of the entry agent's process over the control socket
        term.expect("What is 17 * 23?")
        term.expect("coordinator> ")
        term.send("\x04")  # Ctrl-D leaves the attached chat ...
        assert term.wait() == 0
    finally:
        term.close()
    # ... and the swarm, which this chat did not start, goes on
    assert pid_alive(pid) and [r.pid for r in running_records(state_root)] == [pid]
    stopped = subprocess.run(
        goondan_cmd("stop", "--bundle", str(bundle)),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert stopped.returncode == 0, stopped.stderr


def test_ctrl_c_in_an_attached_chat_cancels_the_turn_in_the_running_swarm(
    state_root: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "wait"
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(FakeToolCall("calc__wait", {"marker": str(marker)})),  # blocks forever
            FakeReply.reply("after the cancel"),
        )
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-run-attach", "GOONDAN_STATE_ROOT": str(state_root),
               "TERM": "xterm", "COLUMNS": "200"}
        started = subprocess.run(
            goondan_cmd("--json", "run", str(bundle), "--detach"),
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert started.returncode == 0, started.stderr
        term = Terminal(goondan_cmd("run", "--bundle", str(bundle)), env)
        try:
            term.expect("attached to the running orchestrator")
            term.expect("plain> ")
            term.send("wait please\r")
            # the tool runs in the agent process
            assert wait_for(Path(f"{marker}.started").exists, 60)
            term.send("\x03")
            term.expect("(turn cancelled)")
            term.expect("plain> ")
            term.send("next question\r")
            term.expect("after the cancel")  # answered: the cancelled turn no longer blocks
            term.expect("plain> ")
            term.send("\x04")
            assert term.wait() == 0
        finally:
            term.close()
            stopped = subprocess.run(
                goondan_cmd("stop", "--bundle", str(bundle)),
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
        assert stopped.returncode == 0, stopped.stderr
        assert len(fake.requests) == 2
    (base,) = state_root.glob("workspaces/*/instances/*/messages/base.jsonl")
    messages = [
        Message.from_dict(json.loads(line))
        for line in base.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert repair_tool_pairs(messages) == []
    assert INTERRUPTED in json.dumps(messages[2].data)
