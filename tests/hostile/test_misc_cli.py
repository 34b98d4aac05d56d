"""CLI hostile cases: ``-vv`` never prints tracebacks, ``fold --all`` goes past locked instances."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import pytest

from goondan import cli
from goondan.conversation import Message, MessageEvent
from goondan.types import ToolCall
from goondan.workspace import InstanceStore
from goondan.workspace import store as store_module
from tests.support.cli_main import run


@pytest.fixture
def boom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli.COMMANDS, "boom", ("tests.support.cli_commands", "boom", "test"))


def _log_a_failure() -> None:
    try:
        raise ValueError("provider said no")
    except ValueError as exc:
        logging.getLogger("goondan.runtime.test").debug("turn t-1 failed", exc_info=exc)


def test_vv_prints_no_traceback_only_debug_does(
    boom: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run(capsys, "-vv", "boom", "--kind", "ok")
    _log_a_failure()
    err = capsys.readouterr().err
    assert "turn t-1 failed (ValueError: provider said no; --debug shows the traceback)" in err
    assert "Traceback" not in err
    run(capsys, "--debug", "-vv", "boom", "--kind", "ok")
    _log_a_failure()
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ValueError: provider said no" in err


def _leave_interrupted_turn(root: Path, key: str) -> None:
    store = InstanceStore.open(root, "demo-11112222", "planner", key, fsync=False)
    state = store.load()
    for message in (Message.user("go"), Message.assistant("", [ToolCall("c1", "bash")])):
        event = MessageEvent.append(message)
        state.emit(event)
        store.append_event(event, "turn-1")
    store.close()


def test_fold_all_skips_a_locked_instance_and_folds_the_rest(
        state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("a", "b", "c"):
        _leave_interrupted_turn(state_root, key)
    with InstanceStore.open(state_root, "demo-11112222", "planner", "b"):
        code, out, err = run(capsys, "fold", "--all")
        assert code == 0, err
        lines = {line.split(" ")[0]: line for line in out.splitlines()}
        assert "skipped: [E_INSTANCE_LOCKED]" in lines["planner:b"]
        assert "folded 2 leftover events" in lines["planner:a"]
        assert "folded 2 leftover events" in lines["planner:c"]
        code, out, _ = run(capsys, "fold", "--all", "--json")
    rows = {r["instance"]: r for r in json.loads(out)["instances"]}
    assert (
        rows["planner:b"]["skipped"] is True
        and rows["planner:b"]["error"]["code"] == "E_INSTANCE_LOCKED"
    )
    # Once the holder is gone, the skipped instance folds like the others did.
    code, out, _ = run(capsys, "fold", "--all")
    assert code == 0 and "planner:b (demo-11112222): folded 2 leftover events" in out


def test_fold_all_reports_an_io_failure_and_still_folds_the_rest(
    state_root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("a", "b"):
        _leave_interrupted_turn(state_root, key)
    real = store_module.InstanceStore.open_dir.__func__  # type: ignore[attr-defined]

    def flaky(cls: type[InstanceStore], /, paths: object, **kwargs: object) -> InstanceStore:
        if kwargs.get("instance_key") == "a":
            from goondan.workspace.files import io_error
            raise io_error(OSError(errno.EIO, "Input/output error"), Path("x"), "read")
        return real(cls, paths, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(store_module.InstanceStore, "open_dir", classmethod(flaky))
    code, out, _ = run(capsys, "fold", "--all")
    assert code == 3  # WorkspaceError's exit code, after every instance was tried
    assert "planner:a (demo-11112222): failed: [E_WORKSPACE_IO]" in out
    assert "planner:b (demo-11112222): folded 2 leftover events" in out
