"""A blackholed OTLP endpoint does not hold ``goondan run`` up (issue 32 item 7).

The endpoint is a listener on 127.0.0.1 that accepts connections (the kernel's backlog) and
never reads or answers: an export to it waits for its timeout. The run answers, exits 0 within
a bound (the exit flush is bounded to 2 s; before the fix the run took ~16 s longer, silently),
and says so in one warning.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port whose connections are accepted by the kernel and never answered."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(64)
        yield held.getsockname()[1]


def test_a_blackholed_otlp_endpoint_costs_a_run_at_most_a_bounded_flush_and_one_warning(
        tmp_path: Path, state_root: Path, blackhole: int) -> None:
    bundle = tmp_path / "quickstart"
    shutil.copytree(REPO / "examples" / "quickstart", bundle)
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{blackhole}"}
    began = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            str(bundle),
            "--input",
            "hi",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    assert "offline demo model" in result.stdout
    assert took < 10, f"the run took {took:.1f} s with a blackholed OTLP endpoint"
    warnings = [line for line in result.stderr.splitlines() if "OTLP" in line]
    assert len(warnings) == 1, result.stderr
    assert "WARNING" in warnings[0] and f"127.0.0.1:{blackhole}" in warnings[0]
