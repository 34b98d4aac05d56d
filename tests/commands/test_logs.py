"""`goondan logs` picks the running swarm, else the one that logged last."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli_main import run


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


def test_no_logs_at_all_is_a_config_error(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "logs")
    assert code == 3 and "[E_RUN_NOT_RUNNING]" in err


def _record(when: str, level: str, message: str, **extra: str) -> str:
    import json

    return json.dumps(
        {"level": level, "timestamp": when, "logger": "goondan", "message": message, **extra}
    )


def test_pretty_by_default_json_raw_and_filters(
    state_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        _record("2020-01-01T00:00:00.000Z", "info", "old start"),
        _record("2099-01-01T00:00:01.000Z", "warning", "future warning", traceId="trace-abc"),
        "plain text line",
    ]
    _log(state_root, "swarm.ws-1", "orchestrator", "\n".join(lines) + "\n", 2_000_000)
    _log(
        state_root,
        "swarm.ws-1",
        "worker.cli",
        _record("2099-01-01T00:00:00.500Z", "info", "worker did it") + "\n",
        2_000_000,
    )
    _log(
        state_root,
        "swarm.ws-1",
        "worker.job",
        _record("2099-01-01T00:00:02.000Z", "error", "job failed") + "\n",
        2_000_000,
    )
    code, out, _ = run(capsys, "logs", "--instance-key", "swarm", "--no-color")
    assert code == 0 and "instanceKey=swarm" in out
    assert (
        " orchestrator INFO  old start" in out
        and " orchestrator WARN" in out
        and "future warning" in out
    )
    assert "plain text line" in out and '{"level"' not in out
    code, out, _ = run(capsys, "logs", "--instance-key", "swarm", "--json")
    assert code == 0 and out.count('"level"') == 2 and '"message": "plain text line"' in out
    code, out, _ = run(capsys, "logs", "--instance-key", "swarm", "--since", "1h")
    assert "future warning" in out and "old start" not in out
    code, out, _ = run(capsys, "logs", "--instance-key", "swarm", "--trace", "trace-abc")
    assert "future warning" in out and "old start" not in out
    code, out, _ = run(capsys, "logs", "--instance-key", "swarm", "--agent", "worker")
    # merged in time order
    assert code == 0 and out.index("worker did it") < out.index("job failed")
    assert "old start" not in out
    code, out, _ = run(capsys, "logs", "--instance-key", "swarm", "--trace", "nothing-like-it")
    assert code == 0 and "(no matching lines)" in out
    code, _, err = run(capsys, "logs", "--instance-key", "swarm", "--since", "yesterday-ish")
    assert code == 2 and "duration" in err


def test_list_always_says_something(state_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (state_root / "runtime" / "logs" / "empty").mkdir(parents=True)
    code, out, _ = run(capsys, "logs", "--instance-key", "empty", "--list")
    assert code == 0 and "No process has logged yet" in out
    code, out, _ = run(capsys, "logs", "--instance-key", "empty", "--list", "--json")
    assert code == 0 and '"processes": []' in out
