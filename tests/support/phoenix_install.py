"""``make test`` installs Phoenix (tests/e2e/test_otlp_phoenix.py's backend, ~150 packages in
``.venv-phoenix``) in the background while the tests run, and names a marker file that exists
until that install ended in ``GOONDAN_PHOENIX_PENDING``. The Phoenix fixture waits for it."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["PENDING_ENV", "wait_for_install"]

PENDING_ENV = "GOONDAN_PHOENIX_PENDING"
INSTALL_TIMEOUT_S = 900.0  # a cold pip cache on a loaded machine: a few minutes


def wait_for_install(phoenix: Path, env: Mapping[str, str] = os.environ,
                     timeout_s: float = INSTALL_TIMEOUT_S) -> None:
    """Return once no background install is pending (at once outside ``make test``); raise
    AssertionError when it did not end within ``timeout_s`` or ended without ``phoenix``."""
    pending = env.get(PENDING_ENV)
    if not pending:
        return
    marker = Path(pending)
    deadline = time.monotonic() + timeout_s
    while marker.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"Phoenix's background install still runs ({marker} exists)")
        time.sleep(0.2)  # polling a condition with a deadline
    if not phoenix.exists():
        log = marker.with_suffix(".log")
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        raise AssertionError(f"Phoenix's background install failed ({log}):\n{tail}")
