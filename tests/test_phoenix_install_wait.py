"""The Phoenix fixture waits for ``make test``'s background install of Phoenix
(tests/support/phoenix_install.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.phoenix_install import PENDING_ENV, wait_for_install


def test_without_a_pending_install_it_returns_at_once(tmp_path: Path) -> None:
    wait_for_install(tmp_path / "phoenix", env={}, timeout_s=0)


def test_it_waits_until_the_marker_is_gone_and_phoenix_is_there(tmp_path: Path) -> None:
    marker, phoenix = tmp_path / ".venv-phoenix.pending", tmp_path / "phoenix"
    marker.touch()

    def finish() -> None:
        phoenix.touch()
        marker.unlink()

    timer = threading.Timer(0.3, finish)
    timer.start()
    try:
        wait_for_install(phoenix, env={PENDING_ENV: str(marker)}, timeout_s=30)
    finally:
        timer.cancel()
    assert phoenix.exists() and not marker.exists()


def test_an_install_that_ended_without_phoenix_fails_with_its_log(tmp_path: Path) -> None:
    marker = tmp_path / ".venv-phoenix.pending"
    marker.with_suffix(".log").write_text("ERROR: No matching distribution found\n")
    with pytest.raises(AssertionError, match="No matching distribution"):
        wait_for_install(tmp_path / "phoenix", env={PENDING_ENV: str(marker)}, timeout_s=5)


def test_an_install_still_running_past_the_deadline_fails(tmp_path: Path) -> None:
    marker = tmp_path / ".venv-phoenix.pending"
    marker.touch()
    with pytest.raises(AssertionError, match="still runs"):
        wait_for_install(tmp_path / "phoenix", env={PENDING_ENV: str(marker)}, timeout_s=0.3)
