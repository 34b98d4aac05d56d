"""``goondan repl`` as a subprocess: --input, piped lines, --json, resume, and a SIGKILL
mid-turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle, goondan_cmd

pytestmark = pytest.mark.e2e

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"
DEADLINE_S = 20.0


def repl(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        goondan_cmd("repl", *args), input=stdin, capture_output=True, text=True,
        timeout=DEADLINE_S, env=env or dict(os.environ),
    )


def test_input_answers_offline_with_the_quickstart(state_root: Path) -> None:
    done = repl("--bundle", str(QUICKSTART), "--state-root", str(state_root), "--instance", "demo",
                "--input", "What is 12 km in miles?")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "12 km is about 7.46 mi.\n"


def test_piped_lines_are_turns_and_resume(state_root: Path) -> None:
    args = ("--bundle", str(QUICKSTART), "--instance", "pipe")
    done = repl(*args, stdin="hello\n\nWhat is 12 km in miles?\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == "12 km is about 7.46 mi."
    again = repl(*args, "--json", stdin="Which units do you know?\n")
    assert again.returncode == 0, again.stderr
    [line] = again.stdout.splitlines()
    data = json.loads(line)
    assert data["finishReason"] == "text_response"
    assert data["responseMessage"]["data"]["role"] == "assistant"
    assert data["toolCallCount"] == 1
    # The resumed conversation holds both sessions' messages.
    base = next(state_root.rglob("base.jsonl")).read_text(encoding="utf-8").splitlines()
    users = [
        json.loads(r)["data"]["content"] for r in base if json.loads(r)["data"]["role"] == "user"
    ]
    assert users == ["hello", "What is 12 km in miles?", "Which units do you know?"]


def test_failed_turn_exit_code_and_stderr(tmp_path: Path, state_root: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.error(401, "invalid key"))
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-e2e-secret-key"}
        done = repl("--bundle", str(bundle), "--input", "hi", env=env)
    assert done.returncode == 6
    assert done.stdout == ""
    assert "[E_LLM_AUTH]" in done.stderr
    assert "sk-e2e-secret-key" not in done.stderr


def test_dotenv_supplies_the_key_and_missing_key_has_a_suggestion(
    tmp_path: Path, state_root: Path
) -> None:
    """repl reads the bundle's .env like `goondan run` (the real environment wins); without a
    key the error names the variable to set, on stderr, exit 6."""
    with FakeProvider() as fake:
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        env = {k: v for k, v in os.environ.items() if k != FAKE_KEY_ENV}
        missing = repl("--bundle", str(bundle), "--input", "hi", env=env)
        assert missing.returncode == 6
        assert "[E_LLM_AUTH]" in missing.stderr
        assert f"suggestion: Set {FAKE_KEY_ENV}" in missing.stderr

        (bundle / ".env").write_text(f"{FAKE_KEY_ENV}=sk-from-dotenv-123\n", encoding="utf-8")
        fake.enqueue(FakeReply.reply("hello from the fake"))
        done = repl("--bundle", str(bundle), "--input", "hi", env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "hello from the fake\n"
        assert fake.requests[-1].header("Authorization") == "Bearer sk-from-dotenv-123"


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


@pytest.mark.slow
def test_sigkill_mid_turn_then_restart_continues(tmp_path: Path, state_root: Path) -> None:
    marker = tmp_path / "blocker"
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(FakeToolCall("calc__add", {"a": 1, "b": 2}),
                            FakeToolCall("calc__wait", {"marker": str(marker)}), text="working"),
            FakeReply.reply("continued after the crash"),
            FakeReply.reply("the second answer"),
        )
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        env = {**os.environ, FAKE_KEY_ENV: "sk-e2e-secret-key"}
        args = ("plain", "--bundle", str(bundle), "--instance", "crash")
        proc = subprocess.Popen(goondan_cmd("repl", *args), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdin is not None
            proc.stdin.write("first question\n")
            proc.stdin.flush()
            started = Path(f"{marker}.started")
            deadline = time.monotonic() + DEADLINE_S
            while not started.exists():
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the blocking tool never started"
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=DEADLINE_S)
        finally:
            if proc.poll() is None:  # pragma: no cover
                proc.kill()
                proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        assert proc.returncode == -signal.SIGKILL

        events_file = next(state_root.rglob("events.jsonl"))
        pending = [e["message"]["data"]["role"] for e in _records(events_file)]
        assert pending == ["user", "assistant", "tool"]  # the add result was already durable

        done = repl(*args, "--input", "second question", env=env)
        assert done.returncode == 0, done.stderr
        # The interrupted turn resumed first (docs/conversations.md "Durability"), then the new one.
        assert "resumed the interrupted turn: continued after the crash" in done.stderr
        assert done.stdout == "the second answer\n"
        resumed_request = fake.requests[-2].json["messages"]

    base = _records(events_file.parent / "base.jsonl")
    summary = [(r["data"]["role"], r["source"].get("toolName")) for r in base]
    assert summary == [
        ("user", None), ("assistant", None), ("tool", "calc__add"), ("tool", "calc__wait"),
        ("assistant", None), ("user", None), ("assistant", None),
    ]
    # calc__wait had started (journaled) and is not idempotent: not run again, its outcome unknown.
    interrupted = base[3]["data"]["content"][0]["output"]
    assert (
        interrupted["type"] == "error-json"
        and interrupted["value"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    )
    assert base[2]["data"]["content"][0]["output"]["value"] == {"sum": 3}
    assert _records(events_file) == []
    # The provider saw a valid history: both tool calls answered, in the resumed turn.
    assert [m["role"] for m in resumed_request] == ["system", "user", "assistant", "tool", "tool"]
