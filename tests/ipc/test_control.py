"""Typed control messages (ipc/control.py), the request matcher, the per-instance queue and
the status transition table: the pieces the orchestrator is built from."""

from __future__ import annotations

import asyncio

import pytest

from goondan.errors import IpcError
from goondan.ipc.control import (
    CONTROL_TYPES,
    Answer,
    Cancel,
    Control,
    Delta,
    ListQuery,
    Ready,
    Shutdown,
    ShutdownAck,
    SpawnQuery,
    StartError,
    TurnFinished,
    TurnStarted,
    decode_control,
    decode_shutdown,
)
from goondan.ipc.matcher import RequestMatcher
from goondan.ipc.protocol import IpcMessage, decode, encode
from goondan.swarm.instance_queue import InstanceQueue
from goondan.swarm.supervision import TRANSITIONS, InstanceRecord, next_status
from goondan.types import AgentEvent, ReplyChannel
from tests.support.aio import run


def _round_trip(control: Control) -> Control | None:
    message = control.ipc_message(sender="a", to="orchestrator", instance_key="k")
    return decode_control(decode(encode(message)).agent_event())


@pytest.mark.parametrize("control", [
    Ready(123),
    TurnStarted("evt_1"),
    TurnFinished("evt_1", "text_response", ok=True, cancelled=False),
    TurnFinished("evt_1", "error", ok=True, cancelled=False, duplicate=True),
    TurnFinished("evt_1", "text_response", ok=True, cancelled=False, restart_requested=True,
                 restart_reason="reload"),
    StartError("E_CONFIG", "bad"),
    Delta("evt_1", {"type": "llm.delta", "text": "hi"}),
    SpawnQuery("corr_1", target="b", target_instance_key="k2", cwd="sub"),
    ListQuery("corr_2", include_all=True),
    Answer("corr_1", result={"agents": []}),
    Cancel("evt_1", "cancelled"),
], ids=lambda c: type(c).__name__)
def test_every_control_kind_survives_the_wire(control: Control) -> None:
    assert _round_trip(control) == control


def test_the_wire_form_keeps_camel_case_metadata() -> None:
    event = TurnFinished("evt_1", "error", ok=False, cancelled=True).to_event(
        sender="a", instance_key="k"
    )
    assert event.type == "runtime.turnFinished"
    assert event.metadata == {
        "eventId": "evt_1",
        "finishReason": "error",
        "ok": False,
        "cancelled": True,
    }
    query = SpawnQuery("corr_9", target="b", target_instance_key="k").to_event(
        sender="a", instance_key="k"
    )
    assert query.reply_to == ReplyChannel("a", "corr_9")
    assert query.metadata == {"target": "b", "targetInstanceKey": "k"}
    assert set(CONTROL_TYPES) >= {"ready", "turnStarted", "turnFinished", "startError", "delta",
                                  "spawn", "list", "answer", "cancel", "emit"}


def test_decoding_ignores_unknown_kinds_and_rejects_incomplete_ones() -> None:
    assert decode_control(AgentEvent(type="message", input="hi")) is None
    assert decode_control(AgentEvent(type="runtime.fromTheFuture")) is None
    with pytest.raises(IpcError) as info:
        decode_control(AgentEvent(type="runtime.turnStarted"))
    assert info.value.code == "E_IPC_BAD_MESSAGE"


def test_shutdown_messages_decode_into_types() -> None:
    message = Shutdown(500, "restart").ipc_message("a")
    assert decode_shutdown(decode(encode(message))) == Shutdown(500, "restart")
    pending = [AgentEvent(type="message", input="later", id="evt_2")]
    ack = decode_shutdown(decode(encode(ShutdownAck("k", pending).ipc_message("a"))))
    assert isinstance(ack, ShutdownAck) and [e.id for e in ack.pending] == ["evt_2"]
    assert decode_shutdown(IpcMessage("event", "a", "b", {"type": "x"})) is None


def test_the_request_matcher_pairs_answers_once() -> None:
    async def main() -> None:
        matcher: RequestMatcher[str, str] = RequestMatcher()
        future = matcher.expect("corr_1", "b")
        matcher.track("corr_2", "c")
        assert len(matcher) == 2 and "corr_2" in matcher
        assert matcher.resolve("corr_1", "answer") and await future == "answer"
        assert not matcher.resolve("corr_1", "again")  # a second answer is dropped
        assert not matcher.resolve("corr_2", "x")  # tracked: nobody awaits it here
        taken = matcher.take("corr_2")
        assert taken is not None and taken.route == "c" and matcher.take("corr_2") is None
        waiting = matcher.expect("corr_3", "d")
        matcher.close(IpcError("gone", code="E_IPC_CLOSED"))
        with pytest.raises(IpcError):
            await waiting
        with pytest.raises(IpcError):
            matcher.expect("corr_4", "e")

    run(main(), timeout_s=30)


def test_the_instance_queue_sends_one_event_at_a_time() -> None:
    queue = InstanceQueue()
    first, second = (
        AgentEvent(type="m", id="e1"),
        AgentEvent(type="m", id="e2", reply_to=ReplyChannel("x", "c")),
    )
    queue.push(first)
    queue.push(second)
    assert queue.take_next() is first and queue.take_next() is None  # one in flight
    assert len(queue) == 2 and queue.holds("e1") and queue.is_current("e1")
    assert queue.remove_requests() == [second]
    done = queue.finish()
    assert done is not None and done.event is first and len(queue) == 0
    queue.push(second)
    queue.push_front([first])
    assert [e.id for e in queue.waiting] == ["e1", "e2"]
    assert queue.remove_waiting("e2") is second and queue.clear() == [first]


def test_status_changes_only_through_the_transition_table() -> None:
    assert next_status("terminated", "spawn") == "spawning"
    assert next_status("spawning", "ready") == "idle"
    assert next_status("idle", "turnStarted") == "processing"
    assert next_status("processing", "turnFinished") == "idle"
    assert next_status("processing", "drain") == "draining"
    assert next_status("draining", "ready") == "draining"  # a late ready does not undo a drain
    assert next_status("draining", "turnFinished") == "draining"
    assert next_status("draining", "exit") == "terminated"
    assert next_status("crashed", "spawn") == "spawning" and ("idle", "spawn") not in TRANSITIONS

    async def main() -> list[str]:
        rec = InstanceRecord("a", "k")
        seen: list[str] = []
        waiter = asyncio.ensure_future(rec.wait_for(lambda r: r.status == "idle"))
        for trigger in ("spawn", "ready"):
            seen.append(rec.transition(trigger))
            await asyncio.sleep(0)
        await waiter
        return seen

    assert run(main(), timeout_s=30) == ["spawning", "idle"]
