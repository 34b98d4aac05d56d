"""Issue 32 item 5: process names as they are. ``logs --help`` (and docs/cli.md) name connector
processes ``connection.<name>``; a ``--process`` that names no process with logs gets the real
name suggested. Through the real CLI, on log folders laid out as ``goondan run`` writes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]


def goondan(state_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "goondan", *args, "--state-root", str(state_root)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "GOONDAN_STATE_ROOT": str(state_root)})


@pytest.fixture
def logged(state_root: Path) -> Path:
    folder = state_root / "runtime" / "logs" / "ops.bot-1234abcd"
    folder.mkdir(parents=True)
    for process in ("orchestrator", "ops.alert-db", "connection.alerts"):
        (folder / f"{process}.stderr.log").write_text(f"line of {process}\n", encoding="utf-8")
    return state_root


def test_help_and_docs_name_connection_processes() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "goondan", "logs", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "'connection.<name>'" in " ".join(shown.stdout.split())
    assert "connector.<" not in shown.stdout
    cli_md = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "`connection.<name>`" in cli_md and "`connector.<connection>`" not in cli_md


def test_a_conversation_key_as_typed_suggests_the_process_name(logged: Path) -> None:
    done = goondan(logged, "logs", "-i", "ops", "--process", "ops.alert:db")
    assert done.returncode == 2, done.stderr
    assert "the process is named 'ops.alert-db': goondan logs --process ops.alert-db" in done.stderr
    shown = goondan(logged, "logs", "-i", "ops", "--process", "ops.alert-db", "--stream", "stderr")
    assert shown.returncode == 0 and "line of ops.alert-db" in shown.stdout


def test_a_connector_name_suggests_the_connection_process(logged: Path) -> None:
    done = goondan(logged, "logs", "-i", "ops", "--process", "connector.alerts")
    assert done.returncode == 3 and "E_RUN_NO_LOGS" in done.stderr
    assert "the process is named 'connection.alerts'" in done.stderr
    typo = goondan(logged, "logs", "-i", "ops", "--process", "connection.alert")
    assert typo.returncode == 3 and "did you mean 'connection.alerts'?" in typo.stderr
