"""Hostile input, issue 27 item 10 (part): ``file-system__write`` on a FIFO hung for 120 s.

Repro: ``write`` opened the path with ``open(path, "w")``; on a FIFO with no reader that blocks
until one appears (the executor's 120 s timeout ended it, leaving the worker thread stuck), on
a FIFO with a reader it wrote into the pipe, and a device or socket was written to or failed
with an obscure errno. Reads already took only regular files; writes and appends now do too,
without ever blocking in ``open``.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, ToolFailure, load_entry_module

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
fs = load_entry_module(TOOLS / "file_system.py").handlers


def ctx(workdir: Path, **config: Any) -> ToolContext:
    return ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir, config=config)


def bounded(call: Callable[[], object]) -> object:
    """``call()``'s result or exception, from a daemon thread; 20 s is a failure-only bound so a
    blocking ``open`` fails the test instead of hanging the suite."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "file-system__write blocked"
    return outcome[0]


def assert_not_regular(outcome: object) -> None:
    assert isinstance(outcome, ToolFailure), outcome
    assert outcome.code == "E_BASE_FS" and "not a regular file" in outcome.message, outcome.message


@pytest.mark.parametrize("append", [False, True])
def test_writing_to_a_fifo_without_a_reader_fails_at_once(tmp_path: Path, append: bool) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    try:
        outcome = bounded(
            lambda: fs["write"](ctx(tmp_path), {"path": "pipe", "content": "x", "append": append})
        )
    finally:
        # Let an old, blocked writer go: a reader opening the FIFO releases it.
        os.close(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))
    assert_not_regular(outcome)


def test_writing_to_a_fifo_with_a_reader_writes_nothing_into_it(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        outcome = bounded(lambda: fs["write"](ctx(tmp_path), {"path": "pipe", "content": "secret"}))
        try:
            leaked = os.read(reader, 100)
        except BlockingIOError:
            leaked = b""
    finally:
        os.close(reader)
    assert_not_regular(outcome)
    assert leaked == b""


def test_a_symlink_to_a_fifo_is_refused_too(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link").symlink_to(tmp_path / "pipe")
    try:
        outcome = bounded(lambda: fs["write"](ctx(tmp_path), {"path": "link", "content": "x"}))
    finally:
        os.close(os.open(tmp_path / "pipe", os.O_RDONLY | os.O_NONBLOCK))
    assert_not_regular(outcome)


def test_writing_to_a_socket_a_device_or_a_directory_is_refused(tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        assert_not_regular(
            bounded(lambda: fs["write"](ctx(tmp_path), {"path": "sock", "content": "x"}))
        )
    finally:
        server.close()
    (tmp_path / "dir").mkdir()
    assert_not_regular(bounded(lambda: fs["write"](ctx(tmp_path), {"path": "dir", "content": "x"})))
    # A device, reachable only because the bundle listed /dev in allowPaths.
    device = ctx(tmp_path, allowPaths=["/dev"])
    assert_not_regular(
        bounded(lambda: fs["write"](device, {"path": "/dev/null", "content": "x", "append": True}))
    )


def test_regular_files_are_still_created_replaced_and_appended(tmp_path: Path) -> None:
    context = ctx(tmp_path)
    out = fs["write"](context, {"path": "sub/a.txt", "content": "héllo"})
    assert out == {
        "path": str(tmp_path / "sub" / "a.txt"),
        "size": 6,
        "written": True,
        "append": False,
    }
    assert fs["write"](context, {"path": "sub/a.txt", "content": "+1", "append": True})["size"] == 8
    assert (tmp_path / "sub" / "a.txt").read_text(encoding="utf-8") == "héllo+1"
    assert fs["write"](context, {"path": "sub/a.txt", "content": "x"})["size"] == 1   # truncated
    assert (tmp_path / "sub" / "a.txt").read_text(encoding="utf-8") == "x"
    (tmp_path / "ro.txt").write_text("keep", encoding="utf-8")
    (tmp_path / "ro.txt").chmod(0o444)
    if os.geteuid() != 0:  # root writes read-only files anyway
        err = bounded(lambda: fs["write"](context, {"path": "ro.txt", "content": "x"}))
        assert isinstance(err, ToolFailure) and err.code == "E_BASE_FS"
