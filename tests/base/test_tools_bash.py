"""Tool ``bash`` of ``@goondan/base``: real subprocesses, timeouts, cwd and env."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, ToolFailure, load_entry_module
from tests.support.aio import run
from tests.support.process_tree import alive

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
handlers = load_entry_module(TOOLS / "bash.py").handlers

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell tool")


def context(workdir: Path) -> ToolContext:
    return ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir)


def call(export: str, workdir: Path, args: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = run(handlers[export](context(workdir), args))
    return result


def failure(export: str, workdir: Path, args: dict[str, Any]) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, workdir, args)
    return info.value


def test_exec_reports_output_and_a_non_zero_exit_as_data(tmp_path: Path) -> None:
    out = call("exec", tmp_path, {"command": "echo out; echo err >&2; exit 3", "ignored": 1})
    assert set(out) == {"command", "cwd", "durationMs", "stdout", "stderr", "exitCode", "signal",
                        "timedOut", "truncated"}
    assert out["truncated"] is False
    assert out["stdout"] == "out\n" and out["stderr"] == "err\n"
    assert out["exitCode"] == 3 and out["signal"] is None and out["timedOut"] is False
    assert out["cwd"] == str(tmp_path) and isinstance(out["durationMs"], int)


def test_exec_cwd_is_relative_to_the_workdir_and_absolute_paths_are_kept(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    out = call("exec", tmp_path, {"command": "pwd", "cwd": "sub"})
    assert out["stdout"].strip() == str(tmp_path / "sub") == out["cwd"]
    other = tmp_path / "other"
    other.mkdir()
    assert call("exec", tmp_path / "sub", {"command": "pwd", "cwd": str(other)})["cwd"] == str(
        other
    )
    err = failure("exec", tmp_path, {"command": "pwd", "cwd": "missing"})
    assert err.code == "E_BASE_PATH_NOT_FOUND"


def test_exec_env_is_merged_over_the_allow_listed_process_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only allow-listed variables are inherited (docs/base-package.md); passEnv widens it."""
    monkeypatch.setenv("BASE_TOOL_INHERITED", "kept")
    command = 'echo "$BASE_TOOL_INHERITED $A $B $C $D"'
    out = call(
        "exec", tmp_path, {"command": command, "env": {"A": "x", "B": 2, "C": True, "D": 1.5}}
    )
    assert out["stdout"] == " x 2 true 1.5\n"
    ctx = dataclasses.replace(context(tmp_path), config={"passEnv": ["BASE_TOOL_*"]})
    out = run(
        handlers["exec"](ctx, {"command": command, "env": {"A": "x", "B": 2, "C": True, "D": 1.5}})
    )
    assert out["stdout"] == "kept x 2 true 1.5\n"
    assert (
        failure("exec", tmp_path, {"command": "true", "env": {"A": {"x": 1}}}).code
        == "E_TOOL_INVALID_ARGS"
    )


def test_exec_timeout_sends_sigterm(tmp_path: Path) -> None:
    started = time.monotonic()
    out = call("exec", tmp_path, {"command": "echo started; sleep 20", "timeoutMs": 200})
    assert time.monotonic() - started < 5
    assert out["timedOut"] is True and out["exitCode"] == -1 and out["signal"] == "SIGTERM"
    assert out["stdout"] == "started\n"


def test_exec_timeout_escalates_to_sigkill(tmp_path: Path) -> None:
    out = call("exec", tmp_path, {"command": "trap '' TERM; echo started; sleep 20",
                                   "timeoutMs": 200})
    assert out["timedOut"] is True and out["exitCode"] == -1 and out["signal"] == "SIGKILL"
    assert out["stdout"] == "started\n"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_cancelling_the_call_kills_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    async def main() -> None:
        task = asyncio.ensure_future(handlers["exec"](context(tmp_path), {
            "command": f"sleep 30 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait"}))
        deadline = time.monotonic() + 5
        while not pid_file.exists():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        pid = int(pid_file.read_text())
        while alive(pid):
            assert time.monotonic() < deadline, "the background child survived the cancellation"
            await asyncio.sleep(0.01)

    run(main())


def test_output_is_decoded_as_utf8_with_replacement(tmp_path: Path) -> None:
    out = call("exec", tmp_path, {"command": r"printf 'caf\303\251 \377'"})
    assert out["stdout"] == "café \ufffd"


def test_invalid_inputs_raise(tmp_path: Path) -> None:
    assert failure("exec", tmp_path, {}).code == "E_TOOL_INVALID_ARGS"
    assert failure("exec", tmp_path, {"command": 3}).code == "E_TOOL_INVALID_ARGS"
    assert (
        failure("exec", tmp_path, {"command": "true", "timeoutMs": 0}).code == "E_TOOL_INVALID_ARGS"
    )


@pytest.mark.skipif(not Path("/bin/bash").exists(), reason="needs /bin/bash")
def test_script_runs_in_the_workdir_with_args(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "hello.sh").write_text('echo "$PWD|$1|$2|$GREETING"; exit 4\n')
    out = call("script", tmp_path, {"path": "scripts/hello.sh", "args": ["a b", "c"],
                                     "env": {"GREETING": "hi"}})
    assert set(out) == {
        "path",
        "shell",
        "args",
        "durationMs",
        "stdout",
        "stderr",
        "exitCode",
        "truncated",
        "signal",
        "timedOut",
    }
    assert out["stdout"] == f"{tmp_path}|a b|c|hi\n"
    assert out["exitCode"] == 4 and out["shell"] == "/bin/bash" and out["args"] == ["a b", "c"]
    assert out["path"] == str(tmp_path / "scripts" / "hello.sh")


def test_script_with_another_shell_and_errors(tmp_path: Path) -> None:
    (tmp_path / "s.sh").write_text("echo $0\n")
    out = call("script", tmp_path, {"path": "s.sh", "shell": "/bin/sh"})
    assert out["stdout"] == f"{tmp_path / 's.sh'}\n" and out["args"] == []
    assert failure("script", tmp_path, {"path": "nope.sh"}).code == "E_BASE_PATH_NOT_FOUND"
    assert (
        failure("script", tmp_path, {"path": "s.sh", "shell": str(tmp_path / "no-shell")}).code
        == "E_BASE_EXEC"
    )
    assert failure("script", tmp_path, {"path": "s.sh", "args": [1]}).code == "E_TOOL_INVALID_ARGS"
