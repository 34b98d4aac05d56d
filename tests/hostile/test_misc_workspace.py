"""Disk full / I/O errors while opening an instance: a user error, and the lock is let go.

The failure is injected at the OS boundary (the call that would hit the full disk), then the
test checks the documented outcome (docs/errors.md ``E_WORKSPACE_IO``): a ``WorkspaceError``,
never ``E_INTERNAL``, no descriptor left open and the instance lock free for the next opener.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from goondan.errors import WorkspaceError
from goondan.workspace import InstanceStore
from goondan.workspace import files as files_module
from goondan.workspace import locks as locks_module
from goondan.workspace import store as store_module
from goondan.workspace.locks import InstanceLock, is_locked


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _enospc(*_: object, **__: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _eio(*_: object, **__: object) -> None:
    raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize(("target", "name", "fail"), [
    (locks_module, "write_all", _enospc),        # writing the pid into .lock
    (os, "ftruncate", _eio),                     # truncating .lock
    (fcntl, "flock", _eio),                      # flock itself (e.g. ENOLCK on NFS)
    (store_module, "atomic_write", _enospc),      # metadata.json of a new instance
])
def test_instance_open_failure_is_workspace_io_and_frees_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: object, name: str,
    fail: Callable[..., None],
) -> None:
    before = _open_fds()
    with monkeypatch.context() as patch:
        patch.setattr(target, name, fail)
        with pytest.raises(WorkspaceError) as info:
            InstanceStore.open(tmp_path, "ws", "agent", "key")
    assert info.value.code == "E_WORKSPACE_IO"
    assert _open_fds() == before  # no descriptor kept for the life of the process
    lock_files = list(tmp_path.rglob(".lock"))
    assert lock_files and not any(is_locked(p) for p in lock_files)
    # The next opener (the disk has space again) gets the instance.
    with InstanceStore.open(tmp_path, "ws", "agent", "key") as store:
        store.load()


def test_lock_acquire_closes_fd_on_a_disk_full_pid_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = InstanceLock(tmp_path / ".lock", label="a:k")
    monkeypatch.setattr(locks_module, "write_all", _enospc)
    before = _open_fds()
    with pytest.raises(WorkspaceError) as info:
        lock.acquire()
    assert info.value.code == "E_WORKSPACE_IO" and "No space left" in info.value.message
    assert not lock.held and _open_fds() == before
    assert not is_locked(tmp_path / ".lock")


def test_io_error_mapping_is_not_internal() -> None:
    err = files_module.io_error(
        OSError(errno.ENOSPC, "No space left on device"), Path("/x"), "write"
    )
    assert err.code == "E_WORKSPACE_IO"
