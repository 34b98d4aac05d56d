"""`goondan approvals list|approve|deny` with no swarm running: the decision is stored, and the
next process holding the instance applies it (docs/approvals.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.workspace.catalog import delete_instance, iter_instances
from tests.support.aio import run as run_async
from tests.support.approvals_example import approvals_bundle
from tests.support.cli_main import run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approvals"


@pytest.fixture()
def parked(tmp_path: Path, state_root: Path) -> tuple[Path, dict[str, Any]]:
    """A turn parked on files__delete(old.txt), left by a runtime that closed."""
    root = approvals_bundle(tmp_path)

    async def main() -> dict[str, Any]:
        model = ScriptedModel(
            [{"toolCalls": [{"name": "files__delete", "args": {"path": "old.txt"}}]}]
        )
        async with Runtime.from_bundle(
            root, state_root=state_root, models={"assistant": model}
        ) as rt:
            result = await rt.run_turn(None, "delete old.txt", instance_key="k")
        [row] = result.metadata["approvals"]
        return dict(row)

    return root, run_async(main())


def test_list_json_has_the_listing_fields(parked: tuple[Path, dict[str, Any]], state_root: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    root, row = parked
    code, out, _ = run(capsys, "--state-root", str(state_root), "approvals", "list", "--json")
    assert code == 0
    [listed] = json.loads(out)
    assert listed["id"] == row["id"] and listed["status"] == "pending"
    assert listed["tool"] == "files__delete" and listed["args"] == {"path": "old.txt"}
    assert listed["agent"] == "assistant" and listed["instanceKey"] == "k" and listed["requestedAt"]
    code, text, _ = run(
        capsys, "--state-root", str(state_root), "approvals", "list", "--bundle", str(root)
    )
    assert (
        code == 0 and row["id"] in text and "files__delete" in text and '"path": "old.txt"' in text
    )


def test_bad_args_are_refused_before_anything_is_decided(
    parked: tuple[Path, dict[str, Any]], state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, row = parked
    for bad in ("{not json", "[1]", '{"path": 5}', "{}"):
        code, _, err = run(
            capsys,
            "--state-root",
            str(state_root),
            "approvals",
            "approve",
            row["id"],
            "--args",
            bad,
        )
        assert code == 2 and "E_APPROVAL_ARGS" in err, (bad, err)
    code, out, _ = run(capsys, "--state-root", str(state_root), "approvals", "list", "--json")
    assert json.loads(out)[0]["status"] == "pending"
    code, _, err = run(
        capsys, "--state-root", str(state_root), "approvals", "deny", "apr_ffffffffffffffffffffffff"
    )
    assert code == 2 and "E_APPROVAL_NOT_FOUND" in err


def test_approve_while_stopped_then_the_next_runtime_runs_the_edited_call(
    parked: tuple[Path, dict[str, Any]], state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, row = parked
    (root / "work" / "older.txt").write_text("older")
    code, out, _ = run(capsys, "--state-root", str(state_root), "approvals", "approve", row["id"],
                       "--args", '{"path": "older.txt"}', "--note", "the older one", "--json")
    assert code == 0
    decided = json.loads(out)
    assert (
        decided["status"] == "approved"
        and decided["decided"] is True
        and decided["notified"] is False
    )
    assert decided["via"] == "cli" and decided["note"] == "the older one"
    code, out, _ = run(
        capsys, "--state-root", str(state_root), "approvals", "deny", row["id"], "--reason", "no"
    )
    assert code == 0 and "already approved" in out and "nothing changed" in out

    async def main() -> None:
        model = ScriptedModel(["deleted the older file"])
        async with Runtime.from_bundle(
            root, state_root=state_root, models={"assistant": model}
        ) as rt:
            done = await rt.approvals.approve(row["id"])  # applies the stored (CLI) decision
            assert done is not None and done.text == "deleted the older file"
            assert "deleted older.txt" in json.dumps(model.requests[0].messages)

    run_async(main())
    assert (root / "work" / "old.txt").exists() and not (root / "work" / "older.txt").exists()


def test_deleting_the_instance_removes_its_approvals(
    parked: tuple[Path, dict[str, Any]], state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [info] = [i for i in iter_instances(state_root) if i.instance_key == "k"]
    delete_instance(info)
    code, out, _ = run(
        capsys, "--state-root", str(state_root), "approvals", "list", "--all", "--json"
    )
    assert code == 0 and json.loads(out) == []


def test_a_decision_taken_while_stopped_is_applied_when_the_instance_opens(
    parked: tuple[Path, dict[str, Any]], state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, row = parked
    code, _, _ = run(
        capsys, "--state-root", str(state_root), "approvals", "deny", row["id"], "--reason", "keep"
    )
    assert code == 0

    async def main() -> None:
        model = ScriptedModel(["kept it"])
        async with Runtime.from_bundle(
            root, state_root=state_root, models={"assistant": model}
        ) as rt:
            instance = await rt.instance(None, "k")
            assert (await instance.resume()) is not None
            assert instance.parked is None
            assert instance.messages[-1].text == "kept it"
            assert "E_APPROVAL_DENIED" in json.dumps(model.requests[0].messages)

    run_async(main())
    assert (root / "work" / "old.txt").exists()


def test_cancelling_the_parked_turn_denies_every_pending_approval_of_it(
    tmp_path: Path, state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(EXAMPLE, root)
    (root / "work").mkdir()
    for name in ("old.txt", "keep.txt"):
        (root / "work" / name).write_text(name)

    async def park() -> list[str]:
        model = ScriptedModel([{"toolCalls": [
            {"name": "files__delete", "args": {"path": "old.txt"}},
            {"name": "files__delete", "args": {"path": "keep.txt"}}]}])
        async with Runtime.from_bundle(
            root, state_root=state_root, models={"assistant": model}
        ) as rt:
            result = await rt.run_turn(None, "delete both", instance_key="k")
        return [str(row["id"]) for row in result.metadata["approvals"]]

    ids = run_async(park())
    assert len(ids) == 2
    code, out, _ = run(capsys, "--state-root", str(state_root), "approvals", "cancel", ids[1],
                       "--json")
    assert code == 0
    cancelled = json.loads(out)
    assert sorted(cancelled["denied"]) == sorted(ids) and cancelled["notified"] is False
    code, out, _ = run(capsys, "--state-root", str(state_root), "approvals", "list", "--all",
                       "--json")
    rows = json.loads(out)
    assert {(r["status"], r["denyReason"], r["via"]) for r in rows} == {
        ("denied", "the turn was cancelled", "cli")}
    code, out, _ = run(capsys, "--state-root", str(state_root), "approvals", "cancel", ids[0])
    assert code == 0 and "nothing changed" in out

    async def resume() -> None:
        model = ScriptedModel(["nothing deleted"])
        async with Runtime.from_bundle(
            root, state_root=state_root, models={"assistant": model}
        ) as rt:
            instance = await rt.instance(None, "k")
            assert (await instance.resume()) is not None
            assert instance.parked is None and instance.messages[-1].text == "nothing deleted"
            sent = json.dumps(model.requests[0].messages)
            assert sent.count("E_APPROVAL_DENIED") == 2 and "the turn was cancelled" in sent

    run_async(resume())
    assert (root / "work" / "old.txt").exists() and (root / "work" / "keep.txt").exists()
