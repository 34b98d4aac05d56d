"""Claim files: "this id was started" recorded once, by whichever process gets there first.

A claim file is JSON lines ``{"id": ...}``. :func:`claim` takes an exclusive ``fcntl.flock`` on
it, reads what other processes appended since this process last looked, and appends the id
only if nobody claimed it yet — so among any number of processes (an agent process orphaned by
a killed orchestrator and its replacement, say) exactly one gets ``True`` for an id. The
append is one ``O_APPEND`` write made before the lock is released: it survives a SIGKILL of
any process (not a power loss; it is not ``fsync``-ed). A torn last line left by a crash in
the middle of a write is ignored and the next record starts on a new line.

Used by the delivery guarantee of connector events (docs/connectors.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from pathlib import Path

from goondan.workspace.files import append_or_undo, io_error, private_dirs

__all__ = ["claim", "read_claims"]

_lock = threading.Lock()
# path → (bytes of complete lines already read, ids seen): each call reads only what is new.
_seen: dict[str, tuple[int, set[str]]] = {}


def _parse(data: bytes, into: set[str]) -> None:
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("id") is not None:
            into.add(str(value["id"]))


def read_claims(path: Path) -> set[str]:
    """Every id claimed in ``path`` (empty when it does not exist)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise io_error(exc, path, "read") from exc
    ids: set[str] = set()
    _parse(data[: data.rfind(b"\n") + 1], ids)
    return ids


def claim(path: Path, claim_id: str) -> bool:
    """Record ``claim_id`` in ``path`` unless it is there already; True when this call did.

    Raises ``WorkspaceError`` when the file cannot be used."""
    key = str(path)
    try:
        private_dirs(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise io_error(exc, path, "open") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with _lock:
            offset, ids = _seen.get(key, (0, set()))
            size = os.fstat(fd).st_size
            if size < offset:  # replaced or truncated: start over
                offset, ids = 0, set()
            os.lseek(fd, offset, os.SEEK_SET)
            data = os.read(fd, size - offset) if size > offset else b""
            complete = data.rfind(b"\n") + 1
            _parse(data[:complete], ids)
            offset += complete
            if claim_id in ids:
                _seen[key] = (offset, ids)
                return False
            torn = complete < len(data)
            line = (b"\n" if torn else b"") + json.dumps({"id": claim_id}, separators=(",", ":")).encode() + b"\n"
            append_or_undo(fd, line)
            ids.add(claim_id)
            _seen[key] = (size + len(line), ids)
            return True
    except OSError as exc:
        raise io_error(exc, path, "append to") from exc
    finally:
        os.close(fd)  # releases the flock
