"""``workspaces/<id>/workspace.json``: which bundle a workspace belongs to, for masking.

``inspect`` and ``logs`` print stored tool results and process output, which may hold a key a
tool printed. They mask the secrets of the bundle in the current directory and of running
swarms, but a workspace is often inspected from elsewhere, after its swarm stopped. So ``repl``
and ``run`` record, per workspace, the bundle root and the *names* of the environment
variables its secrets are read from — never a value::

    {"bundleRoot": "/home/me/bot", "secretEnv": ["OPENAI_API_KEY", "GOONDAN_SECRET_SLACK_TOKEN"]}

At inspect time the values are read from the environment and the bundle's ``.env`` files
(docs/security.md). Recording is best effort: a read-only state root never fails a run.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from goondan.workspace.files import FILE_MODE, private_dirs, write_all
from goondan.workspace.paths import StateLayout

__all__ = ["RECORD_FILE", "iter_workspace_records", "record_bundle_workspace", "record_workspace"]

RECORD_FILE = "workspace.json"


def record_workspace(
    state_root: Path, workspace_id: str, bundle_root: Path, secret_env: list[str]
) -> bool:
    """Write the record of ``workspace_id`` unless it already says the same; True if written."""
    path = StateLayout(Path(state_root)).workspace_dir(workspace_id) / RECORD_FILE
    record = {"bundleRoot": str(bundle_root), "secretEnv": sorted(set(secret_env))}
    data = (json.dumps(record, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    try:
        if path.read_bytes() == data:
            return False
    except OSError:
        pass
    tmp = path.with_name(f"{RECORD_FILE}.{os.getpid()}.tmp")  # two processes may record at once
    try:
        private_dirs(path.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True


def record_bundle_workspace(bundle: Any, state_root: Path) -> bool:
    """:func:`record_workspace` for a loaded :class:`~goondan.config.Bundle`."""
    from goondan.config.secretsources import secret_env_names
    from goondan.workspace.paths import workspace_id_for

    return record_workspace(state_root, workspace_id_for(bundle.root, bundle.package_name),
                            Path(bundle.root), secret_env_names(bundle))


def iter_workspace_records(state_root: Path) -> Iterator[dict[str, Any]]:
    """Every readable record under ``state_root``:
    ``{"workspaceId": str, "bundleRoot": str, "secretEnv": [str]}``."""
    base = StateLayout(Path(state_root)).workspaces_dir
    try:
        directories = sorted(base.iterdir())
    except OSError:
        return
    for directory in directories:
        try:
            record = json.loads((directory / RECORD_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not isinstance(record.get("bundleRoot"), str):
            continue
        names = record.get("secretEnv")
        yield {
            "workspaceId": directory.name,
            "bundleRoot": record["bundleRoot"],
            "secretEnv": [n for n in names if isinstance(n, str)]
            if isinstance(names, list)
            else [],
        }
