"""A committed turn whose extension state cannot be saved: exit 0, a warning, history kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.hostile_bundles import write_bundle

COUNTER = """
async def register(api):
    async def turn(ctx):
        n = (await api.state.get()) or 0
        await api.state.set(n + 1)
        return await ctx.next()
    api.pipeline.register("turn", turn)
"""


def _repl(bundle: Path, text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "repl", "-b", str(bundle), "--input", text],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_state_save_failure_after_commit_exits_0_with_a_warning(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = write_bundle(
        tmp_path / "b", script=["done"], extensions={"counter": COUNTER}, loop=True
    )
    first = _repl(bundle, "hi")
    assert first.returncode == 0, first.stderr
    [state_file] = state_root.rglob("extensions/*.json")
    assert state_file.read_text().strip() == "1"
    # The atomic replace writes <file>.tmp first: a directory there makes every save fail
    # (EISDIR) — a real I/O failure, injected without patching, and effective even as root.
    state_file.with_name(state_file.name + ".tmp").mkdir()
    second = _repl(bundle, "again")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "done"
    assert "WARNING" in second.stderr and "[E_EXTENSION_STATE]" in second.stderr
    assert "ERROR" not in second.stderr and "Traceback" not in second.stderr
    assert state_file.read_text().strip() == "1"  # the old state, untouched
    history = next(state_root.rglob("messages/base.jsonl")).read_text()
    assert history.count('"done"') == 2 and '"again"' in history  # the turn itself was committed
