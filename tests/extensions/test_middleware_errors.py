"""A middleware error carries a help URL like every other error (seed 004 §13.5.2, docs/errors.md).

The turn's ``TurnResult.error`` has ``helpUrl`` and ``goondan run`` prints a ``help:`` line under
``[CODE] message`` and ``suggestion:``, as it does for the CLI's own errors.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.errors import help_url
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.hostile_bundles import write_bundle

BROKEN = """
async def register(api):
    async def turn(ctx):
        return {}["missing"]
    api.pipeline.register("turn", turn)
"""


def test_a_middleware_error_in_the_turn_result_has_a_help_url(
    tmp_path: Path, state_root: Path
) -> None:
    """seed 004 §13.5.2: the error of a failing middleware has ``suggestion`` and ``helpUrl``."""
    bundle = write_bundle(tmp_path / "b", script=["x"], extensions={"broken": BROKEN})

    async def main() -> dict[str, object]:
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"a": ScriptedModel(["x"])}
        ) as rt:
            result = await rt.run_turn("a", "hi")
            assert result.error is not None
            return result.error

    error = run(main())
    assert error["code"] == "E_PIPELINE_MIDDLEWARE_FAILED" and error["suggestion"]
    assert error["helpUrl"] == help_url("E_PIPELINE_MIDDLEWARE_FAILED")


@pytest.mark.e2e
def test_goondan_run_prints_the_help_url_of_a_middleware_error(
    tmp_path: Path, state_root: Path
) -> None:
    """seed 004 §13.5.2: ``[CODE] message``, ``suggestion:`` and ``help:`` on stderr."""
    bundle = write_bundle(tmp_path / "b", script=["x"], extensions={"broken": BROKEN})
    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root)}
    proc = subprocess.run(
        [sys.executable, "-m", "goondan", "run", "-b", str(bundle), "--input", "hi"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=bundle,
        env=env,
        check=False,
    )
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    head = next(
        i for i, line in enumerate(lines) if line.startswith("[E_PIPELINE_MIDDLEWARE_FAILED]")
    )
    assert lines[head + 1].startswith("  suggestion: ")
    assert lines[head + 2] == f"  help: {help_url('E_PIPELINE_MIDDLEWARE_FAILED')}"
