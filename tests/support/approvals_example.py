"""A copy of ``examples/approvals`` to run real turns on: its ``files`` tool works in ``work/``,
where ``old.txt`` waits for the ``files__delete`` call that parks on an approval."""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["EXAMPLE", "approvals_bundle"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approvals"


def approvals_bundle(tmp_path: Path) -> Path:
    """``tmp_path/bundle``: the example with ``work/old.txt``."""
    root = tmp_path / "bundle"
    shutil.copytree(EXAMPLE, root)
    (root / "work").mkdir()
    (root / "work" / "old.txt").write_text("old")
    return root
