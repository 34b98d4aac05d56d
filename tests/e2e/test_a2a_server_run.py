"""A swarm served over A2A (docs/serving.md): the official ``a2a-sdk`` client against the base
``a2a`` connector of a real ``goondan run`` on 127.0.0.1, with the fake provider as the model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_message
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, Role, SendMessageRequest, TaskState

from tests.support.connector_e2e import (
    base_bundle,
    goondan_run,
    http_request,
    instances,
    webhook_port,
)
from tests.support.fake_provider import FakeProvider, FakeReply, RecordedRequest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TOKEN = "a2a-e2e-bearer-token-5678"
CATALOG_TOOLS = "  tools:\n    - ref: {kind: Tool, name: agents, package: \"@goondan/base\"}\n"

CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: a2a-in}
spec:
  connectorRef: {kind: Connector, name: a2a, package: "@goondan/base"}
  swarmRef: Swarm/default
  config:
    PORT: {value: "0"}
    AGENTS: {value: "assistant, researcher"}
    DESCRIPTION_researcher: {value: Looks things up in the agent catalog.}
  secrets:
    AUTH_TOKEN: {valueFrom: {env: A2A_AUTH_TOKEN}}
"""


def _bundle(tmp_path: Path, endpoint: str) -> Path:
    root = base_bundle(
        tmp_path / "bundle", endpoint, {"assistant": CATALOG_TOOLS, "researcher": ""}, CONNECTION
    )
    text = (root / "goondan.yaml").read_text()
    text = text.replace(
        "prompts: {systemPrompt: You are assistant.}",
        "prompts: {systemPrompt: You are assistant.}\n  description: Answers general questions.",
    )
    (root / "goondan.yaml").write_text(text)
    return root


def _user_texts(request: RecordedRequest) -> list[str]:
    return [m["content"].rpartition("[/goondan_context]\n")[2] for m in request.json["messages"]
            if m["role"] == "user"]


async def _client(port: int, *, streaming: bool = True) -> Any:
    http = httpx.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx.Timeout(60)
    )
    factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
    return await factory.create_from_url(f"http://127.0.0.1:{port}")


def _request(text: str, context_id: str | None = None) -> SendMessageRequest:
    return SendMessageRequest(
        message=new_text_message(text, context_id=context_id, role=Role.ROLE_USER)
    )


async def _conversation(port: int) -> dict[str, Any]:
    client = await _client(port)
    try:
        first = [event async for event in client.send_message(_request("hello"))]
        context_id = first[0].task.context_id
        second = [event async for event in client.send_message(_request("and again", context_id))]
        task = await client.get_task(GetTaskRequest(id=second[0].task.id))
        return {"card": client._card, "first": first, "second": second, "task": task}
    finally:
        await client.close()


async def _cancel(port: int, fake: FakeProvider) -> dict[str, Any]:
    client = await _client(port, streaming=False)
    try:
        sent = await client._transport.send_message(
            SendMessageRequest(message=new_text_message("never mind", role=Role.ROLE_USER),
                               configuration={"return_immediately": True}))
        # the Turn reached the (hanging) model
        await asyncio.to_thread(fake.wait_for_requests, 4, 30.0)
        cancelled = await client.cancel_task(CancelTaskRequest(id=sent.task.id))
        again = [
            e async for e in client.send_message(_request("still there?", sent.task.context_id))
        ]
        return {"cancelled": cancelled, "again": again}
    finally:
        await client.close()


def test_an_a2a_client_reads_the_card_sends_streams_continues_and_cancels(
        tmp_path: Path, state_root: Path) -> None:
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.calls(("agents__catalog", {})), FakeReply.reply("first answer"),
                     FakeReply.reply("second answer"), FakeReply.hanging(), FakeReply.reply("yes"))
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        with goondan_run(bundle, state_root, {"A2A_AUTH_TOKEN": TOKEN}):
            port = webhook_port(state_root, "a2a-in")
            seen = asyncio.run(_conversation(port))

            card = seen["card"]
            assert [s.id for s in card.skills] == ["assistant", "researcher"]
            assert card.skills[0].description == "Answers general questions."
            assert card.skills[1].description == "Looks things up in the agent catalog."
            assert card.capabilities.streaming
            assert card.supported_interfaces[0].url == f"http://127.0.0.1:{port}/a2a"

            # the streamed reply: the Task, progress per step and tool, the answer, completed
            first = seen["first"]
            kinds = [e.WhichOneof("payload") for e in first]
            assert kinds[0] == "task" and kinds[-1] == "status_update"
            progress = [
                e.status_update.status.message.parts[0].text
                for e in first
                if e.WhichOneof("payload") == "status_update"
                and e.status_update.status.message.parts
            ]
            assert progress[:3] == ["step 1", "tool agents__catalog", "tool agents__catalog done"]
            answers = [e.artifact_update.artifact.parts[0].text for e in first
                       if e.WhichOneof("payload") == "artifact_update"]
            assert answers == ["first answer"]
            assert first[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

            # the same contextId continues the conversation
            assert _user_texts(fake.requests[2]) == ["hello", "and again"]
            task = seen["task"]
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert task.artifacts[0].parts[0].text == "second answer"
            assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
            keys = [k for k in instances(state_root) if k.startswith("a2a:")]
            assert keys == [f"a2a:{first[0].task.context_id}"]

            # a missing or wrong token: 401, the card included
            body = json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
            ).encode()
            for method, path in (("POST", "/a2a"), ("GET", "/.well-known/agent-card.json")):
                for headers in (
                    {},
                    {"Authorization": "Bearer wrong-token"},
                    {"Authorization": TOKEN},
                ):
                    status, answer = http_request(
                        port, method, path, body if method == "POST" else b"", headers
                    )
                    assert status == 401 and answer == {"ok": False, "error": "unauthorized"}, (
                        path,
                        headers,
                    )

            # cancelling a task cancels its Turn: the context's next message is answered
            cancel = asyncio.run(_cancel(port, fake))
            assert cancel["cancelled"].status.state == TaskState.TASK_STATE_CANCELED
            # not streamed
            assert cancel["again"][-1].task.status.state == TaskState.TASK_STATE_COMPLETED
            assert cancel["again"][-1].task.artifacts[0].parts[0].text == "yes"
            assert _user_texts(fake.requests[4])[-1] == "still there?"
            fake.assert_all_used()
    log = "".join(p.read_text() for p in state_root.glob("**/*.log*") if p.is_file())
    assert TOKEN not in log
