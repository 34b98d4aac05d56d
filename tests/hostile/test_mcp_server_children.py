"""Issue 27 item 5: an MCP stdio server started through ``sh -c`` that ignores SIGTERM, and the
children it started, are all stopped when the server is closed (its process group), and a
server is found through the agent-process marker when its agent process goes away first."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from goondan.mcp.transports import StdioTransport
from goondan.tools.processes import AGENT_PROCESS_ENV, sweep
from tests.support.aio import run
from tests.support.process_tree import alive

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes"),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc"),
]

SERVER = (
    "trap '' TERM; sleep 7781 & echo $! > {pid}.tmp; mv {pid}.tmp {pid}; while :; do sleep 1; done"
)


async def _started(tmp_path: Path) -> tuple[StdioTransport, int, int]:
    pid_file = tmp_path / "child.pid"
    transport = StdioTransport(["sh", "-c", SERVER.format(pid=pid_file)], label="stubborn",
                               # narrows the sweep to this test
                               env={"TEST_JOB_TAG": tmp_path.name})
    await transport.start(lambda message: None, lambda reason: None)
    deadline = time.monotonic() + 10
    while not pid_file.exists():
        assert time.monotonic() < deadline, "the server did not start its child"
        await asyncio.sleep(0.01)
    assert transport.pid is not None
    return transport, transport.pid, int(pid_file.read_text())


def _wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (running := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return running


def test_closing_a_sigterm_ignoring_sh_server_stops_its_children(tmp_path: Path) -> None:
    async def main() -> list[int]:
        transport, server, child = await _started(tmp_path)
        await transport.close()
        return [server, child]

    pids = run(main())
    left = _wait_gone(pids)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes of the MCP server outlived close()"


def test_a_server_left_running_is_swept_through_the_agent_process_marker(tmp_path: Path) -> None:
    async def main() -> list[int]:
        transport, server, child = await _started(tmp_path)
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            assert f"{AGENT_PROCESS_ENV}={os.getpid()}".encode() in environ
            # what an agent process does on its way out, or its orchestrator when it was killed
            assert sweep({AGENT_PROCESS_ENV: str(os.getpid()), "TEST_JOB_TAG": tmp_path.name}) >= 2
            return _wait_gone([server, child])
        finally:
            await transport.close()

    assert run(main()) == []
