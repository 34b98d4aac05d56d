"""A Turn that parks on an approval, reached over MCP and over A2A (docs/serving.md, issue 34:
"an approval wait is reported, not hung"; "an approval wait maps to A2A's input-required
state and is answered through A2A as well"). The official clients against a real
``goondan run`` of the approvals example, with the fake provider as the model."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import yaml
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.connector_e2e import FAKE_KEY, REPO, goondan_run, wait_for, webhook_port
from tests.support.fake_provider import FakeProvider, FakeReply, RecordedRequest
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MCP_TOKEN = "mcp-approvals-bearer-token-1"
A2A_TOKEN = "a2a-approvals-bearer-token-2"
CONNECTIONS = [
    {"apiVersion": "goondan.ai/v1", "kind": "Connection", "metadata": {"name": "mcp-in"},
     "spec": {"connectorRef": {"kind": "Connector", "name": "mcp-server",
                               "package": "@goondan/base"},
              "swarmRef": "Swarm/default", "config": {"PORT": {"value": "0"}},
              "secrets": {"AUTH_TOKEN": {"valueFrom": {"env": "MCP_AUTH_TOKEN"}}}}},
    {"apiVersion": "goondan.ai/v1", "kind": "Connection", "metadata": {"name": "a2a-in"},
     "spec": {"connectorRef": {"kind": "Connector", "name": "a2a", "package": "@goondan/base"},
              "swarmRef": "Swarm/default",
              "config": {"PORT": {"value": "0"}, "ALLOW_APPROVAL_DECISIONS": {"value": "true"}},
              "secrets": {"AUTH_TOKEN": {"valueFrom": {"env": "A2A_AUTH_TOKEN"}}}}},
]


def _bundle(tmp_path: Path, endpoint: str) -> Path:
    root = tmp_path / "bundle"
    shutil.copytree(REPO / "examples" / "approvals", root)
    docs = list(yaml.safe_load_all((root / "goondan.yaml").read_text()))
    for doc in docs:
        if doc["kind"] == "Package":
            doc["spec"]["dependencies"] = [{"name": "@goondan/base", "version": "0.1.0"}]
        if doc["kind"] == "Model":
            doc["spec"] = {"provider": "openai", "model": "fake-approver", "endpoint": endpoint,
                           "apiKey": {"valueFrom": {"env": FAKE_KEY_ENV}}}
        if doc["kind"] == "Agent":
            doc["spec"].pop("extensions", None)
    docs = [d for d in docs if d["kind"] != "Extension"] + CONNECTIONS
    (root / "goondan.yaml").write_text(yaml.safe_dump_all(docs))
    (root / "work").mkdir(exist_ok=True)
    (root / "work" / "old.txt").write_text("old")
    (root / "work" / "keep.txt").write_text("keep")
    return root


def _goondan(state_root: Path, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args,
         "--bundle", str(bundle)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=False,
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY},
    )


def _texts(request: RecordedRequest) -> str:
    return json.dumps(request.json["messages"])


async def _mcp_park(url: str) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {MCP_TOKEN}"},
                              timeout=httpx2.Timeout(60))
    async with Client(streamable_http_client(url, http_client=http)) as client:
        return await client.call_tool(
            "ask_assistant", {"message": "delete old.txt", "conversation": "ops"})


async def _mcp_next(url: str) -> Any:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {MCP_TOKEN}"},
                              timeout=httpx2.Timeout(60))
    async with Client(streamable_http_client(url, http_client=http)) as client:
        return await client.call_tool(
            "ask_assistant", {"message": "what happened?", "conversation": "ops"})


async def _attached_park(state_root: Path, bundle: Path) -> Any:
    from mcp import StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "goondan", "--state-root", str(state_root), "serve", "mcp", "--bundle",
              str(bundle)],
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY, "MCP_AUTH_TOKEN": MCP_TOKEN,
             "A2A_AUTH_TOKEN": A2A_TOKEN},
        cwd=str(REPO),
    )
    async with Client(params) as client:
        return await client.call_tool("ask_assistant", {"message": "delete nothing.txt"})


async def _a2a(port: int) -> dict[str, Any]:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {A2A_TOKEN}"},
                             timeout=httpx.Timeout(60))
    client = await ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create_from_url(
        f"http://127.0.0.1:{port}")
    try:
        first = [e async for e in client.send_message(SendMessageRequest(
            message=new_text_message("delete keep.txt", role=Role.ROLE_USER)))]
        task = first[0].task
        last = first[-1].status_update.status
        waiting = MessageToDict(last.message)
        approval = waiting["parts"][1]["data"]["approvals"][0]["id"]
        decision = new_text_message(f"approve {approval}", context_id=task.context_id,
                                    task_id=task.id, role=Role.ROLE_USER)
        second = [e async for e in client.send_message(SendMessageRequest(message=decision))]
        return {"first": first, "last": last, "waiting": waiting, "approval": approval,
                "second": second}
    finally:
        await client.close()


def test_a_parked_turn_is_reported_over_mcp_and_decided_over_a2a(
        tmp_path: Path, state_root: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(("files__delete", {"path": "old.txt"})),  # MCP: parks
            FakeReply.reply("deleted old.txt for you"),  # its resumed turn, after the CLI approve
            FakeReply.reply("old.txt is gone"),  # the next MCP call in that conversation
            FakeReply.calls(("files__delete", {"path": "keep.txt"})),  # A2A: parks
            FakeReply.reply("deleted keep.txt"),  # resumed after the approval sent over A2A
            FakeReply.calls(("files__delete", {"path": "nothing.txt"})),  # serve mcp attached
        )
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        env = {"MCP_AUTH_TOKEN": MCP_TOKEN, "A2A_AUTH_TOKEN": A2A_TOKEN}
        with goondan_run(bundle, state_root, env):
            url = f"http://127.0.0.1:{webhook_port(state_root, 'mcp-in')}/mcp"

            # MCP: the call returns (no hang, no isError) saying what waits and how to decide
            parked = asyncio.run(_mcp_park(url))
            text = parked.content[0].text
            assert parked.is_error is False, text
            found = re.search(r"approval (apr_[0-9a-f]+): tool files__delete", text)
            assert found is not None, text
            approval = found.group(1)
            assert f"goondan approvals approve {approval}" in text
            assert (bundle / "work" / "old.txt").exists()

            decided = _goondan(state_root, bundle, "approvals", "approve", approval)
            assert decided.returncode == 0, decided.stderr
            wait_for(lambda: not (bundle / "work" / "old.txt").exists(), 30, "the approved run")
            wait_for(lambda: len(fake.requests) >= 2, 30, "the resumed turn")
            # the next call in the conversation runs after the resumed turn, and sees it
            after = asyncio.run(_mcp_next(url))
            assert after.is_error is False and after.content[0].text == "old.txt is gone"
            history = _texts(fake.requests[2])
            assert "deleted old.txt for you" in history and "what happened?" in history

            # A2A: input-required with the pending approval, approved in the same task
            seen = asyncio.run(_a2a(webhook_port(state_root, "a2a-in")))
            assert seen["last"].state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert "files__delete" in seen["waiting"]["parts"][0]["text"]
            [row] = seen["waiting"]["parts"][1]["data"]["approvals"]
            assert (row["tool"], row["args"]) == ("files__delete", {"path": "keep.txt"})
            assert (bundle / "work" / "keep.txt").exists() is False
            second = seen["second"]
            final = second[-1].status_update.status
            assert final.state == TaskState.TASK_STATE_COMPLETED, second
            artifacts = [e.artifact_update.artifact for e in second
                         if e.HasField("artifact_update")]
            assert [a.parts[0].text for a in artifacts] == ["deleted keep.txt"]

            # `goondan serve mcp` attached to the running swarm reports the wait the same way
            attached = asyncio.run(_attached_park(state_root, bundle))
            assert attached.is_error is False
            assert "Waiting for approval" in attached.content[0].text
            assert "tool files__delete" in attached.content[0].text
            fake.assert_all_used()

            listed = _goondan(state_root, bundle, "approvals", "list", "--all", "--json")
            rows = {r["id"]: r for r in json.loads(listed.stdout)}
            assert rows[approval]["via"] == "cli"
            assert rows[seen["approval"]]["status"] == "approved"
            assert rows[seen["approval"]]["via"] == "a2a"
            assert rows[seen["approval"]]["decidedBy"].startswith("a2a:")
