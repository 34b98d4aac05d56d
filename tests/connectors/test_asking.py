"""``ctx.ask``'s orchestrator side (:func:`goondan.swarm.asking.ask_ingress`): the event
takes the durable inbox and the routing like an emit, and the caller gets its Turn's answer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from goondan.connectors.asking import TurnAnswer, progress_text
from goondan.connectors.event import EmitReceipt
from goondan.connectors.routing import IngressRule
from goondan.swarm.asking import ask_ingress
from tests.connectors.test_ingress import event, make, run


def test_the_answer_is_the_turns_text_and_the_agent_replaces_the_entry_agent(
    tmp_path: Path,
) -> None:
    record: list[str] = []

    async def main() -> list[TurnAnswer]:
        orch, ingress = make(tmp_path, record)
        async with orch:
            await ingress.open()
            answers = [await ask_ingress(ingress, "conn", event("echo:to b", id="q1"), agent="b"),
                       await ask_ingress(ingress, "conn", event("echo:to entry", id="q2")),
                       await ask_ingress(ingress, "conn", event("fail", id="q3"))]
        ingress.close()
        return answers

    to_b, to_entry, failed = run(main)
    assert (to_b.agent, to_b.instance_key, to_b.text, to_b.error_code) == ("b", "k", "to b", None)
    assert (to_entry.agent, to_entry.text) == ("a", "to entry")
    assert failed.error_code is not None and failed.outcome_text()[1] is True
    lines = (tmp_path / "conn" / "inbox.jsonl").read_text().splitlines()
    # durable, in order
    assert [json.loads(line)["event"]["id"] for line in lines] == ["q1", "q2", "q3"]
    assert sorted(record) == ["a@k echo:to entry", "a@k fail", "b@k echo:to b"]


def test_rules_still_route_an_asked_event(tmp_path: Path) -> None:
    record: list[str] = []
    rules = (IngressRule(properties={"agent": "pinned"}, agent="a", instance_key="fixed"),
             IngressRule(event="other"))  # only "other" events: the rest is dropped

    async def main() -> list[TurnAnswer]:
        orch, ingress = make(tmp_path, record, rules)
        async with orch:
            await ingress.open()
            pinned = await ask_ingress(
                ingress, "conn", event("echo:x", id="r1", agent="pinned"), agent="b"
            )
            dropped = await ask_ingress(ingress, "conn", event("echo:y", id="r2"), agent="b")
            again = await ask_ingress(ingress, "conn", event("echo:z", id="r1"), agent="b")
        ingress.close()
        return [pinned, dropped, again]

    pinned, dropped, again = run(main)
    # the rule's agentRef wins
    assert (pinned.agent, pinned.instance_key, pinned.text) == ("a", "fixed", "x")
    assert dropped.receipt.dropped and dropped.outcome_text() == (
        "no ingress rule of the Connection matches this call: dropped", True)
    assert again.receipt.duplicate and again.agent is None
    assert record == ["a@fixed echo:x"]


def test_cancelling_an_ask_cancels_its_turn_and_the_next_one_runs(tmp_path: Path) -> None:
    record: list[str] = []

    async def main() -> TurnAnswer:
        orch, ingress = make(tmp_path, record)
        async with orch:
            await ingress.open()
            slow = asyncio.ensure_future(
                ask_ingress(ingress, "conn", event("sleep:600000:late", id="s1"))
            )
            await orch.wait_until(
                lambda: any(
                    r.inbox.current is not None and r.inbox.current.started
                    for r in orch.records.values()
                ),
                30,
            )
            slow.cancel()
            answer = await ask_ingress(ingress, "conn", event("echo:next", id="s2"))
        ingress.close()
        return answer

    # same (agent, instanceKey): it ran only because the first ended
    assert run(main).text == "next"
    assert record == ["a@k sleep:600000:late", "a@k echo:next"]  # started, cancelled (10 min sleep)


def test_the_wire_form_round_trips_and_progress_lines_name_steps_and_tools() -> None:
    answer = TurnAnswer(
        EmitReceipt("e1"), "a", "mcp:x", text="hi", error_code="E_X", error_message="m"
    )
    assert TurnAnswer.from_dict(answer.to_dict(), "e1") == answer
    assert TurnAnswer.from_dict(None, "e9") == TurnAnswer(EmitReceipt("e9"))
    assert progress_text({"type": "step.started", "stepIndex": 1}) == "step 2"
    assert (
        progress_text({"type": "tool.called", "toolName": "bash__exec", "args": {"secret": 1}})
        == "tool bash__exec"
    )
    assert progress_text({"type": "tool.failed", "toolName": "t__x"}) == "tool t__x failed"


def test_a_parked_turn_crosses_the_wire_and_reads_as_a_wait_not_an_error() -> None:
    row = {"id": "apr_1", "tool": "files__delete", "args": {"path": "secret.txt"},
           "reason": "deletes files"}
    parked = TurnAnswer(EmitReceipt("e1"), "a", "mcp:x", finish_reason="approval_pending",
                        approvals=(row,))
    back = TurnAnswer.from_dict(parked.to_dict(), "e1")
    assert back == parked and back.parked
    text, is_error = back.outcome_text()
    assert is_error is False
    assert "approval apr_1: tool files__delete (deletes files)" in text
    assert "goondan approvals approve apr_1" in text
    assert "secret.txt" not in text  # names only: the arguments stay in `approvals list`
    assert progress_text({"type": "approval.requested", "toolName": "files__delete",
                          "approvalId": "apr_1"}) == "tool files__delete waits for approval apr_1"
