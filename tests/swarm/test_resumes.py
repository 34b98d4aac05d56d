"""What the orchestrator does with a Turn whose process died, once the new process is ready
(goondan/swarm/resumes.py, docs/orchestrator.md "Crashes")."""

from __future__ import annotations

import logging

from goondan.ipc.control import Ready
from goondan.swarm.resumes import settle_on_ready
from goondan.swarm.supervision import InstanceRecord
from goondan.types import AgentEvent, ReplyChannel

LOG = logging.getLogger("test")


def request(event_id: str, correlation: str = "corr-1") -> AgentEvent:
    return AgentEvent(type="message", input="go", id=event_id, instance_key="k",
                      reply_to=ReplyChannel(target="orchestrator", correlation_id=correlation))


def settle(
    rec: InstanceRecord, ready: Ready, pending: set[str]
) -> tuple[str | None, list[tuple[str, str]]]:
    failed: list[tuple[str, str]] = []
    outcome = settle_on_ready(
        rec, ready, pending, lambda event, _rec, code, _msg: failed.append((event.id, code)), LOG
    )
    return outcome, failed


def test_the_resumed_turn_is_in_flight_again_and_its_caller_keeps_waiting() -> None:
    rec = InstanceRecord("a", "k")
    held = request("evt-1")
    rec.hold_interrupted(held, "signal 9")
    outcome, failed = settle(rec, Ready(1, journal=True, resuming=held.to_dict()), {"corr-1"})
    assert outcome == "resumed" and failed == []
    assert (
        rec.inbox.current is not None
        and rec.inbox.current.event is held
        and rec.inbox.current.started
    )
    assert rec.interrupted is None


def test_a_turn_killed_before_it_was_journaled_is_queued_again_while_its_caller_waits() -> None:
    rec = InstanceRecord("a", "k")
    rec.hold_interrupted(request("evt-1"), "signal 9")
    outcome, failed = settle(rec, Ready(1, journal=True), {"corr-1"})
    assert outcome == "requeued" and failed == [] and [e.id for e in rec.inbox.waiting] == ["evt-1"]


def test_an_answered_or_unawaited_turn_is_not_run_again() -> None:
    rec = InstanceRecord("a", "k")
    rec.hold_interrupted(request("evt-1"), "signal 9")
    assert settle(rec, Ready(1, journal=True), set()) == ("dropped", [])
    assert not rec.inbox.waiting and rec.inbox.current is None


def test_a_process_without_a_journal_answers_e_agent_crashed_as_before() -> None:
    rec = InstanceRecord("a", "k")
    rec.hold_interrupted(request("evt-1"), "signal 9")
    assert settle(rec, Ready(1), {"corr-1"}) == ("crashed", [("evt-1", "E_AGENT_CRASHED")])


def test_a_turn_unknown_to_this_orchestrator_is_accounted_as_in_flight() -> None:
    rec = InstanceRecord("a", "k")
    earlier = request("evt-old")
    rec.inbox.push(earlier)  # a connector event redelivered while its turn resumes
    outcome, _ = settle(rec, Ready(1, journal=True, resuming=earlier.to_dict()), set())
    assert outcome is None and not rec.inbox.waiting
    assert rec.inbox.current is not None and rec.inbox.current.event.id == "evt-old"
