"""From a parsed ``--store`` (:func:`goondan.storage.url.parse_store`) to the backend that
implements the storage contract there (docs/storage.md "Storage contract").

``open_backend(parse_store(value))``: a JSONL state root (the path given, else the state root
resolved as always: ``--state-root``, ``GOONDAN_STATE_ROOT``, ``~/.goondan/config.toml``,
``~/.goondan``) or a PostgreSQL store (connected, schema migrated; ``E_STORE_POSTGRES_MISSING``
without the extra). psycopg is imported only when a PostgreSQL store is opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from goondan.storage.contract import StorageBackend
from goondan.storage.jsonl import JsonlBackend
from goondan.storage.url import StoreLocation
from goondan.workspace.paths import resolve_state_root

__all__ = ["open_backend"]


def open_backend(location: StoreLocation, *, state_root: str | Path | None = None,
                  env: Mapping[str, str] | None = None, fence: Any = None) -> StorageBackend:
    """The backend at ``location``; ``state_root``/``env`` resolve a JSONL store given without
    a path; ``fence`` (PostgreSQL) runs first in every write of an open instance."""
    if location.kind == "jsonl":
        root = location.path
        if root is None:
            root = resolve_state_root(None if state_root is None else str(state_root),
                                      os.environ if env is None else env)
        return JsonlBackend(root)
    from goondan.storage.postgres import require_postgres

    require_postgres()
    from goondan.storage.postgres.backend import PostgresBackend

    assert location.url is not None
    return PostgresBackend.open(location.url, fence=fence)
