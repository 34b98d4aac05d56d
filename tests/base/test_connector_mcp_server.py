"""Connector ``mcp-server`` of ``@goondan/base`` over real HTTP on 127.0.0.1, with ``ctx.ask``
answered by the test (the whole path under ``goondan run``: tests/e2e/test_mcp_server_run.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import urllib3

from goondan.connectors import ConnectorContext, ConnectorEvent, EmitReceipt
from goondan.connectors.asking import TurnAnswer
from goondan.errors import ConnectorError
from tests.support.connector_harness import RecordingInbox, load_connector, running

mcp_server = load_connector("mcp_server")
TOKEN = "tok-" + "x" * 28
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


class Asker:
    """``ctx.ask``: answers ``answer: <message>`` and reports two progress events, or waits
    forever (``hang``) until cancelled."""

    def __init__(self) -> None:
        self.calls: list[tuple[ConnectorEvent, str | None]] = []
        self.hang = False
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(
        self, event: ConnectorEvent, agent: str | None, on_progress: Any
    ) -> TurnAnswer:
        self.calls.append((event, agent))
        self.started.set()
        if on_progress is not None:
            on_progress({"type": "step.started", "stepIndex": 0})
            on_progress({"type": "tool.called", "toolName": "bash__exec"})
        if self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return TurnAnswer(EmitReceipt(event.id), agent, event.instance_key,
                          text=f"answer: {event.message['text']}")


def context(tmp_path: Path, asker: Asker, **config: str) -> ConnectorContext:
    secrets = {} if config.get("ALLOW_UNAUTHENTICATED") else {"AUTH_TOKEN": TOKEN}
    return ConnectorContext(
        connection_name="test-mcp", connector_name="mcp-server", config={"PORT": "0", **config},
        secrets=secrets, emit=RecordingInbox().emit, ask=asker, state_dir=tmp_path,
        agents={"assistant": "Answers.", "coder": ""}, entry_agent="assistant",
        logger=logging.getLogger("goondan.connector.test-mcp"),
    )


_pool = urllib3.PoolManager(retries=False)


async def send(url: str, message: Any, headers: dict[str, str] | None = None,
               method: str = "POST") -> urllib3.BaseHTTPResponse:
    body = json.dumps(message).encode() if message is not None else None
    return await asyncio.to_thread(_pool.request, method, url + "/mcp", body=body,
                                   headers={**ACCEPT, **AUTH, **(headers or {})}, timeout=10.0)


async def initialize(url: str) -> str:
    response = await send(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                           "clientInfo": {"name": "t", "version": "1"}}})
    assert response.status == 200, response.data
    assert json.loads(response.data)["result"]["protocolVersion"] == "2025-06-18"
    return str(response.headers["Mcp-Session-Id"])


def test_sessions_tools_and_calls_follow_the_streamable_http_rules(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        async with running(mcp_server, context(tmp_path, asker, AGENTS="assistant,coder")) as url:
            session = await initialize(url)
            with_session = {"Mcp-Session-Id": session}
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            assert (await send(url, listing)).status == 400  # no session id
            assert (await send(url, listing, {"Mcp-Session-Id": "nope"})).status == 404
            wrong = await send(url, listing, {**with_session, "MCP-Protocol-Version": "1999-01-01"})
            assert wrong.status == 400
            note = await send(
                url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, with_session
            )
            assert note.status == 202 and note.data == b""
            tools = json.loads((await send(url, listing, with_session)).data)["result"]["tools"]
            assert [(t["name"], t["description"]) for t in tools] == [
                ("ask_assistant", "Answers."), ("ask_coder", "Ask the agent coder.")]
            unknown = json.loads(
                (
                    await send(
                        url, {"jsonrpc": "2.0", "id": 2, "method": "server/discover"}, with_session
                    )
                ).data
            )
            assert unknown["error"]["code"] == -32601

            call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "ask_coder", "arguments": {"message": "hi"}}}
            result = json.loads((await send(url, call, with_session)).data)["result"]
            assert result == {"content": [{"type": "text", "text": "answer: hi"}], "isError": False}
            event, agent = asker.calls[-1]
            assert agent == "coder" and event.instance_key == f"mcp:{session}"
            assert event.name == "mcp_tool_call" and event.properties["agent"] == "coder"

            # with a progress token: server-sent events, progress first, then the response
            call["params"]["_meta"] = {"progressToken": "p1"}  # type: ignore[index]
            call["params"]["arguments"] = {"message": "go", "conversation": "shared"}  # type: ignore[index]
            streamed = await send(url, call, with_session)
            assert streamed.headers["Content-Type"] == "text/event-stream"
            events = [json.loads(line[6:]) for line in streamed.data.decode().splitlines()
                      if line.startswith("data: ")]
            assert [e.get("method") for e in events] == ["notifications/progress"] * 2 + [None]
            assert [e["params"]["message"] for e in events[:2]] == ["step 1", "tool bash__exec"]
            assert events[2]["result"]["content"][0]["text"] == "answer: go"
            assert asker.calls[-1][0].instance_key == "mcp:shared"

            assert (await send(url, None, with_session, method="GET")).status == 405
            foreign = await send(url, listing, {**with_session, "Origin": "https://evil.example"})
            assert foreign.status == 403
            local = await send(url, listing, {**with_session, "Origin": "http://localhost:5173"})
            assert local.status == 200
            assert (await send(url, None, with_session, method="DELETE")).status == 200
            assert (await send(url, listing, with_session)).status == 404  # ended

    asyncio.run(body())


def test_notifications_cancelled_cancels_the_call(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        asker.hang = True
        async with running(mcp_server, context(tmp_path, asker)) as url:
            session = await initialize(url)
            call = {"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
                    "params": {"name": "ask_assistant", "arguments": {"message": "long"}}}
            pending = asyncio.ensure_future(send(url, call, {"Mcp-Session-Id": session}))
            await asyncio.wait_for(asker.started.wait(), 10)
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": "c1", "reason": "user"}}
            assert (await send(url, cancel, {"Mcp-Session-Id": session})).status == 202
            await asyncio.wait_for(asker.cancelled.wait(), 10)
            answer = json.loads((await pending).data)
            assert answer["error"]["code"] == -32800

    asyncio.run(body())


@pytest.mark.parametrize("header", [None, "Bearer wrong", TOKEN, f"Basic {TOKEN}"])
def test_a_missing_or_wrong_bearer_token_is_refused(tmp_path: Path, header: str | None,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        asker = Asker()
        async with running(mcp_server, context(tmp_path, asker)) as url:
            headers = dict(ACCEPT) if header is None else {**ACCEPT, "Authorization": header}
            response = await asyncio.to_thread(
                _pool.request,
                "POST",
                url + "/mcp",
                body=b'{"jsonrpc":"2.0","id":1,"method":"initialize"}',
                headers=headers,
                timeout=10.0,
            )
            assert response.status == 401
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            assert not asker.calls

    with caplog.at_level(logging.DEBUG):
        asyncio.run(body())
    assert TOKEN not in caplog.text


def test_without_a_token_the_connector_refuses_to_start_unless_allowed(tmp_path: Path) -> None:
    async def body() -> None:
        ctx = context(tmp_path, Asker())
        ctx.secrets.clear()
        with pytest.raises(ConnectorError) as info:
            async with running(mcp_server, ctx):
                pass
        assert info.value.code == "E_CONNECTOR_UNSIGNED" and "ALLOW_UNAUTHENTICATED" in str(
            info.value.suggestion
        )
        open_ctx = context(tmp_path, Asker(), ALLOW_UNAUTHENTICATED="true")
        async with running(mcp_server, open_ctx) as url:
            response = await asyncio.to_thread(
                _pool.request,
                "POST",
                url + "/mcp",
                body=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                headers=ACCEPT,
                timeout=10.0,
            )
            assert response.status == 400  # no session, but no token asked for

    asyncio.run(body())


def test_bodies_it_cannot_take_are_refused_before_any_call(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        async with running(mcp_server, context(tmp_path, asker, MAX_BODY_BYTES="4096")) as url:
            session = {"Mcp-Session-Id": await initialize(url)}

            async def raw(data: bytes) -> urllib3.BaseHTTPResponse:
                return await asyncio.to_thread(_pool.request, "POST", url + "/mcp", body=data,
                                               headers={**ACCEPT, **AUTH, **session}, timeout=10.0)

            assert (await raw(b"x" * 5000)).status == 413
            bad = await raw(b"{not json")
            assert bad.status == 400 and json.loads(bad.data)["error"]["code"] == -32700
            deep = await raw(b"[" * 2000 + b"]" * 2000)  # nested past the parser's recursion limit
            assert deep.status == 400
            batch = await raw(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
            assert batch.status == 400 and json.loads(batch.data)["error"]["code"] == -32600
            no_message = {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                          "params": {"name": "ask_assistant", "arguments": {"message": 3}}}
            invalid = json.loads((await send(url, no_message, session)).data)
            assert invalid["error"]["code"] == -32602
            assert not asker.calls

    asyncio.run(body())
