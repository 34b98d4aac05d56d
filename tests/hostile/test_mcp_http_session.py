"""Streamable HTTP: a server that forgot the session answers 400 "No valid session ID provided".

Issue 27: servers built on the TypeScript SDK's examples answer an unknown ``Mcp-Session-Id``
with 400 and that text, not the spec's 404; every later call then failed with ``E_MCP_HTTP``
until the agent restarted. Now the session is initialised again and the request re-sent once,
as for a 404. The server is the SDK-built fixture behind a middleware that turns its 404 into
that 400.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from goondan.config.mcp import McpServerSpec
from goondan.mcp import McpToolProvider
from goondan.mcp.transports import session_gone
from goondan.tools.context import ToolContext
from tests.support.aio import run
from tests.support.mcp_servers import http_server, require_sdk

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _context() -> ToolContext:
    return ToolContext(agent_name="a", instance_key="k", turn_id="t", trace_id="x",
                       tool_call_id="c", message=None, workdir=Path.cwd())


def test_a_400_for_an_unknown_session_id_starts_a_new_session() -> None:
    require_sdk()
    with http_server(session_400=True) as url:
        spec = McpServerSpec(name="web", package=None, command=None, url=url, timeout_ms=20_000)

        async def body() -> None:
            provider = McpToolProvider(spec)
            await provider.open(lambda p: None)
            try:
                assert "web__add" in [t.name for t in await provider.list_tools()]
                assert await provider.call("web__add", _context(), {"a": 1, "b": 2}) == {
                    "result": 3
                }
                transport: Any = (await provider.session()).transport
                transport.session_id = "forgotten-by-the-server"
                assert await provider.call("web__add", _context(), {"a": 2, "b": 2}) == {
                    "result": 4
                }
                assert transport.session_id not in (None, "forgotten-by-the-server")
                assert provider.sessions_started == 1  # the same session object, re-initialised
            finally:
                await provider.aclose()
        run(body(), timeout_s=60)


@pytest.mark.parametrize(("status", "body", "gone"), [
    (404, "", True),
    (404, "Not Found: Invalid or expired session ID", True),
    (400, '{"error": {"message": "Bad Request: No valid session ID provided"}}', True),
    (400, "Bad Request: Missing session ID", True),
    (400, '{"error": {"message": "Parse error: invalid JSON"}}', False),
    (401, "session expired, log in again", False),
    (500, "Internal error", False),
])
def test_which_answers_mean_the_session_is_gone(status: int, body: str, gone: bool) -> None:
    assert session_gone(status, body) is gone
