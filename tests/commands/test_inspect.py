"""`goondan inspect workspace|instance`: listings, transcripts, JSON, limits, follow, masking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.secrets import register_secret
from goondan.types import ToolCall, ToolCallResult
from goondan.workspace import InstanceStore
from tests.support.cli_main import run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "workspace"
REFERENCE_ROOT = FIXTURES / "reference-root"


def make_instance(
    root: Path, key: str = "chat:1", agent: str = "planner", turns: int = 3
) -> InstanceStore:
    store = InstanceStore.open(root, "demo-11112222", agent, key, fsync=False)
    state = store.load()
    for turn in range(turns):
        for message in (Message.user(f"question {turn}", metadata={"pinned": turn == 0}),
                        Message.assistant("", [ToolCall(f"c{turn}", "calc__eval", {"expr": "1+1"})],
                                          step_id=f"t{turn}-step-0"),
                        Message.tool_result(ToolCallResult.success(f"c{turn}", "calc__eval", 2)),
                        Message.assistant(f"answer {turn}")):
            event = MessageEvent.append(message)
            state.emit(event)
            store.append_event(event, f"t{turn}")
        state = store.commit(state)
    store.save_extension_state("memory", {"facts": ["likes tea"]})
    return store


def test_inspect_workspace_lists_the_reference_layout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "workspace", "--state-root", str(REFERENCE_ROOT))
    assert code == 0
    assert "workspace default" in out and "workspace main-prod" in out
    assert "telegram:42" in out and "cli:1" in out and "slack:C01:1700000000.1" in out
    row = next(line for line in out.splitlines() if "cli:1" in line)
    assert "assistant" in row and "processing" in row and " 1       1 " in row


def test_inspect_workspace_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "inspect", "workspace", "--state-root", str(REFERENCE_ROOT), "--json"
    )
    data = json.loads(out)
    rows = {i["instanceKey"]: i for w in data["workspaces"] for i in w["instances"]}
    assert code == 0 and set(rows) == {"cli:1", "telegram:42", "slack:C01:1700000000.1"}
    assert rows["cli:1"]["pendingEvents"] == 1 and rows["telegram:42"]["messages"] == 2
    assert rows["telegram:42"]["agentName"] == "planner" and rows["telegram:42"]["sizeBytes"] > 0


def test_inspect_workspace_on_an_empty_root(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "inspect", "workspace")
    assert code == 0 and "No workspaces found." in out


def test_inspect_instance_transcript(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_instance(state_root).close()
    code, out, _ = run(capsys, "inspect", "instance", "chat:1")
    assert code == 0
    assert "instance planner:chat:1" in out and "12 messages" in out
    assert "[pinned]" in out and "question 0" in out and "answer 2" in out
    assert 'call calc__eval (c1) {"expr": "1+1"}' in out
    assert "result calc__eval (c1) ok: 2" in out
    assert "pending events: 0" in out and 'memory: {"facts": ["likes tea"]}' in out


def test_inspect_instance_limit_and_sections(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_instance(state_root).close()
    code, out, _ = run(capsys, "inspect", "instance", "chat:1", "--messages", "--limit", "2")
    assert code == 0 and "last 2 of 12" in out
    assert "#11 " in out and "#12 " in out and "#10 " not in out
    assert "pending events" not in out and "extension states" not in out
    code, out, _ = run(capsys, "inspect", "instance", "planner:chat:1", "--state", "--raw")
    assert json.loads(out) == {"extension": "memory", "state": {"facts": ["likes tea"]}}


def test_inspect_instance_json_and_raw(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_instance(state_root)
    event = MessageEvent.append(Message.user("pending one"))
    store.append_event(event, "t9")
    store.close()
    code, out, _ = run(capsys, "inspect", "instance", "chat:1", "--json", "--limit", "3")
    data = json.loads(out)
    assert code == 0 and len(data["messages"]) == 3
    assert data["pendingEvents"][0]["turnId"] == "t9" and data["instance"]["pendingEvents"] == 1
    code, out, _ = run(
        capsys, "inspect", "instance", "chat:1", "--raw", "--messages", "--limit", "1"
    )
    assert json.loads(out)["data"]["content"][0]["text"] == "answer 2"
    code, out, _ = run(capsys, "inspect", "instance", "chat:1", "--events")
    assert "[t9] append" in out and "pending one" in out


def test_inspect_instance_reference_layout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "inspect", "instance", "telegram:42", "--state-root", str(REFERENCE_ROOT)
    )
    assert code == 0 and "Hi! How can I help?" in out and "likes tea" in out
    code, out, _ = run(capsys, "inspect", "instance", "cli:1", "--state-root", str(REFERENCE_ROOT))
    assert code == 0 and "pending events: 1" in out and "pong" in out


def test_secrets_never_shown(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "sk-live-INSPECT-secret-999"
    register_secret(secret)
    store = InstanceStore.open(state_root, "demo-11112222", "planner", "s", fsync=False)
    state = store.load()
    event = MessageEvent.append(Message.user(f"my key is {secret}"))
    state.emit(event)
    store.append_event(event, "t1")
    store.save_extension_state("vault", {"token": secret})
    store.close()
    for args in ([], ["--json"], ["--raw"]):
        code, out, _ = run(capsys, "inspect", "instance", "s", *args)
        assert code == 0 and secret not in out and "***" in out


def test_unknown_instance_is_exit_3(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "inspect", "instance", "nope")
    assert code == 3 and "[E_WORKSPACE_INSTANCE_NOT_FOUND]" in err and "Traceback" not in err


def test_ambiguous_instance_asks_for_agent(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_instance(state_root, agent="planner", turns=1).close()
    make_instance(state_root, agent="coder", turns=2).close()
    code, _, err = run(capsys, "inspect", "instance", "chat:1")
    assert code == 3 and "[E_WORKSPACE_INSTANCE_AMBIGUOUS]" in err and "--agent" in err
    code, out, _ = run(capsys, "inspect", "instance", "chat:1", "--agent", "coder")
    assert code == 0 and "8 messages" in out


def test_corrupt_base_is_reported_with_file_and_line(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = make_instance(state_root, turns=1)
    store.close()
    lines = store.paths.base.read_bytes().splitlines(keepends=True)
    lines[1] = b"{broken\n"
    store.paths.base.write_bytes(b"".join(lines))
    code, _, err = run(capsys, "inspect", "instance", "chat:1", "--limit", "0")
    assert code == 3 and "[E_WORKSPACE_CORRUPT]" in err and "base.jsonl:2" in err
    code, _, err = run(capsys, "inspect", "instance", "chat:1")
    assert code == 3 and "base.jsonl:2" in err


def test_state_root_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "f"
    file.write_text("")
    code, _, err = run(capsys, "inspect", "workspace", "--state-root", str(file))
    assert code == 3 and "[E_WORKSPACE_STATE_ROOT]" in err


def test_follow_prints_new_events_and_exits_130_on_ctrl_c(state_root: Path, tmp_path: Path) -> None:
    store = make_instance(state_root, turns=1)
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "goondan", "inspect", "instance", "chat:1",
                             "--events", "--follow"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True,
                            preexec_fn=_default_sigint)
    try:
        assert proc.stdout is not None
        assert "following events" in _read_until(proc, "following events")
        store.append_event(MessageEvent.append(Message.user("live message")), "t5")
        assert "live message" in _read_until(proc, "live message")
        store.commit(store.load())
        assert "turn committed" in _read_until(proc, "turn committed")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        store.close()
    assert proc.returncode == 130 and "Traceback" not in err


def _default_sigint() -> None:
    """In the child before exec: SIGINT must work even if this test run started with it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not seen; got {seen!r}")
