"""Hangs: every wait has an end (a stuck sync tool, a slow HTTP body, a stopped agent)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.errors import AgentError
from tests.support.hostile_bundles import write_bundle

STUCK_TOOL = """
import time

def wait(ctx, input):
    time.sleep(3600)  # never returns in time; the tool's timeoutMs fires

handlers = {"wait": wait}
"""


def test_repl_exits_after_a_sync_tool_timed_out(tmp_path: Path, state_root: Path) -> None:
    bundle = write_bundle(
        tmp_path / "b",
        script=[{"toolCalls": [{"name": "slow__wait", "args": {}}]}, "after"],
        tools={"slow": (STUCK_TOOL, ["wait"])},
    )
    manifest = bundle / "goondan.yaml"
    manifest.write_text(
        manifest.read_text().replace(
            "  entry: ./slow.py\n", "  entry: ./slow.py\n  timeoutMs: 200\n"
        )
    )
    # Failure-only deadline: before the fix the process never exited (the worker thread was
    # joined at exit); now it exits as soon as the turn is done.
    proc = subprocess.run(
        [sys.executable, "-m", "goondan", "repl", "-b", str(bundle), "--input", "hi"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "after"


# -- http-fetch: the overall deadline holds for a body that trickles ------------------------------
def test_http_fetch_deadline_is_enforced_on_a_slow_body() -> None:
    import socket
    import threading

    from goondan.tools import ToolContext, ToolFailure, load_entry_module

    tools = (
        Path(__file__).resolve().parents[2]
        / "goondan"
        / "builtin_packages"
        / "@goondan"
        / "base"
        / "tools"
    )
    get = load_entry_module(tools / "http_fetch.py").handlers["get"]
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nContent-Type: text/plain\r\n\r\n"
            )
            # One byte every 50 ms: each read returns well within the read timeout, so only an
            # overall deadline stops the download (it would take 250 s to finish).
            while not stop.wait(0.05):
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/slow-body"
    outcome: list[BaseException | object] = []

    def fetch() -> None:
        try:
            context = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, Path.cwd(),
                                  config={"allowPrivate": True})  # loopback is opt-in
            outcome.append(asyncio.run(get(context, {"url": url, "timeoutMs": 500})))
        except BaseException as exc:
            outcome.append(exc)

    try:
        # In a daemon thread so that a regression fails this test instead of hanging the suite;
        # 30 s is a failure-only bound (the tool's own deadline is 500 ms).
        caller = threading.Thread(target=fetch, daemon=True)
        caller.start()
        caller.join(30)
        assert not caller.is_alive(), "http-fetch ignored its 500 ms deadline on a slow body"
        [error] = outcome
        assert isinstance(error, ToolFailure), error
        assert error.code == "E_BASE_HTTP_TIMEOUT" and "500 ms" in error.message
    finally:
        stop.set()
        listener.close()
        server.join(5)


# -- a SIGSTOPped agent: requests fail with a clear error instead of waiting forever ---------------
def test_request_to_a_stopped_agent_fails_with_e_agent_unresponsive(
        state_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from goondan.runtime.agents import response_text
    from goondan.swarm import orchestrator as orchestrator_module
    from goondan.swarm.orchestrator import Orchestrator
    from goondan.swarm.spawner import ProcessSpawner
    from tests.support.ipc_agents import AGENTS_ENV, RECORD_DIR_ENV, script_child_main

    monkeypatch.setenv(RECORD_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(AGENTS_ENV, "a")
    monkeypatch.setattr(orchestrator_module, "LIVENESS_POLL_S", 0.1)
    monkeypatch.setattr(orchestrator_module, "UNRESPONSIVE_AFTER_S", 0.5)
    pids: list[int] = []

    async def main() -> None:
        spawner = ProcessSpawner(state_root, state_root=state_root, target=script_child_main,
                                 log_dir=state_root / "logs")
        orch = Orchestrator(spawner, swarm_name="t", entry_agent="a", agents=["a"],
                            grace_period_ms=2000, reconcile_interval_s=0.5)
        async with asyncio.timeout(60):  # failure-only: before the fix the request never returned
            async with orch:
                first = await orch.request("a", "echo:up", timeout_ms=20_000)
                assert response_text(first) == "up"
                handle = orch.records[("a", "default")].handle
                assert handle is not None and handle.pid
                pids.append(handle.pid)
                os.kill(handle.pid, signal.SIGSTOP)
                with pytest.raises(AgentError) as info:
                    await orch.request("a", "echo:anyone there?")  # no timeout given
                assert info.value.code == "E_AGENT_UNRESPONSIVE"
                assert f"pid {handle.pid}" in info.value.message and "kill -CONT" in (
                    info.value.suggestion or ""
                )
                os.kill(handle.pid, signal.SIGCONT)

    try:
        asyncio.run(main())
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)


def test_control_request_without_an_answer_is_a_clear_error(tmp_path: Path) -> None:
    from goondan.errors import IpcError
    from goondan.swarm.service import send_control

    path = tmp_path / "ctl.sock"

    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readline()
            await asyncio.sleep(3600)  # accepts, never answers (a stuck orchestrator)

        server = await asyncio.start_unix_server(silent, path=str(path))
        async with server:
            with pytest.raises(IpcError) as info:
                await send_control(path, {"command": "restart"}, timeout_s=0.3)
            assert info.value.code == "E_IPC_CONTROL" and "did not answer" in info.value.message

    asyncio.run(asyncio.wait_for(main(), 30))


def test_file_system_read_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    import threading

    from goondan.tools import ToolContext, ToolFailure, load_entry_module

    tools = (
        Path(__file__).resolve().parents[2]
        / "goondan"
        / "builtin_packages"
        / "@goondan"
        / "base"
        / "tools"
    )
    read = load_entry_module(tools / "file_system.py").handlers["read"]
    os.mkfifo(tmp_path / "pipe")
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, tmp_path, config={})

    outcome: list[BaseException | object] = []

    def call() -> None:
        try:
            outcome.append(read(ctx, {"path": "pipe"}))
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(30)  # failure-only bound: a blocking open() never returns
    assert not caller.is_alive(), "file-system__read blocked on a FIFO"
    [error] = outcome
    assert (
        isinstance(error, ToolFailure)
        and error.code == "E_BASE_FS"
        and "regular file" in error.message
    )
