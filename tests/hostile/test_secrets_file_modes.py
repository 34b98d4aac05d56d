"""Issue 27 item 6, secrets past the mask: state is private to its user.

Repro: conversation files were ``0644`` (and their directories ``0755``) while logs were
``0600``; a conversation holds whatever the user and the tools said, keys included. Every file
goondan writes under the state root is now ``0600`` and every directory ``0700``, whatever the
umask (the test runs with umask 0).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.test_secrets_processes import _bundle, _env
from tests.support.hostile import run_cli


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)  # children inherit it: the most permissive umask there is
    try:
        yield
    finally:
        os.umask(previous)


def _too_open(root: Path) -> list[str]:
    found = []
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        if stat.S_ISSOCK(info.st_mode) or stat.S_ISLNK(info.st_mode):
            continue
        if info.st_mode & 0o077:
            found.append(f"{oct(info.st_mode & 0o777)} {path.relative_to(root)}")
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["repl", "run"])
def test_every_state_file_is_0600_and_every_directory_0700(
    tmp_path: Path, open_umask: None, command: str
) -> None:
    bundle = _bundle(tmp_path)
    root = tmp_path / "fresh-state"  # created by goondan itself
    env = {**_env(), "GOONDAN_STATE_ROOT": str(root)}
    result = run_cli(command, "-b", str(bundle), "--input", "go", env=env)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert any(root.rglob("base.jsonl")) and any(root.rglob("workspace.json"))
    too_open = _too_open(root)
    assert not too_open, "\n".join(too_open)


def test_an_instance_written_by_an_older_version_is_made_private_when_opened(
    tmp_path: Path,
) -> None:
    from goondan.workspace.store import InstanceStore

    with InstanceStore.open(tmp_path, "ws-1", "main", "k") as store:
        directory = store.paths.dir
    for path in [directory, *directory.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # what older versions left behind
    with InstanceStore.open(tmp_path, "ws-1", "main", "k"):
        pass
    too_open = _too_open(directory)
    assert not too_open, "\n".join(too_open)
