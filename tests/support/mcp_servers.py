"""Real MCP servers for tests: the SDK-built fixture server over stdio or Streamable HTTP.

``tests/fixtures/mcp/server.py`` is written with the official ``mcp`` SDK (a dev extra); these
helpers start it, find a free loopback port for the HTTP variant and build the
:class:`~goondan.config.mcp.McpServerSpec` a provider needs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from goondan.config.mcp import McpServerSpec

SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp" / "server.py"
START_DEADLINE_S = 30.0


def require_sdk() -> None:
    """Skip when the ``mcp`` SDK (dev extra) is not installed."""
    pytest.importorskip("mcp", reason="the mcp SDK is a dev extra (pip install -e '.[dev]')")


def server_command(marks: Path | None = None) -> list[str]:
    """The stdio command line of the fixture server."""
    cmd = [sys.executable, str(SERVER)]
    return [*cmd, "--marks", str(marks)] if marks is not None else cmd


def stdio_spec(name: str = "t", *, marks: Path | None = None, timeout_ms: int = 20_000,
               exports: list[str] | None = None) -> McpServerSpec:
    """A stdio :class:`McpServerSpec` for the fixture server."""
    return McpServerSpec(name=name, package=None, command=server_command(marks), url=None,
                         timeout_ms=timeout_ms, exports=exports, root=SERVER.parent)


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def http_server(marks: Path | None = None, *, session_400: bool = False) -> Iterator[str]:
    """Run the fixture server over Streamable HTTP; yields its ``/mcp`` URL.

    ``session_400``: an unknown session id gets 400 "No valid session ID provided" (the
    TypeScript SDK examples' answer) instead of 404.
    """
    port = free_port()
    cmd = [*server_command(marks), "--http", str(port), *(["--session-400"] if session_400 else [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ))
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the HTTP MCP server exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the HTTP MCP server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_for(predicate: object, *, deadline_s: float = 20.0) -> None:
    """Poll ``predicate()`` until true; fail (never pace) after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > end:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (and is not a zombie we reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True
