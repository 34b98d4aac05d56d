"""Trial counts for the long failure trials: a few under `make test`, all of them under `make soak`.

`make soak` sets ``GOONDAN_SOAK=1``; a kill or race test asks for its count with
``trials(quick, soak)`` and reports the figure it reached, so the closing note of a change can
quote the soak run while `make test` stays within its time budget on two cores.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["lost_and_duplicated", "records", "soaking", "trials"]


def soaking() -> bool:
    """True under `make soak` (``GOONDAN_SOAK=1``)."""
    return os.environ.get("GOONDAN_SOAK", "") not in ("", "0")


def trials(quick: int, soak: int) -> int:
    """The number of trials to run: ``soak`` under `make soak`, else ``quick``."""
    return soak if soaking() else quick


def records(record_dir: Path) -> str:
    """What the scripted agents (tests/support/ipc_agents.py) recorded, all processes together."""
    return "".join(p.read_text() for p in record_dir.glob("*.log"))


def lost_and_duplicated(record_dir: Path, trials: int) -> tuple[list[int], list[int]]:
    """The trials whose input ``<<p-i>>`` is missing from the records, and those recorded twice."""
    text = records(record_dir)
    counts = [text.count(f"<<p-{i}>>\n") for i in range(trials)]
    return [i for i, c in enumerate(counts) if c == 0], [i for i, c in enumerate(counts) if c > 1]
