"""Durable file primitives: full writes, atomic replace, directory fsync, tail and line counts.

Crash model: a SIGKILL loses nothing that reached the kernel (``os.write`` returned); a power
loss loses nothing that was ``fsync``-ed. Appends use one ``write`` per record batch on an
``O_APPEND`` descriptor so concurrent readers never see interleaved records, and a record cut
short by a crash is always the *last* line of the file (a torn tail, which readers drop).

State is private to its user (docs/security.md): every file is created ``0600``
(:data:`FILE_MODE`) and every directory ``0700`` (:func:`private_dirs`), whatever the umask.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from goondan.errors import WorkspaceCorruptError, WorkspaceError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "append_or_undo",
    "atomic_write",
    "count_lines",
    "fsync_dir",
    "io_error",
    "iter_lines_backwards",
    "private_dirs",
    "private_opener",
    "read_bytes",
    "read_json_file",
    "tighten",
    "write_all",
]

_BLOCK = 64 * 1024
FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dirs(path: Path) -> None:
    """``path.mkdir(parents=True, exist_ok=True)``, but each directory it creates is ``0700``
    (``mkdir``'s mode is cut by the umask and never reaches the parents). Existing directories
    are left as they are."""
    missing: list[Path] = []
    current = path
    while not os.path.lexists(current) and current.parent != current:
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            continue  # another process made it first
        os.chmod(directory, DIR_MODE)
    if not path.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", str(path))


def io_error(exc: OSError, path: Path, action: str) -> WorkspaceError:
    """Turn an ``OSError`` into a user-facing ``WorkspaceError`` (permission, disk full ...)."""
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return WorkspaceError(
            f"cannot {action} {path}: permission denied", code="E_WORKSPACE_PERMISSION",
            location=str(path),
            suggestion="fix the permissions of the state root, or choose another with --state-root",
        )
    return WorkspaceError(
        f"cannot {action} {path}: {exc.strerror or exc}", code="E_WORKSPACE_IO",
        location=str(path), suggestion="check free disk space and that the path is a directory",
    )


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a short write is not an error)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def append_or_undo(fd: int, data: bytes, *, fsync: bool = False) -> None:
    """Append ``data`` to the ``O_APPEND`` descriptor ``fd`` completely, or not at all.

    A write can fail half way (disk full, I/O error) after part of a record reached the file;
    left there, that partial line would sit in the *middle* of the file once the next append
    succeeds, and the file would read as corrupt. So on failure the file is cut back to its
    previous size before the error propagates. Only if that cut fails too does the partial
    write stay; the error then carries ``undo_failed = True`` so the caller can stop writing.
    """
    start = os.lseek(fd, 0, os.SEEK_END)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    except OSError as exc:
        try:
            os.ftruncate(fd, start)
        except OSError:
            exc.undo_failed = True  # type: ignore[attr-defined]
        raise


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or create inside it survives a power loss."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # some platforms cannot open directories; the rename is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tighten(*paths: Path) -> None:
    """Take group and other permissions off ``paths`` (state written by older versions was
    ``0644``/``0755``); a path that is missing or not ours is left alone."""
    for path in paths:
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if mode & 0o077 and not stat.S_ISLNK(mode):
                os.chmod(path, DIR_MODE if stat.S_ISDIR(mode) else FILE_MODE)


def private_opener(path: str, flags: int) -> int:
    """``open(path, mode, opener=private_opener)`` creates the file ``0600``."""
    return os.open(path, flags, FILE_MODE)


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data``: temp file in the same directory + fsync + rename + dir
    fsync."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise io_error(exc, path, "write") from exc
    if fsync:
        fsync_dir(path.parent)


def read_bytes(path: Path) -> bytes:
    """The file's content; ``b""`` when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
    except IsADirectoryError as exc:
        raise WorkspaceCorruptError(
            f"{path} is a directory, expected a file", location=str(path),
            suggestion="move the directory away; goondan recreates the file",
        ) from exc
    except OSError as exc:
        raise io_error(exc, path, "read") from exc


def read_json_file(path: Path) -> Any:
    """Parse a JSON file; ``None`` when missing; ``WorkspaceCorruptError`` when unreadable."""
    data = read_bytes(path)
    if not data and not path.exists():
        return None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WorkspaceCorruptError(
            f"{path}: invalid JSON ({exc})", location=str(path),
            suggestion="fix or remove the file (keep a copy first)",
        ) from exc


def count_lines(path: Path) -> int:
    """Number of lines (a final line without ``\\n`` counts), counted in blocks without parsing."""
    count = 0
    try:
        with path.open("rb") as handle:
            last = b"\n"
            while block := handle.read(1024 * 1024):
                count += block.count(b"\n")
                last = block[-1:]
            if last != b"\n":
                count += 1
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise io_error(exc, path, "read") from exc
    return count


def iter_lines_backwards(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, line)`` from the end of the file, reading blocks backwards.

    Lets ``inspect --limit N`` show the last N messages of a huge ``base.jsonl`` without reading
    (or parsing) the rest. Blank lines are skipped; the final line may lack its ``\\n``.
    """
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise io_error(exc, path, "read") from exc
    with handle:
        position = handle.seek(0, os.SEEK_END)
        # Pieces of the line being assembled, last piece first: a gigantic line is joined once
        # when its start is found, not re-copied for every block read (that was quadratic).
        pending: list[bytes] = []
        while position > 0:
            step = min(_BLOCK, position)
            position -= step
            handle.seek(position)
            block = handle.read(step)
            pieces = block.split(b"\n")
            pending.append(pieces[-1])
            if len(pieces) == 1:
                continue
            start = position + len(block) - len(pieces[-1])
            line = b"".join(reversed(pending))
            if line.strip():
                yield start, line
            for piece in reversed(pieces[1:-1]):
                start -= len(piece) + 1
                if piece.strip():
                    yield start, piece
            pending = [pieces[0]]
        line = b"".join(reversed(pending))
        if line.strip():
            yield 0, line
