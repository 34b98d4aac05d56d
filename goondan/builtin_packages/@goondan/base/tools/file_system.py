"""Tool ``file-system`` of ``@goondan/base``: read, write, list and create files
(docs/base-package.md).

Exports ``read``, ``write``, ``list`` and ``mkdir``. Relative paths resolve against the agent's
workdir (``ctx.workdir``). Every path is *confined* (docs/base-package.md, "file-system
confinement"): after resolving ``..`` and every symlink it must lie inside the workdir or one of
the Tool config's ``allowPaths`` directories, else the call fails with ``E_BASE_PATH_OUTSIDE``
(``../x``, ``/etc/passwd``, ``/proc/self/environ``, a symlink pointing out). Every output
``path`` is the absolute, normalised (not symlink-resolved) path. Text is UTF-8: bytes that are
not valid UTF-8 read as U+FFFD. ``read`` returns at most the call's output cap
(``ctx.max_output_bytes``) whatever ``maxBytes`` asks for. ``read`` and ``write`` take regular
files only: a FIFO, device, socket or directory is refused without blocking. The handlers are plain
functions, so the executor runs them in a worker thread and file I/O never blocks the event loop.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from pathlib import Path
from typing import Any

from goondan.secrets import mask_cut
from goondan.tools import ToolContext, ToolFailure

from ._inputs import absolute, flag, invalid, required_text

DEFAULT_MAX_BYTES = 100_000


def _os_failure(exc: OSError, path: Path) -> ToolFailure:
    """Map an ``OSError`` to a failure the model can act on."""
    if isinstance(exc, FileNotFoundError):
        return ToolFailure(f"no such file or directory: {path}", code="E_BASE_PATH_NOT_FOUND",
                           suggestion="Check the path with file-system__list "
                           "(relative paths start at the workdir).")
    reason = exc.strerror or type(exc).__name__
    return ToolFailure(f"{reason}: {path}", code="E_BASE_FS",
                       suggestion="Check the path and its permissions.")


def _decode_prefix(data: bytes, truncated: bool) -> str:
    # A cut in the middle of a multi-byte character drops that partial character instead of
    # ending the text with U+FFFD.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=not truncated)


def allowed_roots(ctx: ToolContext) -> list[Path]:
    """The directories this call may touch: the workdir and the config's ``allowPaths``
    (relative ones start at the workdir), symlinks resolved."""
    config = getattr(ctx, "config", None) or {}
    extra = config.get("allowPaths") if hasattr(config, "get") else None
    if isinstance(extra, str):
        extra = [extra]
    roots = [Path(os.path.realpath(ctx.workdir))]
    for item in extra if isinstance(extra, list) else []:
        if isinstance(item, str) and item:
            roots.append(Path(os.path.realpath(ctx.resolve_path(item))))
    return roots


def confined(ctx: ToolContext, raw: str) -> Path:
    """``raw`` as an absolute, normalised path, after checking that its real location (every
    symlink resolved) is inside an allowed root; ``E_BASE_PATH_OUTSIDE`` otherwise."""
    if "\0" in raw:
        raise invalid("'path' must not contain NUL characters")
    path = absolute(ctx, raw)
    real = Path(os.path.realpath(path))
    for root in allowed_roots(ctx):
        if real == root or real.is_relative_to(root):
            return path
    raise ToolFailure(
        f"path is outside the agent's workdir: {path}"
        + (f" (resolves to {real})" if real != path else ""),
        code="E_BASE_PATH_OUTSIDE",
        suggestion="Use a path inside the workdir, or list the directory in the Tool's "
        "config allowPaths.",
    )


def _cap(ctx: ToolContext) -> int:
    cap = getattr(ctx, "max_output_bytes", None)
    return cap if isinstance(cap, int) and cap > 0 else DEFAULT_MAX_BYTES


def read(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """Read the first ``maxBytes`` bytes of a file: ``{path, size, truncated, content}``."""
    path = confined(ctx, required_text(input, "path"))
    max_bytes = input.get("maxBytes", DEFAULT_MAX_BYTES)
    if max_bytes is None:
        max_bytes = DEFAULT_MAX_BYTES
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise invalid("'maxBytes' must be a positive integer")
    # The model may ask for less than the cap, never for more.
    max_bytes = min(max_bytes, _cap(ctx))
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; only regular files are read
        # (a FIFO or device would block or never end). See docs/base-package.md.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise _not_regular(path, "Read")
            size = info.st_size
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise _os_failure(exc, path) from None
    truncated = len(data) > max_bytes
    content = _decode_prefix(data[:max_bytes], truncated)
    return {
        "path": str(path),
        "size": max(size, len(data)),
        "truncated": truncated,
        # A cut inside a secret (``.env`` read short) keeps no start of it (docs/security.md).
        "content": mask_cut(content) if truncated else content,
    }


def _not_regular(path: Path, verb: str) -> ToolFailure:
    return ToolFailure(
        f"not a regular file (a directory, FIFO, device or socket): {path}",
        code="E_BASE_FS",
        suggestion=f"{verb} regular files only; list directories with file-system__list.",
    )


def _open_for_write(path: Path, append: bool) -> int:
    """A descriptor on the regular file ``path`` (created if missing), never blocking.

    ``open(path, "w")`` on a FIFO waits for a reader; with ``O_NONBLOCK`` it fails at once
    (``ENXIO``) or, with a reader, opens and is refused by the ``fstat`` check before a byte is
    written. Truncation comes after that check, so nothing but a regular file is touched."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise _not_regular(path, "Write")  # a device is refused before it is even opened
    except FileNotFoundError:
        pass  # created below
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags | (os.O_APPEND if append else 0), 0o666)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP):
            raise _not_regular(path, "Write") from None  # swapped for a FIFO, socket or directory
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_regular(path, "Write")
        os.set_blocking(fd, True)
        if not append:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """Write (or append) text to a regular file, creating it and its parent directories:
    ``{path, size, written, append}``. A directory, FIFO, device or socket is refused."""
    path = confined(ctx, required_text(input, "path"))
    content = required_text(input, "content")
    append = flag(input, "append", False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(_open_for_write(path, append), "w", encoding="utf-8", newline="") as handle:
            handle.write(content)
            handle.flush()
            size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        raise _os_failure(exc, path) from None
    return {"path": str(path), "size": size, "written": True, "append": append}


def _entry(root: Path, entry: os.DirEntry[str], is_dir: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": entry.name,
        "path": Path(entry.path).relative_to(root).as_posix(),
        "type": "dir" if is_dir else "file",
    }
    if not is_dir:
        try:
            item["size"] = entry.stat().st_size
        except OSError:  # a dangling symlink: report the link itself
            item["size"] = entry.stat(follow_symlinks=False).st_size
    return item


def list_(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """List a directory: ``{path, recursive, count, entries: [{name, path, type, size?}]}``."""
    raw = input.get("path")
    if raw is not None and not isinstance(raw, str):
        raise invalid("'path' must be a string")
    root = confined(ctx, raw or ".")
    recursive = flag(input, "recursive", False)
    include_dirs = flag(input, "includeDirs", True)
    include_files = flag(input, "includeFiles", True)
    entries: list[dict[str, Any]] = []
    pending = [root]
    try:
        while pending:
            directory = pending.pop()
            with os.scandir(directory) as scan:
                for entry in scan:
                    # Symlinked directories are listed but not descended into (no cycles).
                    is_dir = entry.is_dir()
                    if is_dir and recursive and not entry.is_symlink():
                        pending.append(Path(entry.path))
                    if (include_dirs if is_dir else include_files):
                        entries.append(_entry(root, entry, is_dir))
    except OSError as exc:
        raise _os_failure(exc, root) from None
    entries.sort(key=lambda item: item["path"])
    return {"path": str(root), "recursive": recursive, "count": len(entries), "entries": entries}


def mkdir(ctx: ToolContext, input: dict[str, Any]) -> dict[str, Any]:
    """Create a directory (with its parents unless ``recursive`` is false)."""
    path = confined(ctx, required_text(input, "path"))
    recursive = flag(input, "recursive", True)
    try:
        if recursive:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.mkdir()
    except OSError as exc:
        raise _os_failure(exc, path) from None
    return {"path": str(path), "created": True, "recursive": recursive}


handlers = {"read": read, "write": write, "list": list_, "mkdir": mkdir}
