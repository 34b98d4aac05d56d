"""Trial counts for the long failure trials: a few under `make test`, all of them under `make soak`.

`make soak` sets ``GOONDAN_SOAK=1``; a kill or race test asks for its count with
``trials(quick, soak)`` and reports the figure it reached, so the closing note of a change can
quote the soak run while `make test` stays within its time budget on two cores.
"""

from __future__ import annotations

import os

__all__ = ["soaking", "trials"]


def soaking() -> bool:
    """True under `make soak` (``GOONDAN_SOAK=1``)."""
    return os.environ.get("GOONDAN_SOAK", "") not in ("", "0")


def trials(quick: int, soak: int) -> int:
    """The number of trials to run: ``soak`` under `make soak`, else ``quick``."""
    return soak if soaking() else quick
