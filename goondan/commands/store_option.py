"""``--store STORE``: which store a command reads (docs/storage.md, docs/cli.md).

The one spelling of the option, shared by every command that reads a swarm's state (``status``,
``inspect``, ``fold``, ``instance``, ``approvals``; re-exported by
:mod:`goondan.commands.common`). A path is the JSONL state
root (the same as ``--state-root``); a ``postgresql://`` URL is a PostgreSQL store; absent, the
``GOONDAN_STORE`` variable, then the state root as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from goondan.storage.url import StoreLocation, parse_store

__all__ = ["describe_postgres", "resolve_store", "store_option", "store_summary_lines"]


def store_option(func: Any) -> Any:
    return click.option(
        "--store", "store", default=None, metavar="STORE",
        help="The store: a state-root path or a postgresql:// URL "
        "[env: GOONDAN_STORE; default: the state root].",
    )(func)


def resolve_store(store: str | None, state_root_of: Any) -> tuple[StoreLocation, Path]:
    """The parsed store and the state root to use: a JSONL path given as the store, else the
    state root resolved as before (``state_root_of()``)."""
    location = parse_store(store)
    if location.kind == "jsonl" and location.path is not None:
        return location, location.path
    return location, state_root_of()


def describe_postgres(location: StoreLocation) -> dict[str, Any]:
    """The store section of ``status`` for a PostgreSQL store (``E_STORE_…`` when unusable)."""
    from goondan.storage.postgres import require_postgres

    require_postgres()
    from goondan.storage.postgres.info import describe

    assert location.url is not None
    return describe(location.url)


def store_summary_lines(doc: dict[str, Any]) -> list[str]:
    """The text form of :func:`describe_postgres`'s document."""
    head = f"store: {doc['url']} (PostgreSQL, schema {doc['schemaVersion']:04d}"
    if doc["pendingMigrations"]:
        head += f", {len(doc['pendingMigrations'])} migration(s) to apply at the next start"
    lines = [head + ")"]
    for lease in doc["leases"]:
        if lease["held"]:
            lines.append(f"  lease {lease['name']}: {lease['owner']} (token {lease['token']}, "
                         f"{lease['expiresInSeconds']:.1f} s left)")
    return lines
