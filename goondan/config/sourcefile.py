"""Reading a bundle's own files (YAML, entry modules, prompts, env files) without hanging.

A path in a bundle can name a FIFO, a character device or a socket. ``open()`` on a FIFO blocks
until a writer appears, and ``read()`` on ``/dev/zero`` never ends, so a plain ``read_bytes()``
after a ``stat()`` size check can hang ``goondan validate`` or eat gigabytes. Every read here:

* opens with ``O_NONBLOCK`` (a FIFO without a writer opens at once instead of blocking);
* checks ``fstat`` of the *opened* descriptor and refuses anything but a regular file (so a file
  swapped between a ``stat()`` and the ``open()`` cannot slip through);
* reads at most ``limit + 1`` bytes, so a file that grows past its checked size stays bounded.

See docs/configuration.md ("Files that are read").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "BASENAMES",
    "SKIP_DIRS",
    "FileTooLargeError",
    "NotRegularFileError",
    "display_path",
    "read_regular_file",
    "record_reads",
    "scan_yaml_files",
]

_CHUNK = 64 * 1024


class NotRegularFileError(OSError):
    """The path exists but is a FIFO, device, socket or directory, not a regular file."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({what})", str(path))
        self.what = what


class FileTooLargeError(OSError):
    """The file holds more than the caller's byte limit."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(errno.EFBIG, f"file is larger than {limit} bytes", str(path))
        self.limit = limit


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_regular_file(path: Path, *, limit: int) -> bytes:
    """The content of the regular file ``path``, at most ``limit`` bytes.

    Raises :class:`NotRegularFileError` for FIFOs, devices, sockets and directories,
    :class:`FileTooLargeError` past ``limit``, and ``OSError`` for everything else (missing,
    permission denied, name too long …). Never blocks on a special file.
    """
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_NOCTTY", 0)
    )
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(path, _kind(info.st_mode))
        if info.st_size > limit:
            raise FileTooLargeError(path, limit)
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # grew after the fstat
            raise FileTooLargeError(path, limit)
        data = b"".join(chunks)
        reads = getattr(_recording, "reads", None)
        if reads is not None:
            import hashlib

            reads[str(path)] = hashlib.sha256(data).hexdigest()
        return data
    finally:
        os.close(fd)


_recording = threading.local()


@contextlib.contextmanager
def record_reads() -> Iterator[dict[str, str]]:
    """Within the block, every file this thread reads here is recorded as ``{path: SHA-256 of
    the bytes read}``: the bundle cache keys an entry on exactly what the load parsed, so a file
    edited while it was being loaded cannot pair old results with new content."""
    previous = getattr(_recording, "reads", None)
    reads: dict[str, str] = {}
    _recording.reads = reads
    try:
        yield reads
    finally:
        _recording.reads = previous


SKIP_DIRS = frozenset({"dist", "node_modules", ".git", "__pycache__", ".venv", "venv", ".goondan"})
BASENAMES = frozenset({
    "goondan", "model", "models", "agent", "agents", "tool", "tools", "extension", "extensions",
    "connector", "connectors", "connection", "connections", "swarm", "swarms", "resources",
})


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when below it, else absolute."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def scan_yaml_files(root: Path, skip: set[Path]) -> list[Path]:
    """The bundle's own YAML files under ``root`` (docs/configuration.md), sorted by relative path;
    ``skip`` holds directories of path dependencies."""
    found: list[Path] = []
    for current, dirs, files in os.walk(root):  # symlinked directories are not followed
        here = Path(current)
        # A subdirectory with its own goondan.yaml is another bundle or package, not ours.
        dirs[:] = [
            d for d in dirs
            if d not in SKIP_DIRS and not d.startswith(".") and here / d not in skip
            and not (here / d / "goondan.yaml").is_file()
        ]
        for name in files:
            stem, dot, ext = name.rpartition(".")
            if dot and ext in ("yaml", "yml") and stem in BASENAMES:
                found.append(here / name)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())
