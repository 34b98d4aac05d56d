"""The PostgreSQL store (docs/storage.md), an optional extra: ``pip install 'pygoondan[postgres]'``.

This package is importable without the driver; its modules that talk to the database
(:mod:`.db`, :mod:`.leases` …) import psycopg, so callers reach them through
:func:`require_postgres`, which turns a missing install into ``E_STORE_POSTGRES_MISSING``.
"""

from __future__ import annotations

import importlib
from typing import Any

from goondan.errors import ConfigError

__all__ = ["POSTGRES_EXTRA", "require_postgres"]

POSTGRES_EXTRA = "pip install 'pygoondan[postgres]'"


def require_postgres() -> Any:
    """The ``psycopg`` module, or ``E_STORE_POSTGRES_MISSING`` when the extra is not installed."""
    try:
        importlib.import_module("psycopg_pool")
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise ConfigError(
            "the PostgreSQL store needs psycopg 3 and psycopg-pool, which are not installed",
            code="E_STORE_POSTGRES_MISSING",
            suggestion=f"install the extra: {POSTGRES_EXTRA} (or use a state-root path)",
        ) from exc
