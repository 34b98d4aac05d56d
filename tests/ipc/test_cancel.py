"""Cancelling a Turn through the orchestrator (``runtime.cancel``): the in-process paths."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation.messages import Message
from goondan.conversation.repair import INTERRUPTED, repair_tool_pairs
from goondan.ipc.channel import Transport
from goondan.ipc.protocol import CANCEL_EVENT, IpcMessage, decode, encode
from goondan.runtime.agents import response_text
from goondan.swarm.agent_process import AgentWorker, build_agent_instance
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner, SpawnRequest
from goondan.types import AgentEvent
from tests.ipc.test_orchestrator import ask, make
from tests.support.aio import run_bounded as run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle


def _error_code(answer: AgentEvent) -> str | None:
    error = answer.metadata.get("error")
    return str(error.get("code")) if isinstance(error, dict) else None


def test_cancel_message_is_an_event_with_the_event_id() -> None:
    from goondan.ipc.protocol import cancel_event

    message = IpcMessage.event("orchestrator", "a", cancel_event("evt_1", instance_key="k"))
    back = decode(encode(message))
    assert back.type == "event" and back.to == "a" and not back.is_control
    event = back.agent_event()
    assert event.type == CANCEL_EVENT and event.metadata["eventId"] == "evt_1"


def test_cancel_running_turn_answers_cancelled_and_the_queue_goes_on(tmp_path: Path) -> None:
    async def main() -> None:
        record: list[str] = []
        orch, _ = make(record)
        async with orch:
            gate = tmp_path / "gate"
            event = AgentEvent(type="message", input=f"block:{gate}:never", instance_key="default")
            blocked = asyncio.ensure_future(orch.request("a", event, timeout_ms=30_000))
            await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=30)
            behind = asyncio.ensure_future(ask(orch, "a", "echo:behind"))
            await orch.wait_until(
                lambda: len(orch.records[("a", "default")].queue) == 1, timeout=30
            )
            assert await orch.cancel("a", event.id) is True
            answer = await blocked
            assert _error_code(answer) == "E_TURN_CANCELLED"
            assert await behind == "behind"  # queued behind the cancelled turn: still runs
            assert await orch.cancel("a", event.id) is False  # already finished
            rec = orch.records[("a", "default")]
            assert rec.spawn_count == 1 and rec.processed == 2 and rec.cancel_requested is None
        assert not gate.exists()

    run(main)


def test_cancelling_the_request_task_cancels_the_turn(tmp_path: Path) -> None:
    async def main() -> None:
        orch, _ = make()
        async with orch:
            gate = tmp_path / "gate"
            blocked = asyncio.ensure_future(ask(orch, "a", f"block:{gate}:never"))
            await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=30)
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            rec = orch.records[("a", "default")]
            await orch.wait_until(lambda: rec.in_flight is None, timeout=30)
            assert await ask(orch, "a", "echo:next") == "next"

    run(main)


def test_cancel_of_a_queued_event_drops_it(tmp_path: Path) -> None:
    async def main() -> None:
        record: list[str] = []
        orch, _ = make(record)
        async with orch:
            gate = tmp_path / "gate"
            first = asyncio.ensure_future(ask(orch, "a", f"block:{gate}:first"))
            await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=30)
            event = AgentEvent(type="message", input="echo:dropped", instance_key="default")
            queued = asyncio.ensure_future(orch.request("a", event, timeout_ms=30_000))
            await orch.wait_until(
                lambda: len(orch.records[("a", "default")].queue) == 1, timeout=30
            )
            assert await orch.cancel("a", event.id) is True
            assert _error_code(await queued) == "E_TURN_CANCELLED"
            gate.write_text("go")
            assert await first == "first"
        assert record == [f"a@default block:{gate}:first"]  # the dropped event never ran

    run(main)


def test_cancel_propagates_to_the_turns_nested_requests(tmp_path: Path) -> None:
    """a asks b, b asks c (blocked): cancelling a's turn cancels b's and c's, nobody hangs."""

    async def main() -> None:
        orch, _ = make()
        async with orch:
            gate = tmp_path / "gate"
            event = AgentEvent(
                type="message", input=f"ask:b:ask:c:block:{gate}:never", instance_key="default"
            )
            top = asyncio.ensure_future(orch.request("a", event, timeout_ms=30_000))
            await orch.wait_until(lambda: (tmp_path / "gate.started").exists(), timeout=30)
            assert await orch.cancel("a", event.id) is True
            assert _error_code(await top) == "E_TURN_CANCELLED"
            for agent in ("b", "c"):
                rec = orch.records[(agent, "default")]
                await orch.wait_until(lambda rec=rec: rec.in_flight is None, timeout=30)  # type: ignore[misc]
                assert rec.processed == 1
            assert not orch._pending  # every correlation was answered or dropped
            # each instance is usable at once (a still-blocked c would make this time out)
            assert await ask(orch, "a", "ask:b:ask:c:echo:fine") == "asked:asked:fine"
        assert not gate.exists()

    run(main)


def _read_base(state_root: Path) -> list[Message]:
    bases = sorted(state_root.glob("workspaces/*/instances/*/messages/base.jsonl"))
    assert len(bases) == 1, bases
    lines = bases[0].read_text(encoding="utf-8").splitlines()
    return [Message.from_dict(json.loads(line)) for line in lines if line.strip()]


def test_cancel_of_a_real_agent_turn_repairs_and_folds(
    state_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real AgentInstance behind the worker loop: a blocking tool call is cancelled, its
    tool pair repaired and folded, and the next event is answered."""
    marker = tmp_path / "wait"
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(FakeToolCall("calc__wait", {"marker": str(marker)})),
            FakeReply.reply("after the cancel"),
        )
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        monkeypatch.setenv(FAKE_KEY_ENV, "sk-cancel-test")

        async def worker(request: SpawnRequest, transport: Transport) -> int:
            agent = AgentWorker(
                transport, agent_name=request.agent_name, instance_key=request.instance_key
            )
            args = argparse.Namespace(
                bundle_dir=str(bundle),
                agent_name=request.agent_name,
                instance_key=request.instance_key,
                state_root=str(state_root),
                swarm=None,
                workdir=None,
                max_depth=None,
            )
            return await agent.serve(await build_agent_instance(args, agent))

        async def main() -> None:
            orch = Orchestrator(InProcessSpawner(worker), swarm_name="default", entry_agent="plain",
                                agents=["plain"], reconcile_interval_s=0)
            async with orch:
                seen: list[dict[str, Any]] = []
                event = AgentEvent(type="message", input="wait please", instance_key="cli")
                turn = asyncio.ensure_future(
                    orch.request("plain", event, instance_key="cli", on_event=seen.append)
                )
                await orch.wait_until(lambda: Path(f"{marker}.started").exists(), timeout=30)
                turn.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await turn
                assert await orch.cancel("plain", event.id, instance_key="cli") in (True, False)
                rec = orch.records[("plain", "cli")]
                await orch.wait_until(lambda: rec.in_flight is None, timeout=30)
                assert any(p.get("type") == "tool.called" for p in seen)
                answer = await orch.request("plain", "next", instance_key="cli", timeout_ms=30_000)
                assert response_text(answer) == "after the cancel"

        asyncio.run(main())
    messages = _read_base(state_root)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert repair_tool_pairs(messages) == []  # provider-valid: every tool call has its result
    assert messages[1].tool_calls[0].name == "calc__wait"
    assert INTERRUPTED in json.dumps(messages[2].data)
    assert messages[4].text == "after the cancel"
