"""`goondan fold` (same recovery as the runtime, idempotent) and `goondan instance list|delete`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from goondan import cli
from goondan.conversation import Message, MessageEvent
from goondan.types import ToolCall
from goondan.workspace import InstanceStore

REFERENCE_ROOT = (
    Path(__file__).resolve().parent.parent / "fixtures" / "workspace" / "reference-root"
)


def run(capsys: pytest.CaptureFixture[str], *args: str, stdin: str | None = None,
        monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    if stdin is not None and monkeypatch is not None:
        import io

        class Terminal(io.StringIO):
            def isatty(self) -> bool:
                return True

        monkeypatch.setattr("sys.stdin", Terminal(stdin))
    with pytest.raises(SystemExit) as info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def leave_interrupted_turn(root: Path, key: str = "k1", agent: str = "planner") -> InstanceStore:
    store = InstanceStore.open(root, "demo-11112222", agent, key, fsync=False)
    state = store.load()
    for message in (Message.user("go"), Message.assistant("", [ToolCall("c1", "bash")])):
        event = MessageEvent.append(message)
        state.emit(event)
        store.append_event(event, "turn-1")
    store.close()
    return store


def test_fold_dry_run_then_fold_then_nothing(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = leave_interrupted_turn(state_root)
    code, out, _ = run(capsys, "fold", "k1", "--dry-run")
    assert code == 0 and "would fold 2 leftover events" in out and "would add 1 synthetic" in out
    assert store.paths.events.read_bytes() != b""  # dry run writes nothing
    code, out, _ = run(capsys, "fold", "k1")
    assert (
        code == 0 and "folded 2 leftover events, added 1 synthetic tool result; 3 messages" in out
    )
    assert store.paths.events.read_bytes() == b""
    assert len(store.paths.base.read_bytes().splitlines()) == 3
    before = store.paths.base.read_bytes()
    code, out, _ = run(capsys, "fold", "k1")
    assert code == 0 and "nothing to fold" in out and store.paths.base.read_bytes() == before


def test_fold_all_json(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    leave_interrupted_turn(state_root, "a")
    leave_interrupted_turn(state_root, "b", agent="coder")
    code, out, _ = run(capsys, "fold", "--all", "--json")
    rows = json.loads(out)["instances"]
    assert code == 0 and sorted(r["instance"] for r in rows) == ["coder:b", "planner:a"]
    assert all(r["leftoverEvents"] == 2 and r["syntheticResults"] == 1 for r in rows)
    assert {d["code"] for r in rows for d in r["diagnostics"]} == {
        "W_WORKSPACE_RECOVERED", "W_WORKSPACE_REPAIRED"}


def test_fold_reference_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    shutil.copytree(REFERENCE_ROOT, root)
    code, out, _ = run(capsys, "fold", "cli:1", "--state-root", str(root))
    assert code == 0 and "folded 1 leftover event; 2 messages" in out
    base = root / "workspaces/default/instances/cli-1/messages/base.jsonl"
    assert [json.loads(x)["id"] for x in base.read_text().splitlines()] == ["persist-0", "msg-9"]


def test_fold_needs_a_key_or_all(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fold")
    assert code == 2 and "[E_USAGE]" in err


def test_fold_refuses_a_locked_instance(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    leave_interrupted_turn(state_root)
    with InstanceStore.open(state_root, "demo-11112222", "planner", "k1"):
        code, _, err = run(capsys, "fold", "k1")
    assert code == 3 and "[E_INSTANCE_LOCKED]" in err


def test_instance_list_and_json(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "instance", "list")
    assert code == 0 and "No instances found." in out
    leave_interrupted_turn(state_root, "k1")
    leave_interrupted_turn(state_root, "k2", agent="coder")
    code, out, _ = run(capsys, "instance", "list")
    assert code == 0 and out.splitlines()[0].startswith("INSTANCE KEY")
    assert "k1" in out and "coder" in out and "demo-11112222" in out
    code, out, _ = run(capsys, "instance", "list", "--json", "--agent", "coder")
    [row] = json.loads(out)["instances"]
    assert row["instanceKey"] == "k2" and row["agentName"] == "coder" and row["status"] == "idle"
    code, out, _ = run(capsys, "instance")  # bare group = list
    assert code == 0 and "k2" in out


def test_instance_list_reference_root(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "instance", "list", "--state-root", str(REFERENCE_ROOT), "-n", "1")
    assert code == 0 and "cli:1" in out and "2 more (use --all)" in out


def test_instance_delete_confirms(state_root: Path, capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    store = leave_interrupted_turn(state_root)
    code, out, _ = run(capsys, "instance", "delete", "k1", stdin="n\n", monkeypatch=monkeypatch)
    assert code == 0 and "Nothing deleted." in out and store.paths.dir.exists()
    code, out, _ = run(capsys, "instance", "delete", "k1", stdin="y\n", monkeypatch=monkeypatch)
    assert code == 0 and "Instance deleted: planner:k1" in out and not store.paths.dir.exists()
    # workspace.md §7: an unknown key is a no-op that says so, exit 0
    code, out, err = run(capsys, "instance", "delete", "k1", "--force")
    assert (code, out, err) == (0, "Instance not found: k1\n", "")
    code, out, _ = run(capsys, "instance", "delete", "nobody")  # no terminal needed: nothing to ask
    assert (code, out) == (0, "Instance not found: nobody\n")


def test_instance_delete_without_a_terminal_needs_force(state_root: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    store = leave_interrupted_turn(state_root)
    code, _, err = run(capsys, "instance", "delete", "k1")  # pytest's stdin is not a terminal
    assert code == 2 and "--force" in err and store.paths.dir.exists()


def test_instance_delete_refuses_an_ambiguous_key(
    state_root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = leave_interrupted_turn(state_root, agent="planner")
    second = leave_interrupted_turn(state_root, agent="coder")
    code, _, err = run(capsys, "instance", "delete", "k1", stdin="y\n", monkeypatch=monkeypatch)
    assert code != 0 and "[E_WORKSPACE_INSTANCE_AMBIGUOUS]" in err
    assert first.paths.dir.exists() and second.paths.dir.exists()
    code, out, _ = run(
        capsys, "instance", "delete", "k1", "--agent", "coder", stdin="y\n", monkeypatch=monkeypatch
    )
    assert (
        code == 0
        and "1 instance?" in out
        and first.paths.dir.exists()
        and not second.paths.dir.exists()
    )


def test_instance_delete_refuses_a_locked_instance(state_root: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    leave_interrupted_turn(state_root)
    with InstanceStore.open(state_root, "demo-11112222", "planner", "k1") as store:
        code, _, err = run(capsys, "instance", "delete", "k1")
        assert code == 3 and "[E_INSTANCE_LOCKED]" in err and store.paths.dir.exists()
        code, _, _ = run(capsys, "instance", "delete", "k1", "--force")
        assert code == 0 and not store.paths.dir.exists()


def test_fold_leaves_the_calls_of_a_parked_turn_open_so_the_decision_still_runs_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A turn parked on an approval is open in the journal: its call has no result on purpose.
    `goondan fold` (which runs the runtime's own recovery) must not answer it with a synthetic
    E_TURN_INTERRUPTED result — the approval would then have nothing left to run."""
    from goondan.llm.testing import ScriptedModel
    from goondan.runtime import Runtime
    from tests.support.aio import run as run_async

    bundle = tmp_path / "bundle"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "approvals", bundle)
    (bundle / "work").mkdir()
    (bundle / "work" / "old.txt").write_text("old")
    state = tmp_path / "state"
    delete = {"name": "files__delete", "args": {"path": "old.txt"}}

    async def park() -> str:
        model = ScriptedModel([{"toolCalls": [delete]}])
        async with Runtime.from_bundle(bundle, state_root=state,
                                       models={"assistant": model}) as rt:
            parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
            assert parked.finish_reason == "approval_pending"
            return str(parked.metadata["approvals"][0]["id"])

    approval = run_async(park())
    code, out, _ = run(capsys, "fold", "k", "--state-root", str(state), "--dry-run")
    assert code == 0 and "synthetic" not in out, out
    code, out, _ = run(capsys, "fold", "k", "--state-root", str(state))
    assert code == 0 and "synthetic" not in out, out

    async def approve() -> None:
        model = ScriptedModel(["deleted it"])
        async with Runtime.from_bundle(bundle, state_root=state,
                                       models={"assistant": model}) as rt:
            done = await rt.approvals.approve(approval)
            assert done is not None and done.text == "deleted it"
            [result] = [m for m in model.requests[0].messages if m.get("role") == "tool"]
            assert "deleted old.txt" in json.dumps(result)
            assert "E_TURN_INTERRUPTED" not in json.dumps(result)

    run_async(approve())
    assert not (bundle / "work" / "old.txt").exists()
