"""The Ray engine: agent instances hosted by Ray actors across a cluster (docs/scaling.md).

This package is importable without Ray; :func:`require_ray` imports it on first use and turns
a missing install into ``E_ENGINE_RAY_MISSING`` naming the extra.
"""

from __future__ import annotations

import importlib
from typing import Any

from goondan.errors import ConfigError

__all__ = ["RAY_EXTRA", "require_ray"]

RAY_EXTRA = "pip install 'pygoondan[ray]'"


def require_ray() -> Any:
    """The ``ray`` module, or ``E_ENGINE_RAY_MISSING`` when the extra is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ConfigError(
            "the Ray engine needs Ray, which is not installed",
            code="E_ENGINE_RAY_MISSING",
            suggestion=f"install the extra: {RAY_EXTRA} (or run without --engine ray)",
        ) from exc
