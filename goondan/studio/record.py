"""``runtime/studios/<pid>.json``: where a running studio listens, so that ``goondan inspect
trace`` can print a link that opens (docs/studio.md "Links"). The token is never written."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from goondan.swarm.state import same_process
from goondan.workspace.claims import pid_start_time
from goondan.workspace.files import private_dirs, private_opener

__all__ = ["clear_studio_record", "running_studio_url", "trace_hint", "write_studio_record"]


def _dir(state_root: Path) -> Path:
    return Path(state_root) / "runtime" / "studios"


def write_studio_record(state_root: Path, url: str) -> Path:
    """Record this process's studio at ``url`` (atomic replace); returns the file."""
    directory = _dir(state_root)
    private_dirs(directory)
    pid = os.getpid()
    path = directory / f"{pid}.json"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8", opener=private_opener) as handle:
        json.dump({"url": url, "pid": pid, "pidStart": pid_start_time(pid)}, handle)
    os.replace(tmp, path)
    return path


def clear_studio_record(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def running_studio_url(state_root: Path) -> str | None:
    """The address of a studio running over ``state_root`` (None when none runs)."""
    directory = _dir(state_root)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not isinstance(record.get("url"), str):
            continue
        pid, start = record.get("pid"), record.get("pidStart")
        if isinstance(pid, int) and same_process(pid, start if isinstance(start, int) else None):
            return str(record["url"])
    return None


def trace_hint(state_root: Path, trace_id: str) -> str:
    """The ``inspect trace`` line that opens the trace in the studio: the full link when a
    studio runs over this state root, else the command and the path (the port is unknown)."""
    url = running_studio_url(state_root)
    if url is not None:
        return f"open in studio: {url.rstrip('/')}/traces/{trace_id}"
    return f"open in studio: goondan studio → http://127.0.0.1:PORT/traces/{trace_id}"
