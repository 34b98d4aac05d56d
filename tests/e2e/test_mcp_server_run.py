"""A swarm served over MCP (docs/serving.md): the official ``mcp`` SDK client against the base
``mcp-server`` connector of a real ``goondan run`` (Streamable HTTP on 127.0.0.1) and against
``goondan serve mcp`` (stdio), with the fake provider as the model."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from goondan.swarm.state import read_active
from tests.support.connector_e2e import (
    FAKE_KEY,
    REPO,
    base_bundle,
    goondan_run,
    http_request,
    instances,
    webhook_port,
)
from tests.support.fake_provider import FakeProvider, FakeReply, RecordedRequest
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOKEN = "mcp-e2e-bearer-token-1234"
CATALOG_TOOLS = "  tools:\n    - ref: {kind: Tool, name: agents, package: \"@goondan/base\"}\n"

CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: mcp-in}
spec:
  connectorRef: {kind: Connector, name: mcp-server, package: "@goondan/base"}
  swarmRef: Swarm/default
  config:
    PORT: {value: "0"}
    AGENTS: {value: "assistant, researcher"}
    DESCRIPTION_researcher: {value: Looks things up in the agent catalog.}
  secrets:
    AUTH_TOKEN: {valueFrom: {env: MCP_AUTH_TOKEN}}
"""


def _bundle(tmp_path: Path, endpoint: str) -> Path:
    root = base_bundle(
        tmp_path / "bundle", endpoint, {"assistant": "", "researcher": CATALOG_TOOLS}, CONNECTION
    )
    text = (root / "goondan.yaml").read_text()
    # Agent.spec.description describes the entry agent's tool
    text = text.replace(
        "prompts: {systemPrompt: You are assistant.}",
        "prompts: {systemPrompt: You are assistant.}\n  description: Answers general questions.",
    )
    (root / "goondan.yaml").write_text(text)
    return root


def _user_texts(request: RecordedRequest) -> list[str]:
    return [m["content"].rpartition("[/goondan_context]\n")[2] for m in request.json["messages"]
            if m["role"] == "user"]


def _client(url: str, token: str = TOKEN) -> Client:
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60)
    )
    return Client(streamable_http_client(url, http_client=http))


async def _call_then_cancel(url: str, fake: FakeProvider) -> None:
    async with _client(url) as client:
        async with anyio.create_task_group() as group:
            group.start_soon(
                client.call_tool, "ask_assistant", {"message": "never mind", "conversation": "c"}
            )
            # the Turn reached the model (which hangs): cancel the call
            await anyio.to_thread.run_sync(fake.wait_for_requests, 5, 30.0)
            group.cancel_scope.cancel()
        # the Turn was aborted, so the conversation's queue moves on: the next call is answered
        result = await client.call_tool(
            "ask_assistant", {"message": "still there?", "conversation": "c"}
        )
        assert result.content[0].text == "yes"  # type: ignore[union-attr]


async def _session_calls(url: str) -> dict[str, Any]:
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with _client(url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        first = await client.call_tool("ask_assistant", {"message": "hello"})
        second = await client.call_tool("ask_assistant", {"message": "and again"})
        looked = await client.call_tool("ask_researcher", {"message": "what agents exist?"},
                                        progress_callback=on_progress)
    return {"tools": tools, "answers": [first, second, looked], "progress": progress}


def test_an_mcp_client_lists_and_calls_the_exposed_agents_over_streamable_http(
        tmp_path: Path, state_root: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.reply("first answer"), FakeReply.reply("second answer"),
                     FakeReply.calls(("agents__catalog", {})), FakeReply.reply("found them"),
                     FakeReply.hanging(), FakeReply.reply("yes"))
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        with goondan_run(bundle, state_root, {"MCP_AUTH_TOKEN": TOKEN}):
            port = webhook_port(state_root, "mcp-in")
            url = f"http://127.0.0.1:{port}/mcp"
            seen = asyncio.run(_session_calls(url))

            tools = seen["tools"]
            assert sorted(tools) == ["ask_assistant", "ask_researcher"]
            assert tools["ask_assistant"].description == "Answers general questions."
            assert tools["ask_researcher"].description == "Looks things up in the agent catalog."
            assert tools["ask_assistant"].input_schema["required"] == ["message"]
            texts = [r.content[0].text for r in seen["answers"]]
            assert texts == ["first answer", "second answer", "found them"]
            assert not any(r.is_error for r in seen["answers"])
            # one session, one conversation: the second call's model request holds the first
            requests = fake.requests
            assert _user_texts(requests[1]) == ["hello", "and again"]
            assert _user_texts(requests[2]) == ["what agents exist?"]  # another agent: its own
            assert seen["progress"] == [
                "step 1",
                "tool agents__catalog",
                "tool agents__catalog done",
                "step 2",
            ]
            keys = [k for k in instances(state_root) if k.startswith("mcp:")]
            assert len(keys) == 1, keys  # both agents under the session's key

            # a missing or wrong token: 401, nothing accepted
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
            for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": TOKEN}):
                status, answer = http_request(port, "POST", "/mcp", body, headers)
                assert status == 401 and answer == {"ok": False, "error": "unauthorized"}, (
                    headers,
                    answer,
                )

            # cancelling a call cancels its Turn: the model never answers that one, and the
            # conversation's next call is answered (it would wait behind a running Turn)
            asyncio.run(_call_then_cancel(url, fake))
            assert _user_texts(fake.requests[4])[-1] == "never mind"
            assert _user_texts(fake.requests[5])[-1] == "still there?"
            fake.assert_all_used()
    log = "".join(p.read_text() for p in state_root.glob("**/*.log*") if p.is_file())
    assert TOKEN not in log


async def _stdio_calls(params: Any, fake: FakeProvider) -> dict[str, Any]:
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with Client(params) as client:
        tools = sorted(tool.name for tool in (await client.list_tools()).tools)
        first = await client.call_tool(
            "ask_assistant", {"message": "over stdio"}, progress_callback=on_progress
        )
        second = await client.call_tool("ask_assistant", {"message": "same session"})
        async with anyio.create_task_group() as group:  # a cancelled call cancels its Turn
            group.start_soon(client.call_tool, "ask_assistant", {"message": "forget it"})
            await anyio.to_thread.run_sync(fake.wait_for_requests, 3, 30.0)
            group.cancel_scope.cancel()
        third = await client.call_tool("ask_assistant", {"message": "after the cancel"})
    texts = [r.content[0].text for r in (first, second, third)]  # type: ignore[union-attr]
    return {"tools": tools, "texts": texts, "progress": progress}


def test_goondan_serve_mcp_serves_the_swarm_over_stdio(tmp_path: Path, state_root: Path) -> None:
    from mcp import StdioServerParameters

    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.reply("stdio one"),
            FakeReply.reply("stdio two"),
            FakeReply.hanging(),
            FakeReply.reply("stdio three"),
        )
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "goondan",
                "--state-root",
                str(state_root),
                "serve",
                "mcp",
                "--bundle",
                str(bundle),
            ],
            env={**os.environ, FAKE_KEY_ENV: FAKE_KEY, "MCP_AUTH_TOKEN": TOKEN},
            cwd=str(REPO),
        )
        seen = asyncio.run(_stdio_calls(params, fake))
        assert seen["tools"] == ["ask_assistant", "ask_researcher"]  # the Connection's AGENTS
        assert seen["texts"] == ["stdio one", "stdio two", "stdio three"]
        assert seen["progress"] == ["step 1"]
        assert _user_texts(fake.requests[1]) == ["over stdio", "same session"]
        assert _user_texts(fake.requests[3])[-1] == "after the cancel"
    # the process stopped with its input: the swarm is not left running
    assert read_active(state_root) is None


async def _two_calls(params: Any) -> list[str]:
    async with Client(params) as client:
        first = await client.call_tool("ask_assistant", {"message": "to the running swarm"})
        second = await client.call_tool("ask_assistant", {"message": "still attached"})
    return [first.content[0].text, second.content[0].text]  # type: ignore[union-attr]


def test_goondan_serve_mcp_attaches_to_a_swarm_that_already_runs(
    tmp_path: Path, state_root: Path
) -> None:
    from mcp import StdioServerParameters

    with FakeProvider() as fake:
        fake.enqueue(FakeReply.reply("attached one"), FakeReply.reply("attached two"))
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        with goondan_run(bundle, state_root, {"MCP_AUTH_TOKEN": TOKEN}) as proc:
            params = StdioServerParameters(
                command=sys.executable,
                args=[
                    "-m",
                    "goondan",
                    "--state-root",
                    str(state_root),
                    "serve",
                    "mcp",
                    "--bundle",
                    str(bundle),
                ],
                env={**os.environ, FAKE_KEY_ENV: FAKE_KEY, "MCP_AUTH_TOKEN": TOKEN},
                cwd=str(REPO),
            )
            assert asyncio.run(_two_calls(params)) == ["attached one", "attached two"]
            assert _user_texts(fake.requests[1]) == ["to the running swarm", "still attached"]
            # the process's session
            assert [k for k in instances(state_root) if k.startswith("mcp:")]
            active = read_active(state_root)
            assert active is not None and active.pid == proc.pid  # the running swarm answered
