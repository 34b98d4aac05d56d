"""Resuming an interrupted turn (docs/conversations.md "Durability"): one test per call state.

Run against every storage backend (``storage``: the JSONL state root — the runtime's default,
no backend given — and PostgreSQL); the test that probes turn.jsonl from inside a tool
handler stays JSONL-only.

Each test writes what a process killed mid-turn leaves on disk — the conversation events and
the turn journal, exactly as the runtime writes them — then opens the instance through the
embedding API and checks what the resumed turn does: which calls run (calls.log, one line per
handler run with its idempotency key), what the model sees, what the caller gets.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.storage.contract import StorageBackend
from goondan.storage.jsonl import JsonlBackend
from goondan.types import AgentEvent, ReplyChannel, ToolCall, ToolCallResult
from goondan.workspace.journal import idempotency_key
from tests.support.aio import run
from tests.support.runtime_harness import base_records, shape

LEDGER = Path(__file__).resolve().parent.parent / "fixtures" / "runtime" / "ledger"
AGENT, KEY, TURN = "worker", "k", "turn-1"
AT = "2026-01-01T00:00:00Z"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(LEDGER, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def workspace_of(bundle: Path, state_root: Path) -> str:
    with Runtime.from_bundle(bundle, state_root=state_root) as rt:
        return rt.workspace_id


def calls_log(bundle: Path) -> list[list[str]]:
    path = bundle / "calls.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def key(call_id: str) -> str:
    return idempotency_key(AGENT, KEY, TURN, call_id)


def interrupt(
    bundle: Path,
    where: tuple[Path, StorageBackend | None],
    messages: list[Message],
    records: list[dict[str, Any]],
    *,
    event: AgentEvent | None = None,
) -> None:
    """Leave on disk what a process killed during turn ``TURN`` leaves: its events and journal."""
    event = event or AgentEvent(type="message", input="go", id="evt-1", instance_key=KEY)
    state_root, storage = where
    backend = storage or JsonlBackend(state_root)
    with backend.open_instance(workspace_of(bundle, state_root), AGENT, KEY) as store:
        state = store.load()
        store.journal.append({"type": "turn.started", "turnId": TURN, "input": event.to_dict(),
                              "inputMessageId": "u1", "at": AT})
        for message in messages:
            message_event = MessageEvent.append(message)
            state.emit(message_event)
            store.append_event(message_event, TURN)
        for record in records:
            store.journal.append({"turnId": TURN, "at": AT, **record})


def user() -> Message:
    message = Message.user("go")
    message.id = "u1"
    return message


def step(*calls: tuple[str, str]) -> Message:
    return Message.assistant(
        "",
        [ToolCall(call_id, f"ledger__{export}", {}) for call_id, export in calls],
        step_id=f"{TURN}-step-0",
    )


def result(call_id: str, export: str) -> Message:
    return Message.tool_result(
        ToolCallResult.success(call_id, f"ledger__{export}", f"done {call_id}")
    )


def started(call_id: str, export: str) -> dict[str, Any]:
    return {"type": "toolCall.started", "toolCallId": call_id, "toolName": f"ledger__{export}",
            "idempotencyKey": key(call_id), "idempotent": export == "mark"}


def tool_outputs(model: ScriptedModel) -> dict[str, Any]:
    """toolCallId -> output of every tool result in the model's last request."""
    out: dict[str, Any] = {}
    for message in model.requests[-1].messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "tool-result":
                out[part["toolCallId"]] = part["output"]
    return out


def journal_text(instance: Any) -> str:
    """turn.jsonl's content (the stored records as JSON lines for another backend)."""
    paths = getattr(instance.store, "paths", None)
    if paths is not None:
        return str(paths.journal.read_text())
    return "".join(json.dumps(r) + "\n" for r in instance.store.journal.records())


async def resume(
    bundle: Path, state_root: Path, model: ScriptedModel, **options: Any
) -> tuple[Any, Any]:
    async with Runtime.from_bundle(
        bundle, state_root=state_root, models={AGENT: model}, **options
    ) as rt:
        instance = await rt.instance(AGENT, KEY)
        outcome = await instance.resume()
        records = base_records(instance)
        journal = journal_text(instance)
    assert journal == "", "the journal is emptied once the turn ended"
    return outcome, records


def test_each_interrupted_call_gets_what_its_state_allows(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    """completed: kept; started + idempotent: re-run with the same key; started + not
    idempotent: E_TOOL_OUTCOME_UNKNOWN; not started: run."""
    interrupt(bundle, (state_root, storage),
              [user(), step(("c1", "charge"), ("c2", "mark"), ("c3", "charge"), ("c4", "charge")),
               result("c1", "charge")],
              [started("c1", "charge"), started("c2", "mark"), started("c3", "charge")])
    model = ScriptedModel(["all done"])
    outcome, records = run(resume(bundle, state_root, model, storage=storage))
    assert outcome is not None and outcome.turn_id == TURN
    assert outcome.finish_reason == "text_response" and outcome.text == "all done"
    # c1 completed (never again), c3 not idempotent (never again): only c2 (same key) and c4 ran.
    assert calls_log(bundle) == [["mark", "c2", key("c2")], ["charge", "c4", key("c4")]]
    outputs = tool_outputs(model)
    assert set(outputs) == {"c1", "c2", "c3", "c4"}
    assert outputs["c1"] == {"type": "text", "value": "done c1"}
    assert outputs["c2"] == {"type": "text", "value": "marked c2"}
    assert outputs["c3"]["type"] == "error-json"
    assert outputs["c3"]["value"]["code"] == "E_TOOL_OUTCOME_UNKNOWN"
    assert "may or may not have taken effect" in outputs["c3"]["value"]["message"]
    assert outputs["c4"] == {"type": "text", "value": "charged c4"}
    assert shape(records) == [
        ("user", "user", "go"),
        (
            "assistant",
            "assistant",
            "call:ledger__charge|call:ledger__mark|call:ledger__charge|call:ledger__charge",
        ),
        ("tool", "tool", "result:ledger__charge:text"),
        ("tool", "tool", "result:ledger__mark:text"),
        ("tool", "tool", "result:ledger__charge:error-json"),
        ("tool", "tool", "result:ledger__charge:text"),
        ("assistant", "assistant", "all done"),
    ]
    model.assert_complete()


def test_a_written_final_answer_is_the_answer_without_a_model_call(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    interrupt(bundle, (state_root, storage),
              [user(), step(("c1", "charge")), result("c1", "charge"),
               Message.assistant("the answer", step_id=f"{TURN}-step-1")],
              [started("c1", "charge")])
    model = ScriptedModel([])
    outcome, records = run(resume(bundle, state_root, model, storage=storage))
    assert outcome.text == "the answer" and outcome.finish_reason == "text_response"
    assert model.requests == [] and calls_log(bundle) == []
    assert [r["data"]["role"] for r in records] == ["user", "assistant", "tool", "assistant"]


def test_the_resumed_answer_goes_to_the_original_reply_channel(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    request = AgentEvent(type="message", input="go", id="evt-1", instance_key=KEY,
                         reply_to=ReplyChannel(target="orchestrator", correlation_id="corr-7"))
    interrupt(
        bundle, (state_root, storage), [user(), step(("c1", "mark"))], [started("c1", "mark")],
        event=request
    )
    answers: list[AgentEvent] = []

    async def main() -> None:
        model = ScriptedModel(["resumed answer"])
        async with Runtime.from_bundle(bundle, state_root=state_root, storage=storage,
                                       models={AGENT: model}) as rt:
            rt.on_outgoing = _collect(answers)
            instance = await rt.instance(AGENT, KEY)
            await instance.resume()

    run(main())
    assert len(answers) == 1
    assert answers[0].metadata["inReplyTo"] == "corr-7"
    assert answers[0].metadata["finishReason"] == "text_response"


def _collect(answers: list[AgentEvent]) -> Any:
    async def outgoing(event: AgentEvent) -> None:
        answers.append(event)
    return outgoing


def test_a_turn_killed_before_its_input_was_written_starts_over_once(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    interrupt(bundle, (state_root, storage), [], [])
    model = ScriptedModel([{"toolCalls": [{"name": "ledger__mark", "args": {}}]}, "done"])
    outcome, records = run(resume(bundle, state_root, model, storage=storage))
    assert outcome.text == "done"
    assert shape(records)[0] == ("user", "user", "go")
    assert [r["id"] for r in records if r["data"]["role"] == "user"] == ["u1"]
    assert len(calls_log(bundle)) == 1


def test_the_next_event_waits_for_the_resumed_turn(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    interrupt(bundle, (state_root, storage), [user(), step(("c1", "mark"))],
              [started("c1", "mark")])
    model = ScriptedModel(["first answer", "second answer"])

    async def main() -> list[Any]:
        async with Runtime.from_bundle(bundle, state_root=state_root, storage=storage,
                                       models={AGENT: model}) as rt:
            result = await rt.run_turn(AGENT, "next", instance_key=KEY)
            assert result.text == "second answer"
            return base_records(await rt.instance(AGENT, KEY))

    records = run(main())
    texts = [r["data"]["content"] for r in records if r["data"]["role"] in ("user", "assistant")]
    assert texts[0] == "go" and "next" in texts and texts.index("next") > 1
    assert [line[1] for line in calls_log(bundle)] == ["c1"]


def test_the_crash_loop_guard_ends_the_turn_after_three_crash_resumes(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    interrupt(
        bundle,
        (state_root, storage),
        [user(), step(("c1", "mark"))],
        [
            started("c1", "mark"),
            *({"type": "turn.resumed", "attempt": n, "cause": "crash"} for n in (1, 2, 3)),
        ],
    )
    model = ScriptedModel([])
    outcome, records = run(resume(bundle, state_root, model, storage=storage))
    assert outcome.finish_reason == "error" and outcome.error["code"] == "E_TURN_INTERRUPTED"
    assert model.requests == [] and calls_log(bundle) == []
    output = records[-1]["data"]["content"][0]["output"]
    assert output["value"]["code"] == "E_TURN_INTERRUPTED"


def test_resume_interrupted_false_repairs_as_before(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    interrupt(bundle, (state_root, storage), [user(), step(("c1", "mark"))],
              [started("c1", "mark")])
    model = ScriptedModel([])

    async def main() -> tuple[Any, list[Any], str]:
        async with Runtime.from_bundle(bundle, state_root=state_root, storage=storage,
                                       models={AGENT: model},
                                       resume_interrupted=False) as rt:
            instance = await rt.instance(AGENT, KEY)
            return (
                await instance.resume(),
                base_records(instance),
                journal_text(instance),
            )

    outcome, records, journal = run(main())
    assert outcome is None and journal == "" and calls_log(bundle) == []
    assert records[-1]["data"]["content"][0]["output"]["value"]["code"] == "E_TURN_INTERRUPTED"


def test_the_ledger_is_written_before_the_handler_runs_and_emptied_at_turn_end(
        bundle: Path, state_root: Path) -> None:
    # JSONL-only: the tool handler reads turn.jsonl itself (the probe); the records it checks
    # are checked on every backend by test_journal_records_of_a_turn.
    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root) as rt:
            instance = await rt.instance(AGENT, KEY)
            journal = str(instance.store.paths.journal)
            instance.model = instance.env.model = ScriptedModel([
                {"toolCalls": [{"name": "ledger__charge", "args": {"probe": journal}},
                               {"name": "ledger__mark", "args": {"probe": journal}}]}, "ok"])
            result = await instance.run(AgentEvent(type="message", input="go", instance_key=KEY))
            assert result.text == "ok"
            assert instance.store.paths.journal.read_text() == ""
            log = calls_log(bundle)
            assert [line[0] for line in log] == ["charge", "mark"]
            assert all(line[3:] == ["journaled"] for line in log), log
            assert [line[2] for line in log] == [
                idempotency_key(AGENT, KEY, result.turn_id, line[1]) for line in log
            ]

    run(main())


def test_journal_records_of_a_turn(
    bundle: Path, state_root: Path, storage: Any
) -> None:
    """turn.started (input, inputMessageId) then toolCall.started (key, idempotent) per call."""
    seen: list[list[dict[str, Any]]] = []

    async def main() -> None:
        model = ScriptedModel([{"toolCalls": [{"name": "ledger__mark", "args": {}}]}, "ok"])
        async with Runtime.from_bundle(bundle, state_root=state_root, storage=storage,
                                       models={AGENT: model}) as rt:
            instance = await rt.instance(AGENT, KEY)
            instance.subscribe(lambda payload: seen.append(
                [json.loads(line) for line in journal_text(instance).splitlines()])
                if payload.get("type") == "tool.completed" else None)
            await instance.run(AgentEvent(type="message", input="go", instance_key=KEY, id="evt-9"))

    run(main())
    records = seen[0]
    assert [r["type"] for r in records] == ["turn.started", "toolCall.started"]
    assert records[0]["input"]["id"] == "evt-9" and records[0]["input"]["input"] == "go"
    assert isinstance(records[0]["inputMessageId"], str)
    assert records[1]["toolName"] == "ledger__mark" and records[1]["idempotent"] is True
    assert records[1]["idempotencyKey"] == idempotency_key(
        AGENT, KEY, records[0]["turnId"], records[1]["toolCallId"]
    )
