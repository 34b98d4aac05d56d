"""Connector ``a2a`` of ``@goondan/base`` over real HTTP on 127.0.0.1, with ``ctx.ask`` answered
by the test, and ``Tool.spec.a2a``'s :class:`A2aToolProvider` against it (the whole path under
``goondan run``: tests/e2e/test_a2a_server_run.py, tests/e2e/test_a2a_interop_run.py)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import urllib3

from goondan.a2a.provider import A2aToolProvider
from goondan.config.a2a import A2aAgentSpec
from goondan.connectors import ConnectorContext, ConnectorEvent, EmitReceipt
from goondan.connectors.asking import TurnAnswer
from goondan.errors import ConnectorError
from goondan.tools.context import ToolContext
from goondan.tools.executor import ToolFailure
from tests.support.connector_harness import RecordingInbox, load_connector, running

a2a = load_connector("a2a")
TOKEN = "tok-" + "y" * 28
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


class Asker:
    """``ctx.ask``: answers ``answer: <message>`` after one progress event; ``fail`` answers an
    error; ``hang`` waits until cancelled."""

    def __init__(self) -> None:
        self.calls: list[tuple[ConnectorEvent, str | None]] = []
        self.hang = False
        self.fail = False
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

        self.waits: list[bool] = []  # wait_for_approval of each call
        self.decisions: list[dict[str, Any]] = []
        self.decided = asyncio.Event()

    async def decide(self, approval: str, approve: bool, by: str, via: str, args: Any,
                     note: str | None, reason: str | None) -> dict[str, Any]:
        """The orchestrator's side of ``ctx.decide_approval``: records the decision, which
        resumes the parked Turn."""
        how = {"approve": approve, "by": by, "via": via, "reason": reason}
        self.decisions.append({"id": approval, **how})
        self.decided.set()
        return {"id": approval, "status": "approved" if how["approve"] else "denied",
                "decided": True}

    async def __call__(
        self, event: ConnectorEvent, agent: str | None, on_progress: Any,
        wait_for_approval: bool = False,
    ) -> TurnAnswer:
        self.calls.append((event, agent))
        self.waits.append(wait_for_approval)
        self.started.set()
        if on_progress is not None:
            on_progress({"type": "step.started", "stepIndex": 0})
        if event.message["text"].startswith("delete") and on_progress is not None:
            # the Turn parks on an approval; the answer comes once it is decided and resumed
            on_progress({"type": "tool.called", "toolName": "files__delete",
                         "toolCallId": "c1", "args": {"path": "old.txt"}})
            on_progress({"type": "approval.requested", "approvalId": "apr_0123",
                         "toolCallId": "c1",
                         "toolName": "files__delete", "reason": "deletes files"})
            await self.decided.wait()
            verdict = "approved" if self.decisions[-1]["approve"] else "denied"
            return TurnAnswer(EmitReceipt(event.id), agent, event.instance_key,
                              text=f"delete was {verdict}")
        if self.hang:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        if self.fail:
            return TurnAnswer(EmitReceipt(event.id), agent, event.instance_key,
                              error_code="E_AGENT_REQUEST_FAILED", error_message="model down")
        return TurnAnswer(
            EmitReceipt(event.id),
            agent,
            event.instance_key,
            text=f"answer: {event.message['text']}",
        )


def context(tmp_path: Path, asker: Asker, **config: str) -> ConnectorContext:
    secrets = {} if config.get("ALLOW_UNAUTHENTICATED") else {"AUTH_TOKEN": TOKEN}
    return ConnectorContext(
        connection_name="test-a2a", connector_name="a2a", config={"PORT": "0", **config},
        secrets=secrets, emit=RecordingInbox().emit, ask=asker, state_dir=tmp_path,
        decide=asker.decide,
        agents={"assistant": "Answers.", "coder": "Writes code."}, entry_agent="assistant",
        logger=logging.getLogger("goondan.connector.test-a2a"),
    )


_pool = urllib3.PoolManager(retries=False)


async def rpc(url: str, method: str, params: Any, headers: dict[str, str] | None = None) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()
    response = await asyncio.to_thread(_pool.request, "POST", url + "/a2a", body=body,
                                       headers={**AUTH, **(headers or {})}, timeout=10.0)
    assert response.status == 200, response.data
    return json.loads(response.data)


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}], **extra}}


def test_bad_requests_get_the_json_rpc_binding_errors_and_run_no_turn(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        async with running(a2a, context(tmp_path, asker)) as url:
            raw = await asyncio.to_thread(_pool.request, "POST", url + "/a2a", body=b"{nope",
                                          headers=AUTH, timeout=10.0)
            assert json.loads(raw.data)["error"]["code"] == -32700
            assert (await rpc(url, "ListTasks", {}))["error"]["code"] == -32601
            assert (await rpc(url, "SendMessage", {"message": {"parts": []}}))["error"][
                "code"
            ] == -32602
            bad_context = message("hi", contextId="../../etc")
            assert (await rpc(url, "SendMessage", bad_context))["error"]["code"] == -32602
            unknown_skill = message("hi", metadata={"skill": "coder"})  # not exposed
            assert (await rpc(url, "SendMessage", unknown_skill))["error"]["code"] == -32602
            assert (await rpc(url, "GetTask", {"id": "missing"}))["error"]["code"] == -32001
            assert (await rpc(url, "CancelTask", {"id": "missing"}))["error"]["code"] == -32001
            unauthorized = await asyncio.to_thread(
                _pool.request, "POST", url + "/a2a", body=json.dumps(message("hi")).encode(),
                headers={"Authorization": "Bearer wrong"}, timeout=10.0)
            assert unauthorized.status == 401
            assert asker.calls == []
    asyncio.run(body())


def test_messages_map_context_to_instance_key_and_skill_to_agent(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        async with running(a2a, context(tmp_path, asker, AGENTS="assistant,coder")) as url:
            first = (await rpc(url, "SendMessage", message("hello")))["result"]["task"]
            assert first["status"]["state"] == "TASK_STATE_COMPLETED"
            assert first["artifacts"][0]["parts"] == [{"text": "answer: hello"}]
            context_id = first["contextId"]
            second = (
                await rpc(
                    url,
                    "SendMessage",
                    message("code it", contextId=context_id, metadata={"skill": "coder"}),
                )
            )["result"]["task"]
            assert second["contextId"] == context_id and second["id"] != first["id"]
            assert [(e.instance_key, e.properties["agent"], agent) for e, agent in asker.calls] == [
                (f"a2a:{context_id}", "assistant", "assistant"),
                (f"a2a:{context_id}", "coder", "coder"),
            ]
            # a completed task cannot be cancelled; GetTask keeps the last historyLength messages
            assert (await rpc(url, "CancelTask", {"id": first["id"]}))["error"]["code"] == -32002
            got = (await rpc(url, "GetTask", {"id": first["id"], "historyLength": 1}))["result"]
            assert [m["role"] for m in got["history"]] == ["ROLE_AGENT"]
            asker.fail = True
            failed = (await rpc(url, "SendMessage", message("again")))["result"]["task"]
            assert failed["status"]["state"] == "TASK_STATE_FAILED"
            assert (
                failed["status"]["message"]["parts"][0]["text"]
                == "[E_AGENT_REQUEST_FAILED] model down"
            )

    asyncio.run(body())


def test_an_approval_wait_is_input_required_and_decided_in_the_task_when_allowed(
        tmp_path: Path) -> None:
    async def body() -> None:
        closed = Asker()
        async with running(a2a, context(tmp_path, closed)) as url:  # decisions not allowed
            waiting = (await rpc(url, "SendMessage", message("delete old.txt")))["result"]["task"]
            assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            parts = waiting["status"]["message"]["parts"]
            assert ('apr_0123: tool files__delete {"path":"old.txt"} (deletes files)'
                    in parts[0]["text"])
            assert parts[1]["data"] == {"approvals": [
                {"id": "apr_0123", "tool": "files__delete", "args": {"path": "old.txt"},
                 "reason": "deletes files"}]}
            answer = message("approve apr_0123", taskId=waiting["id"],
                             contextId=waiting["contextId"])
            refused = await rpc(url, "SendMessage", answer)
            assert refused["error"]["code"] == -32004
            assert "ALLOW_APPROVAL_DECISIONS" in refused["error"]["message"]
            assert closed.decisions == [] and closed.waits == [True]

        asker = Asker()
        async with running(a2a, context(tmp_path, asker, ALLOW_APPROVAL_DECISIONS="true")) as url:
            waiting = (await rpc(url, "SendMessage", message("delete old.txt")))["result"]["task"]
            ids = {"taskId": waiting["id"], "contextId": waiting["contextId"]}
            for bad in ("ok do it", "approve apr_9999"):  # not a decision; not its approval
                error = (await rpc(url, "SendMessage", message(bad, **ids)))["error"]
                assert error["code"] == -32602 and "apr_0123" in error["message"]
            deny = {"message": {"messageId": "m2", "role": "ROLE_USER", **ids, "parts": [
                {"data": {"approval": {"id": "apr_0123", "decision": "deny",
                                       "reason": "keep it"}}}]}}
            done = (await rpc(url, "SendMessage", deny))["result"]["task"]
            assert done["status"]["state"] == "TASK_STATE_COMPLETED"
            assert done["artifacts"][0]["parts"] == [{"text": "delete was denied"}]
            assert asker.decisions == [{"id": "apr_0123", "approve": False,
                                        "by": f"a2a:{waiting['contextId']}", "via": "a2a",
                                        "reason": "keep it"}]
            assert len(asker.calls) == 1  # the decision is not a new Turn

    asyncio.run(body())


def test_cancel_task_cancels_the_asked_turn(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        asker.hang = True
        async with running(a2a, context(tmp_path, asker)) as url:
            sent = await rpc(
                url,
                "SendMessage",
                {**message("wait"), "configuration": {"returnImmediately": True}},
            )
            task = sent["result"]["task"]
            assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
            await asyncio.wait_for(asker.started.wait(), 10)
            cancelled = (await rpc(url, "CancelTask", {"id": task["id"]}))["result"]
            assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"
            assert asker.cancelled.is_set()
    asyncio.run(body())


def test_without_a_token_it_does_not_start_unless_unauthenticated_is_allowed(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        ctx = context(tmp_path, Asker())
        ctx.secrets.clear()
        with pytest.raises(ConnectorError) as err:
            async with running(a2a, ctx):
                pass
        assert err.value.code == "E_CONNECTOR_UNSIGNED"
        async with running(a2a, context(tmp_path, Asker(), ALLOW_UNAUTHENTICATED="true",
                                        PUBLIC_URL="https://agents.example/a2a")) as url:
            card = await asyncio.to_thread(
                _pool.request, "GET", url + "/.well-known/agent-card.json", timeout=10.0
            )
            assert card.status == 200 and "securitySchemes" not in json.loads(card.data)
            assert json.loads(card.data)["supportedInterfaces"][0]["url"] == "https://agents.example/a2a"
    asyncio.run(body())


def _tool_context() -> ToolContext:
    return ToolContext(agent_name="a", instance_key="k", turn_id="t", trace_id="x",
                       tool_call_id="c", message=None, workdir=Path.cwd())


def test_the_a2a_tool_provider_lists_card_skills_and_maps_answers_and_errors(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        asker = Asker()
        async with running(a2a, context(tmp_path, asker, AGENTS="assistant,coder")) as url:
            spec = A2aAgentSpec(
                "peer", None, url + "/a2a", headers={"Authorization": {"value": f"Bearer {TOKEN}"}}
            )
            provider = A2aToolProvider(spec, env={})
            tools = {t.name: t for t in await provider.list_tools()}
            assert sorted(tools) == ["peer__assistant", "peer__coder"]
            assert tools["peer__coder"].item.description == "Writes code."
            result = await provider.call("peer__coder", _tool_context(), {"message": "build it"})
            assert isinstance(result, dict) and result["answer"] == "answer: build it"
            assert asker.calls[-1][1] == "coder"
            again = await provider.call("peer__assistant", _tool_context(),
                                        {"message": "more", "contextId": result["contextId"]})
            assert isinstance(again, dict) and again["contextId"] == result["contextId"]
            asker.fail = True
            with pytest.raises(ToolFailure) as failed:
                await provider.call("peer__assistant", _tool_context(), {"message": "x"})
            assert failed.value.code == "E_A2A_TASK_FAILED" and "model down" in failed.value.message
            wrong = A2aToolProvider(
                A2aAgentSpec(
                    "peer", None, url + "/a2a", headers={"Authorization": {"value": "Bearer no"}}
                ),
                env={},
            )
            assert await wrong.list_tools() == []  # the card answered 401: no tools this step
            provider._headers = lambda: {"Authorization": "Bearer no"}  # type: ignore[method-assign]
            with pytest.raises(ToolFailure) as refused:
                await provider.call("peer__assistant", _tool_context(), {"message": "x"})
            assert refused.value.code == "E_A2A_HTTP" and TOKEN not in refused.value.message
            await provider.aclose()
        gone = A2aToolProvider(A2aAgentSpec("peer", None, url + "/a2a"), env={})
        assert await gone.list_tools() == []  # nothing listens any more
    asyncio.run(body())


def test_a_cancelled_a2a_tool_call_cancels_the_remote_task(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        asker.hang = True
        async with running(a2a, context(tmp_path, asker)) as url:
            spec = A2aAgentSpec(
                "peer", None, url + "/a2a", headers={"Authorization": {"value": f"Bearer {TOKEN}"}}
            )
            provider = A2aToolProvider(spec, env={})
            await provider.list_tools()
            call = asyncio.ensure_future(
                provider.call("peer__assistant", _tool_context(), {"message": "slow"})
            )
            await asyncio.wait_for(asker.started.wait(), 10)
            call.cancel()
            await asyncio.wait([call], timeout=20)
            assert call.cancelled()
            await asyncio.wait_for(asker.cancelled.wait(), 10)  # the remote Turn was cancelled
            await provider.aclose()
    asyncio.run(body())


def test_methods_paths_and_a_dropped_stream_leave_the_task_running(tmp_path: Path) -> None:
    async def body() -> None:
        asker = Asker()
        asker.hang = True
        async with running(a2a, context(tmp_path, asker)) as url:
            get = await asyncio.to_thread(
                _pool.request, "GET", url + "/a2a", headers=AUTH, timeout=10.0
            )
            post_card = await asyncio.to_thread(
                _pool.request,
                "POST",
                url + "/.well-known/agent-card.json",
                body=b"{}",
                headers=AUTH,
                timeout=10.0,
            )
            other = await asyncio.to_thread(
                _pool.request, "GET", url + "/elsewhere", headers=AUTH, timeout=10.0
            )
            assert (get.status, post_card.status, other.status) == (405, 405, 404)
            # a browser page of another site is refused (DNS rebinding); a loopback page is not
            foreign = await asyncio.to_thread(
                _pool.request,
                "GET",
                url + "/.well-known/agent-card.json",
                headers={**AUTH, "Origin": "http://evil.example"},
                timeout=10.0,
            )
            local = await asyncio.to_thread(
                _pool.request,
                "GET",
                url + "/.well-known/agent-card.json",
                headers={**AUTH, "Origin": "http://localhost:3000"},
                timeout=10.0,
            )
            assert (foreign.status, local.status) == (403, 200)
            # a streaming client that goes away does not cancel its Task (A2A: tasks outlive
            # streams)
            own_pool = urllib3.PoolManager(retries=False)  # its connection is dropped below
            stream = await asyncio.to_thread(
                own_pool.request,
                "POST",
                url + "/a2a",
                preload_content=False,
                timeout=10.0,
                headers=AUTH,
                body=json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "SendStreamingMessage",
                        "params": message("stream me"),
                    }
                ).encode(),
            )
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            first = await asyncio.to_thread(stream.readline)
            task = json.loads(first.removeprefix(b"data: "))["result"]["task"]
            await asyncio.wait_for(asker.started.wait(), 10)
            stream.close()
            own_pool.clear()
            got = (await rpc(url, "GetTask", {"id": task["id"]}))["result"]
            assert got["status"]["state"] == "TASK_STATE_WORKING" and not asker.cancelled.is_set()
            await rpc(url, "CancelTask", {"id": task["id"]})
            assert asker.cancelled.is_set()
    asyncio.run(body())
