"""The chat under ``goondan run`` shows the entry agent's real state after a delegated turn.

The multi-agent template (offline Model) delegates planner → coder → reviewer; then /history,
/tools, /usage, /instance and /fold ask the planner's own process (``runtime.inspect``), and a
second ``goondan run`` of the same conversation starts with the resume header.
"""

from __future__ import annotations

import os
import pty
from pathlib import Path

import pytest

from goondan.commands.init import scaffold
from tests.e2e.test_repl_pty import Terminal
from tests.support.runtime_harness import goondan_cmd

pytestmark = [pytest.mark.e2e, pytest.mark.slow,
              pytest.mark.skipif(not hasattr(pty, "fork"), reason="needs a pty")]


def _offline_multi_agent(path: Path) -> Path:
    scaffold(path, name="team", template="multi-agent")
    manifest = path / "goondan.yaml"
    manifest.write_text(
        manifest.read_text().replace('modelRef: "Model/claude"', 'modelRef: "Model/offline"')
    )
    return path


def test_slash_commands_show_the_entry_agents_state_after_a_delegated_turn(
    state_root: Path, tmp_path: Path
) -> None:
    bundle = _offline_multi_agent(tmp_path / "team")
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "TERM": "xterm", "COLUMNS": "200",
           "NO_COLOR": "1"}
    term = Terminal(goondan_cmd("run", str(bundle)), env)
    try:
        term.expect("planner> ")
        term.send("a hello world script\r")
        term.expect("Done. The reviewer says: (offline reviewer) looks right to me.")
        term.expect("planner> ")
        term.send("/history\r")
        term.expect("a hello world script")
        term.expect("Done. The reviewer says")
        term.expect("planner> ")
        term.send("/tools\r")
        term.expect("agents__request")
        term.expect("planner> ")
        term.send("/usage\r")
        term.expect("turns 1")
        term.expect("planner> ")
        term.send("/instance\r")
        term.expect("offline-planner")  # the model, as the agent process reports it
        term.expect("planner> ")
        term.send("/fold\r")
        term.expect("messages in base.jsonl)")
        term.expect("planner> ")
        term.send("\x04")
        assert term.wait() == 0
    finally:
        term.close()

    again = Terminal(goondan_cmd("run", str(bundle)), env)
    try:
        term = again
        term.expect("resuming conversation")
        term.expect("a hello world script")
        term.expect("planner> ")
        term.send("\x04")
        assert term.wait() == 0
    finally:
        again.close()


def test_watch_reload_is_announced_above_the_prompt(state_root: Path, tmp_path: Path) -> None:
    bundle = _offline_multi_agent(tmp_path / "team")
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "TERM": "xterm", "COLUMNS": "200",
           "NO_COLOR": "1"}
    term = Terminal(goondan_cmd("run", str(bundle), "--watch"), env)
    try:
        term.expect("planner> ")
        term.send("half-typed")  # not submitted: it must survive the background line
        prompt = bundle / "prompts" / "coder.system.md"
        prompt.write_text(prompt.read_text() + "Prefer small functions.\n")
        term.expect("· bundle reloaded; changed: coder; restarted: none running (history kept)")
        term.expect("planner> half-typed")  # the prompt is redrawn with what was typed
        term.send("\x15")  # Ctrl-U clears the line
        term.send("\x04")
        assert term.wait() == 0
    finally:
        term.close()
