"""Approvals in the turn (docs/approvals.md): a call that needs a person parks the turn; the
decision resumes it, in this runtime or in a later one.

Run against every storage backend (``storage``: the JSONL state root, the runtime's default, and
PostgreSQL; tests/support/backends.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.workspace.approvals import ApprovalStore
from tests.support.aio import run
from tests.support.approvals_example import approvals_bundle

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approvals"


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


@pytest.fixture()
def bundle(tmp_path: Path) -> Path:
    return approvals_bundle(tmp_path)


def _tool_messages(model: ScriptedModel, index: int) -> list[dict[str, Any]]:
    return [m for m in model.requests[index].messages if m.get("role") == "tool"]


def _status(state_root: Path, storage: Any, workspace_id: str) -> str:
    if storage is not None:
        [meta] = list(storage.instances(workspace_id))
        return str(meta["status"])
    [meta_file] = list(state_root.rglob("metadata.json"))
    return str(json.loads(meta_file.read_text())["status"])


def _approvals(state_root: Path, storage: Any, workspace_id: str) -> Any:
    """The workspace's approvals, opened anew (as another process would)."""
    if storage is not None:
        return storage.approvals(workspace_id)
    return ApprovalStore(state_root, workspace_id)


def test_a_required_call_parks_and_approve_runs_it_once(
    bundle: Path, tmp_path: Path, storage: Any
) -> None:
    state = tmp_path / "state"

    async def main() -> None:
        model = ScriptedModel(
            [{"toolCalls": [call("files__delete", path="old.txt")]}, "deleted it"]
        )
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=state, models={"assistant": model}
        ) as rt:
            parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
            assert parked.finish_reason == "approval_pending"
            [row] = parked.metadata["approvals"]
            assert row["tool"] == "files__delete" and row["args"] == {"path": "old.txt"}
            assert (bundle / "work" / "old.txt").exists()  # not run
            assert _status(state, storage, rt.workspace_id) == "waitingForApproval"
            [pending] = rt.approvals.list()
            assert pending.id == row["id"]
            done = await rt.approvals.approve(pending.id, note="fine")
            assert (
                done is not None
                and done.finish_reason == "text_response"
                and done.text == "deleted it"
            )
            assert done.turn_id == parked.turn_id
            assert not (bundle / "work" / "old.txt").exists()
            [result] = _tool_messages(model, 1)
            assert "deleted old.txt" in json.dumps(result)
            # a second decision changes nothing
            assert await rt.approvals.approve(pending.id) is None
            assert len(model.requests) == 2
            instance = await rt.instance(None, "k")
            assert [m.role for m in instance.messages] == ["user", "assistant", "tool", "assistant"]
        assert _status(state, storage, rt.workspace_id) == "idle"
        decided = _approvals(state, storage, rt.workspace_id).get(pending.id)
        assert decided.status == "approved"

    run(main())


def test_deny_gives_the_model_e_approval_denied_with_the_reason(
    bundle: Path, tmp_path: Path, storage: Any
) -> None:
    async def main() -> None:
        model = ScriptedModel([{"toolCalls": [call("files__delete", path="old.txt")]}, "kept it"])
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=tmp_path / "s", models={"assistant": model}
        ) as rt:
            parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
            [row] = parked.metadata["approvals"]
            done = await rt.approvals.deny(row["id"], reason="we still need it")
            assert done is not None and done.text == "kept it"
            [result] = _tool_messages(model, 1)
            text = json.dumps(result)
            assert "E_APPROVAL_DENIED" in text and "we still need it" in text
        assert (bundle / "work" / "old.txt").exists()

    run(main())


def test_three_calls_one_waiting_runs_the_other_two_once(
    bundle: Path, tmp_path: Path, storage: Any
) -> None:
    log = bundle / "work" / "calls.log"

    async def main() -> None:
        model = ScriptedModel([{"toolCalls": [
            call("files__write", path="notes/a.txt", text="a"),
            call("files__write", path="config.txt", text="c"),  # the middleware asks for this one
            call("files__list"),
        ]}, "all done"])
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=tmp_path / "s", models={"assistant": model}
        ) as rt:
            parked = await rt.run_turn(None, "write things", instance_key="k")
            [row] = parked.metadata["approvals"]
            assert row["tool"] == "files__write" and row["args"]["path"] == "config.txt"
            assert "outside notes/" in row["reason"]
            assert (bundle / "work" / "notes" / "a.txt").exists()
            assert not (bundle / "work" / "config.txt").exists()
            log.write_text("")
            done = await rt.approvals.approve(
                row["id"], args={"path": "config.txt", "text": "edited"}
            )
            assert done is not None and done.text == "all done"
            assert (bundle / "work" / "config.txt").read_text() == "edited"
            tools = _tool_messages(model, 1)
            assert len(tools) == 3  # one result per call, none twice
            ids = [json.dumps(t) for t in tools]
            assert len(set(ids)) == 3

    run(main())


def test_parked_turn_survives_a_new_runtime_and_new_input_waits(
    bundle: Path, tmp_path: Path, storage: Any
) -> None:
    state = tmp_path / "state"

    async def main() -> None:
        first = ScriptedModel([{"toolCalls": [call("files__delete", path="old.txt")]}])
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=state, models={"assistant": first}
        ) as rt:
            parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
            [row] = parked.metadata["approvals"]
        second = ScriptedModel(["deleted after restart", "second answer"])
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=state, models={"assistant": second}
        ) as rt:
            assert [a.id for a in rt.approvals.list()] == [row["id"]]
            import asyncio

            waiting = asyncio.ensure_future(rt.run_turn(None, "and then?", instance_key="k"))
            await asyncio.sleep(0)
            assert not waiting.done()
            done = await rt.approvals.approve(row["id"])
            assert done is not None and done.text == "deleted after restart"
            assert (await waiting).text == "second answer"
            # the resumed request holds the call's result, not a synthetic E_TURN_INTERRUPTED
            text = json.dumps(_tool_messages(second, 0))
            assert "deleted old.txt" in text and "E_TURN_INTERRUPTED" not in text
            assert [m["role"] for m in second.requests[1].messages][-1] == "user"
        assert not (bundle / "work" / "old.txt").exists()

    run(main())


def test_an_expired_approval_is_denied_with_e_approval_expired(
    bundle: Path, tmp_path: Path, storage: Any
) -> None:
    docs = list(yaml.safe_load_all((bundle / "goondan.yaml").read_text()))
    agent = next(d for d in docs if d["kind"] == "Agent")
    agent["spec"]["tools"] = [{"ref": "Tool/files", "approvalTimeoutMs": 1}]
    (bundle / "goondan.yaml").write_text(yaml.safe_dump_all(docs))
    state = tmp_path / "s"

    async def main() -> None:
        model = ScriptedModel([{"toolCalls": [call("files__delete", path="old.txt")]}, "too late"])
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=state, models={"assistant": model}
        ) as rt:
            parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
            [row] = parked.metadata["approvals"]
            store = _approvals(state, storage, rt.workspace_id)
            assert row["expiresAt"] is not None
            import asyncio
            import time

            deadline = time.monotonic() + 5
            while store.get(row["id"]).status != "expired":  # type: ignore[union-attr]
                assert time.monotonic() < deadline
                await asyncio.sleep(0.001)
            done = await rt.approvals.approve(row["id"])
            assert done is not None and done.text == "too late"
            assert "E_APPROVAL_EXPIRED" in json.dumps(_tool_messages(model, 1))
            assert store.get(row["id"]).status == "expired"  # type: ignore[union-attr]
        assert (bundle / "work" / "old.txt").exists()

    run(main())


def test_the_example_bundle_validates_and_its_demo_model_parks_then_finishes(
    bundle: Path, tmp_path: Path, storage: Any
) -> None:
    from goondan.config import validate_bundle

    report = validate_bundle(EXAMPLE, env={})
    assert not report.errors and not report.warnings

    async def main() -> None:
        async with Runtime.from_bundle(bundle, storage=storage, state_root=tmp_path / "s") as rt:
            parked = await rt.run_turn(None, "delete old.txt", instance_key="demo")
            [row] = parked.metadata["approvals"]
            done = await rt.approvals.approve(row["id"])
            assert done is not None and done.text == "Done: deleted old.txt"

    run(main())


def test_an_approved_call_that_started_before_a_crash_is_not_run_again(
    bundle: Path, tmp_path: Path, storage: Any
) -> None:
    from goondan.storage.jsonl import JsonlBackend

    state = tmp_path / "state"

    async def main() -> None:
        first = ScriptedModel([{"toolCalls": [call("files__delete", path="old.txt")]}])
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=state, models={"assistant": first}
        ) as rt:
            parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
            [row] = parked.metadata["approvals"]
            rt.approvals.store.decide(row["id"], approve=True, by="alice", via="cli")
        # The process applying the decision died while the handler ran: the journal says so.
        backend = storage or JsonlBackend(state)
        with backend.open_instance(rt.workspace_id, "assistant", "k") as store:
            journal = store.journal
            journal.append({"type": "turn.resumed", "turnId": row["turnId"], "attempt": 1,
                            "cause": "decision", "at": "2026-01-01T00:00:00.000Z"})
            journal.append(
                {
                    "type": "toolCall.started",
                    "turnId": row["turnId"],
                    "toolCallId": row["toolCallId"],
                    "toolName": "files__delete",
                    "idempotent": False,
                    "at": "2026-01-01T00:00:00.000Z",
                }
            )
        second = ScriptedModel(["checked"])
        async with Runtime.from_bundle(
            bundle, storage=storage, state_root=state, models={"assistant": second}
        ) as rt:
            instance = await rt.instance(None, "k")
            await instance.resume()
            assert instance.messages[-1].text == "checked"
        text = json.dumps(second.requests[0].messages)
        assert "E_TOOL_OUTCOME_UNKNOWN" in text and "deleted old.txt" not in text

    run(main())
    assert (bundle / "work" / "old.txt").exists()  # the handler did not run (again)
