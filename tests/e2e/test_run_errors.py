"""``goondan run`` reports the entry agent's own failure as it is: code, suggestion, exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.runtime_harness import FAKE_KEY_ENV, fake_provider_bundle

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(120)]


def test_entry_agent_failure_keeps_code_suggestion_and_exit_code(
    tmp_path: Path, state_root: Path
) -> None:
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.error(401, "invalid api key"))
        bundle = fake_provider_bundle(tmp_path, fake.base_url("openai"))
        done = subprocess.run(
            [sys.executable, "-m", "goondan", "--state-root", str(state_root), "run",
             "--bundle", str(bundle), "--input", "hi"],
            capture_output=True, text=True, timeout=90, check=False,
            env={**os.environ, FAKE_KEY_ENV: "sk-run-errors-key"},
        )
    assert done.returncode == 6, done.stderr  # LlmAuthError's exit code, across the process
    assert "[E_LLM_AUTH]" in done.stderr and "invalid api key" in done.stderr
    assert "suggestion:" in done.stderr
    assert "the target agent's turn failed" not in done.stderr
    assert "sk-run-errors-key" not in done.stderr
