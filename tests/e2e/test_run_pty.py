"""``goondan run``'s interactive chat in a pseudo-terminal: prompt, answer, streaming, Ctrl-C,
Ctrl-D."""

from __future__ import annotations

import json
import os
import pty
import shutil
import time
from pathlib import Path

import pytest

from goondan.conversation.messages import Message
from goondan.conversation.repair import INTERRUPTED, repair_tool_pairs
from goondan.swarm.state import list_live_processes, pid_alive
from tests.e2e.test_repl_pty import DEADLINE_S, Terminal
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle, goondan_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.slow,
              pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a pty")]
DELEGATION = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def _agent_pids(state_root: Path, processes: set[str]) -> dict[str, int]:
    """Wait until the status snapshot lists a live pid for every process in ``processes``."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rows = {r.process: r.pid for r in list_live_processes(state_root) if r.pid}
        if processes <= set(rows):
            return {name: rows[name] for name in processes}
        if time.monotonic() > deadline:
            raise AssertionError(f"no pids for {processes}: {rows}")
        time.sleep(0.05)


def _all_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while any(pid_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"still running: {[p for p in pids if pid_alive(p)]}")
        time.sleep(0.05)


def test_run_chat_answers_shows_tools_and_ctrl_d_stops_every_process(
    state_root: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "TERM": "xterm", "COLUMNS": "200"}
    term = Terminal(goondan_cmd("run", "--bundle", str(DELEGATION)), env)
    try:
        term.expect("entry agent coordinator")
        term.expect("coordinator> ")
        term.send("What is 17 * 23?\r")
        term.expect("Let me ask the worker.")  # streamed text of the first step
        term.expect('✓ agents__request(target="worker"')
        term.expect("17 * 23 = 391")
        term.expect("coordinator> ")
        pids = _agent_pids(state_root, {"coordinator.delegation", "worker.delegation"})
        orchestrator = next(
            r.pid for r in list_live_processes(state_root) if r.process == "orchestrator"
        )
        assert orchestrator == term.pid
        term.send("\x04")  # Ctrl-D: the swarm stops
        assert term.wait() == 0
    finally:
        term.close()
    _all_gone(list(pids.values()))
    assert not list((state_root / "runtime" / "orchestrators").glob("*.json"))


def test_run_chat_streams_partial_text_from_the_agent_process(
    state_root: Path, tmp_path: Path
) -> None:
    with FakeProvider() as fake:
        # streams, then hangs
        fake.enqueue(FakeReply(text="partial answer", chunks=1, hang_after=2))
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        manifest = bundle / "goondan.yaml"
        # a short grace period: the hung turn is killed quickly when the swarm stops
        text = manifest.read_text()
        assert "  policy:\n    maxStepsPerTurn: 4\n" in text
        manifest.write_text(text.replace(
            "  policy:\n    maxStepsPerTurn: 4\n",
            "  policy:\n    maxStepsPerTurn: 4\n    shutdown:\n      gracePeriodSeconds: 1\n",
        ))
        env = {**os.environ, FAKE_KEY_ENV: "sk-run-pty", "GOONDAN_STATE_ROOT": str(state_root),
               "TERM": "xterm", "COLUMNS": "200"}
        term = Terminal(goondan_cmd("run", "--bundle", str(bundle)), env)
        try:
            term.expect("plain> ")
            term.send("slow question\r")
            # Only reachable through streaming: the provider never finishes this answer.
            term.expect("partial answer")
            pids = _agent_pids(state_root, {"plain.default"})
            term.send("\x03")
            term.expect("(turn cancelled)")
            term.expect("plain> ")
            term.send("\x04")
            assert term.wait() == 0
        finally:
            term.close()
        _all_gone(list(pids.values()))
    shutil.rmtree(bundle)


def _wait_file(path: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)


def test_run_chat_ctrl_c_cancels_the_agents_turn_and_the_chat_goes_on(
    state_root: Path, tmp_path: Path
) -> None:
    """Ctrl-C cancels the Turn inside the agent process (not just the wait): the blocking tool
    call is interrupted and repaired, the same process answers the next message, and Ctrl-C at
    the prompt is handled at once (no Enter needed)."""
    marker = tmp_path / "wait"
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(FakeToolCall("calc__wait", {"marker": str(marker)})),  # blocks forever
            FakeReply.reply("after the cancel"),
        )
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-run-pty", "GOONDAN_STATE_ROOT": str(state_root),
               "TERM": "xterm", "COLUMNS": "200"}
        term = Terminal(goondan_cmd("run", "--bundle", str(bundle)), env)
        try:
            term.expect("plain> ")
            term.send("wait please\r")
            _wait_file(Path(f"{marker}.started"))  # the tool runs in the agent process
            pids = _agent_pids(state_root, {"plain.default"})
            term.send("\x03")
            term.expect("(turn cancelled)")
            term.expect("plain> ")
            term.send("next question\r")
            term.expect("after the cancel")  # answered: the cancelled turn no longer blocks
            term.expect("plain> ")
            assert _agent_pids(state_root, {"plain.default"}) == pids  # cancelled, not restarted
            term.send("\x03")  # at the prompt: handled without waiting for Enter
            term.expect("press Ctrl-C again")
            term.expect("plain> ")
            term.send("\x04")
            assert term.wait() == 0
        finally:
            term.close()
        _all_gone(list(pids.values()))
        assert len(fake.requests) == 2
    bases = list(state_root.glob("workspaces/*/instances/*/messages/base.jsonl"))
    assert len(bases) == 1
    lines = bases[0].read_text(encoding="utf-8").splitlines()
    messages = [Message.from_dict(json.loads(line)) for line in lines if line.strip()]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert repair_tool_pairs(messages) == []  # provider-valid: the tool pair is intact
    assert INTERRUPTED in json.dumps(messages[2].data)
    assert messages[4].text == "after the cancel"
    shutil.rmtree(bundle)


def test_sigterm_at_the_prompt_stops_the_swarm(state_root: Path) -> None:
    """SIGTERM leaves the chat (exit 143) and stops every agent; Ctrl-C would only cancel."""
    import signal

    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "TERM": "xterm", "COLUMNS": "200"}
    term = Terminal(goondan_cmd("run", "--bundle", str(DELEGATION)), env)
    try:
        term.expect("coordinator> ")
        term.send("What is 17 * 23?\r")
        term.expect("17 * 23 = 391")
        term.expect("coordinator> ")
        pids = _agent_pids(state_root, {"coordinator.delegation", "worker.delegation"})
        os.kill(term.pid, signal.SIGTERM)
        assert term.wait() == 128 + signal.SIGTERM
    finally:
        term.close()
    _all_gone(list(pids.values()))
