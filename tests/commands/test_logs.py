"""`goondan logs` picks the running swarm, else the one that logged last."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from goondan import cli


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def _log(state_root: Path, key: str, process: str, text: str, mtime: float) -> None:
    path = state_root / "runtime" / "logs" / key / f"{process}.stderr.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (mtime, mtime))


def test_without_a_running_swarm_the_last_logged_one_is_shown(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _log(state_root, "older", "orchestrator", "old line\n", 1_000_000)
    _log(state_root, "newer", "orchestrator", "new line\n", 2_000_000)
    _log(state_root, "newer", "worker.cli", "worker line\n", 2_000_000)
    code, out, _ = run(capsys, "logs", "--stream", "stderr")
    assert code == 0
    assert "instanceKey=newer" in out and "new line" in out and "old line" not in out
    code, out, _ = run(capsys, "logs", "--process", "worker.cli", "--stream", "stderr")
    assert code == 0 and "worker line" in out
    code, out, _ = run(capsys, "logs", "--instance-key", "older", "--stream", "stderr")
    assert code == 0 and "old line" in out


def test_no_logs_at_all_is_a_config_error(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "logs")
    assert code == 3 and "[E_RUN_NOT_RUNNING]" in err
