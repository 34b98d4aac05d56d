"""``McpToolProvider`` against a real server built with the ``mcp`` SDK, over stdio and HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.config.mcp import McpServerSpec
from goondan.mcp import McpToolProvider
from goondan.tools.context import ToolContext
from goondan.tools.executor import ToolExecutor
from goondan.tools.registry import ToolRegistry
from goondan.types import ToolCall, ToolCallResult
from tests.support.aio import run
from tests.support.mcp_servers import (
    http_server,
    pid_alive,
    require_sdk,
    stdio_spec,
    wait_for,
)

require_sdk()
DEADLINE_S = 90.0


def _context() -> ToolContext:
    return ToolContext(agent_name="a", instance_key="k", turn_id="t", trace_id="x",
                       tool_call_id="c", message=None, workdir=Path.cwd())


class Harness:
    """A registry + executor in front of one provider, like an agent instance's."""

    def __init__(self, spec: McpServerSpec) -> None:
        self.provider = McpToolProvider(spec)
        self.registry = ToolRegistry()
        self.executor = ToolExecutor(self.registry)
        self.n = 0

    async def __aenter__(self) -> Harness:
        await self.registry.add_provider(self.provider)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.registry.aclose()

    async def names(self) -> list[str]:
        return [item.name for item in await self.registry.step_catalog()]

    async def call(self, name: str, args: dict[str, Any] | None = None) -> ToolCallResult:
        self.n += 1
        catalog = await self.registry.step_catalog()
        return await self.executor.execute(ToolCall(f"c{self.n}", name, args or {}),
                                           catalog=catalog, context=_context())


def _error_code(result: ToolCallResult) -> str | None:
    return result.error.code if result.error is not None else None


def test_stdio_lists_calls_and_maps_errors(tmp_path: Path) -> None:
    async def body() -> None:
        async with Harness(stdio_spec(marks=tmp_path)) as h:
            assert not list(tmp_path.glob("pid-*")), "the server must start lazily"
            names = await h.names()
            assert {"t__echo", "t__add", "t__slow", "t__grow"} <= set(names)
            item = next(i for i in h.registry.catalog() if i.name == "t__add")
            assert item.description == "Add two integers."
            assert item.parameters["required"] == ["a", "b"]
            assert item.source is not None and item.source.type == "mcp"
            ok = await h.call("t__add", {"a": 2, "b": 3})
            assert ok.output == {"result": 5}
            failed = await h.call("t__fail", {"reason": "boom"})
            assert _error_code(failed) == "E_MCP_TOOL_ERROR"
            invalid = await h.call("t__add", {"a": "x"})
            assert _error_code(invalid) == "E_TOOL_INVALID_ARGS"
    run(body(), timeout_s=DEADLINE_S)


def test_exports_allow_list(tmp_path: Path) -> None:
    async def body() -> None:
        async with Harness(stdio_spec(exports=["add", "echo"])) as h:
            assert sorted(await h.names()) == ["t__add", "t__echo"]
    run(body(), timeout_s=DEADLINE_S)


def test_streamable_http_calls_and_reinitialises_after_404(tmp_path: Path) -> None:
    with http_server() as url:
        spec = McpServerSpec(name="web", package=None, command=None, url=url, timeout_ms=20_000)

        async def body() -> None:
            async with Harness(spec) as h:
                assert "web__echo" in await h.names()
                assert (await h.call("web__echo", {"text": "hi"})).output == {"result": "hi"}
                session = await h.provider.session()
                transport: Any = session.transport
                assert transport.session_id
                transport.session_id = "expired-session"  # the server answers 404
                again = await h.call("web__add", {"a": 1, "b": 1})
                assert again.output == {"result": 2}
                assert transport.session_id not in (None, "expired-session")
                assert h.provider.sessions_started == 1
        run(body(), timeout_s=DEADLINE_S)


def test_streamable_http_server_notifications_arrive_on_the_get_stream() -> None:
    # The SDK sends a list_changed that is not tied to a request on the standalone GET stream;
    # without that stream the notification is dropped and the new tool never shows up.
    with http_server() as url:
        spec = McpServerSpec(name="web", package=None, command=None, url=url, timeout_ms=20_000)

        async def body() -> None:
            async with Harness(spec) as h:
                assert "web__extra" not in await h.names()
                session = await h.provider.session()
                assert session.transport.status()["listening"] is True
                assert (await h.call("web__grow")).output == {"result": "grown"}
                deadline = time.monotonic() + 30
                while "web__extra" not in await h.names():
                    assert time.monotonic() < deadline, "list_changed never arrived"
                    await asyncio.sleep(0.05)
                assert (await h.call("web__extra")).output == {"result": "extra"}
                # An expired session re-initialises and opens a new stream.
                transport: Any = session.transport
                old = transport.session_id
                transport.session_id = "expired-session"
                assert (await h.call("web__echo", {"text": "x"})).output == {"result": "x"}
                assert transport.session_id not in (None, old, "expired-session")
                await asyncio.to_thread(wait_for, lambda: transport.status()["listening"])
            assert session.transport.status()["listening"] is False
        run(body(), timeout_s=DEADLINE_S)


def test_killed_server_restarts_without_hang_or_traceback(tmp_path: Path) -> None:
    async def body() -> None:
        async with Harness(stdio_spec(marks=tmp_path)) as h:
            first = (await h.call("t__pid")).output
            assert isinstance(first, dict)
            old_pid = first["result"]
            os.kill(old_pid, signal.SIGKILL)
            after = await h.call("t__pid")
            if after.error is not None:  # the call that saw it die: a structured failure
                assert after.error.code.startswith("E_MCP_")
                after = await h.call("t__pid")
            assert isinstance(after.output, dict) and after.output["result"] != old_pid
            assert h.provider.sessions_started == 2
            # A crash during a call: that call fails with E_MCP_CLOSED, the next one works.
            died = await h.call("t__die")
            assert _error_code(died) == "E_MCP_CLOSED"
            assert (await h.call("t__echo", {"text": "back"})).output == {"result": "back"}
    run(body(), timeout_s=DEADLINE_S)


def test_a_server_that_never_answers_times_out(tmp_path: Path) -> None:
    async def body() -> None:
        async with Harness(stdio_spec(marks=tmp_path, timeout_ms=700)) as h:
            await h.names()
            started = time.monotonic()
            result = await h.call("t__slow", {"seconds": 600, "tag": "timeout"})
            assert _error_code(result) == "E_MCP_TIMEOUT"
            assert time.monotonic() - started < 30
            # The request was cancelled on the server too.
            await asyncio.to_thread(wait_for, lambda: (tmp_path / "cancelled-timeout").exists())

        silent = McpServerSpec(name="mute", package=None, url=None, start_timeout_ms=500,
                               command=[sys.executable, "-c", "import time; time.sleep(600)"])
        async with Harness(silent) as h:
            assert await h.names() == []
            assert h.provider.state == "failed"
            assert "did not answer initialize" in str(h.provider.last_error)
    run(body(), timeout_s=DEADLINE_S)


def test_list_changed_changes_the_next_step_catalog() -> None:
    async def body() -> None:
        async with Harness(stdio_spec()) as h:
            assert "t__extra" not in await h.names()
            assert (await h.call("t__grow")).output == {"result": "grown"}
            # The notification arrives before the call's response (same ordered stream).
            assert "t__extra" in await h.names()
            assert (await h.call("t__extra")).output == {"result": "extra"}
    run(body(), timeout_s=DEADLINE_S)


def test_200_sequential_calls_reuse_one_session(tmp_path: Path) -> None:
    async def body() -> None:
        async with Harness(stdio_spec(marks=tmp_path)) as h:
            for i in range(200):
                result = await h.call("t__add", {"a": i, "b": 1})
                assert result.output == {"result": i + 1}
            assert h.provider.sessions_started == 1
            assert len(list(tmp_path.glob("pid-*"))) == 1
    run(body(), timeout_s=DEADLINE_S)


def test_cancelling_a_slow_call_notifies_the_server_and_returns_at_once(tmp_path: Path) -> None:
    async def body() -> None:
        async with Harness(stdio_spec(marks=tmp_path)) as h:
            await h.names()
            task = asyncio.create_task(h.call("t__slow", {"seconds": 600, "tag": "turn"}))
            await asyncio.to_thread(wait_for, lambda: (tmp_path / "started-turn").exists())
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - started < 5
            await asyncio.to_thread(wait_for, lambda: (tmp_path / "cancelled-turn").exists())
            # The session survives a cancelled call.
            assert (await h.call("t__echo", {"text": "still"})).output == {"result": "still"}
    run(body(), timeout_s=DEADLINE_S)


def test_close_leaves_no_orphan_process(tmp_path: Path) -> None:
    async def body() -> int:
        async with Harness(stdio_spec(marks=tmp_path)) as h:
            pid = (await h.call("t__pid")).output
            assert isinstance(pid, dict)
        assert h.provider.state == "closed"
        return int(pid["result"])
    pid = run(body(), timeout_s=DEADLINE_S)
    wait_for(lambda: not pid_alive(pid))


def test_a_missing_program_backs_off() -> None:
    spec = McpServerSpec(name="gone", package=None, url=None, timeout_ms=2000,
                         command=["goondan-no-such-mcp-server"])

    async def body() -> None:
        async with Harness(spec) as h:
            assert await h.names() == []
            assert h.provider.failures == 1
            result = await h.call("gone__x")
            assert _error_code(result) == "E_TOOL_NOT_IN_CATALOG"
            assert h.provider.status()["state"] == "failed"
            assert "cannot start" in str(h.provider.status()["lastError"])
    run(body(), timeout_s=DEADLINE_S)
