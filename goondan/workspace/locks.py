"""One writer per instance: an advisory ``fcntl.flock`` on ``<instance>/.lock``.

``flock`` locks belong to the open file description, so a second opener is refused even inside
the same process, and the kernel drops the lock when the holder dies (SIGKILL included) — no
stale-lock cleanup is ever needed. The holder writes its pid into the file so the refusal can
name it (``E_INSTANCE_LOCKED``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from goondan.errors import InstanceLockedError
from goondan.workspace.files import io_error, write_all

__all__ = ["InstanceLock", "is_locked", "lock_holder"]


def lock_holder(path: Path) -> int | None:
    """The pid written in a lock file, if any."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def is_locked(path: Path) -> bool:
    """True when another open file description holds the lock (checked without waiting)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops a lock we may have just taken
    return False


class InstanceLock:
    """An exclusive, non-blocking lock; use :meth:`acquire` and :meth:`release`."""

    def __init__(self, path: Path, *, label: str) -> None:
        self.path = path
        self.label = label
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise ``InstanceLockedError`` naming the holder's pid.

        Any other failure (no lock support, disk full while writing the pid …) is a
        ``WorkspaceError`` (``E_WORKSPACE_IO`` / ``E_WORKSPACE_PERMISSION``), and the descriptor
        is closed on every failure path, so a failed open never keeps the lock held.
        """
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise io_error(exc, self.path, "create the lock file") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = lock_holder(self.path)
            holder = f"process {pid}" if pid else "another process"
            raise InstanceLockedError(
                f"instance {self.label} is in use by {holder}",
                pid=pid, location=str(self.path),
                suggestion="stop that process first (goondan instance list shows instances); "
                "only one process may write an instance",
            ) from None
        except OSError as exc:
            os.close(fd)
            raise io_error(exc, self.path, "lock") from exc
        try:
            os.ftruncate(fd, 0)
            write_all(fd, f"{os.getpid()}\n".encode("ascii"))
        except OSError as exc:
            os.close(fd)  # drops the lock with the descriptor
            raise io_error(exc, self.path, "write the lock file") from exc
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)

    def __repr__(self) -> str:
        return f"InstanceLock(path={str(self.path)!r}, held={self.held})"
