"""``goondan studio``'s refusals: a public address without a token, a port already taken —
user errors with their code and suggestion, no traceback, exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]


def _studio(state_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), "studio", *args],
        capture_output=True, text=True, timeout=60, check=False)


def test_a_non_loopback_address_without_a_token_is_a_user_error(state_root: Path) -> None:
    done = _studio(state_root, "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2, done.stderr
    assert "[E_STUDIO_TOKEN_REQUIRED]" in done.stderr and "--token" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_a_port_in_use_is_a_user_error(state_root: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = _studio(state_root, "--port", str(taken.getsockname()[1]))
    assert done.returncode == 2, done.stderr
    assert "[E_STUDIO_BIND]" in done.stderr and "--port 0" in done.stderr
    assert "Traceback" not in done.stderr
