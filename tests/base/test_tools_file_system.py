"""Tool ``file-system`` of ``@goondan/base``: round trips, truncation, listing order, errors."""

from __future__ import annotations

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
handlers = load_entry_module(TOOLS / "file_system.py").handlers


def call(export: str, workdir: Path, args: dict[str, Any], **config: Any) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, workdir, config=config)
    result: dict[str, Any] = handlers[export](ctx, args)
    return result


def failure(export: str, workdir: Path, args: dict[str, Any], **config: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, workdir, args, **config)
    return info.value


def test_write_then_read_round_trip_creates_parents(tmp_path: Path) -> None:
    out = call("write", tmp_path, {"path": "a/b/note.txt", "content": "héllo\n", "extra": 1})
    target = tmp_path / "a" / "b" / "note.txt"
    assert out == {"path": str(target), "size": 7, "written": True, "append": False}
    out = call("write", tmp_path, {"path": "a/b/note.txt", "content": "more", "append": True})
    assert out["size"] == 11 and out["append"] is True
    assert call("read", tmp_path, {"path": "a/b/note.txt"}) == {
        "path": str(target), "size": 11, "truncated": False, "content": "héllo\nmore"}
    call("write", tmp_path, {"path": "a/b/note.txt", "content": "x"})
    assert target.read_text() == "x"


def test_paths_outside_the_workdir_need_allow_paths(tmp_path: Path) -> None:
    """Confinement (docs/base-package.md): outside the workdir only via config allowPaths."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    outside = tmp_path / "outside.txt"
    assert (
        failure("write", workdir, {"path": str(outside), "content": "abs"}).code
        == "E_BASE_PATH_OUTSIDE"
    )
    assert not outside.exists()
    call("write", workdir, {"path": str(outside), "content": "abs"}, allowPaths=[str(tmp_path)])
    assert outside.read_text() == "abs"
    assert call("read", workdir, {"path": "../outside.txt"}, allowPaths=[".."])["path"] == str(
        outside
    )


def test_read_truncates_at_max_bytes_without_splitting_a_character(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_bytes("abcdé".encode())   # é is two bytes: 5..6
    out = call("read", tmp_path, {"path": "t.txt", "maxBytes": 5})
    assert out == {"path": str(tmp_path / "t.txt"), "size": 6, "truncated": True, "content": "abcd"}
    out = call("read", tmp_path, {"path": "t.txt", "maxBytes": 6})
    assert out["truncated"] is False and out["content"] == "abcdé"
    (tmp_path / "bad.bin").write_bytes(b"ok\xff")
    assert call("read", tmp_path, {"path": "bad.bin"})["content"] == "ok\ufffd"


def test_read_and_write_errors(tmp_path: Path) -> None:
    assert failure("read", tmp_path, {"path": "missing.txt"}).code == "E_BASE_PATH_NOT_FOUND"
    assert failure("read", tmp_path, {"path": "."}).code == "E_BASE_FS"
    assert failure("read", tmp_path, {"path": "x", "maxBytes": 0}).code == "E_TOOL_INVALID_ARGS"
    assert failure("read", tmp_path, {}).code == "E_TOOL_INVALID_ARGS"
    assert failure("write", tmp_path, {"path": "x", "content": ""}).code == "E_TOOL_INVALID_ARGS"
    assert failure("write", tmp_path, {"path": "x", "content": 5}).code == "E_TOOL_INVALID_ARGS"
    assert (
        failure("write", tmp_path, {"path": "x", "content": "y", "append": "yes"}).code
        == "E_TOOL_INVALID_ARGS"
    )


def _tree(root: Path) -> None:
    (root / "b" / "deep").mkdir(parents=True)
    (root / "a.txt").write_text("12345")
    (root / "b" / "c.txt").write_text("1")
    (root / "b" / "deep" / "d.txt").write_text("")
    (root / "b-file").write_text("zz")


def test_list_flat_and_recursive_sorted_by_path(tmp_path: Path) -> None:
    _tree(tmp_path)
    out = call("list", tmp_path, {})
    assert out["path"] == str(tmp_path) and out["recursive"] is False
    assert out["entries"] == [
        {"name": "a.txt", "path": "a.txt", "type": "file", "size": 5},
        {"name": "b", "path": "b", "type": "dir"},
        {"name": "b-file", "path": "b-file", "type": "file", "size": 2},
    ]
    assert out["count"] == 3
    out = call("list", tmp_path, {"recursive": True})
    assert [e["path"] for e in out["entries"]] == [
        "a.txt", "b", "b-file", "b/c.txt", "b/deep", "b/deep/d.txt"]
    assert out["count"] == 6
    files = call("list", tmp_path, {"path": "b", "recursive": True, "includeDirs": False})
    assert [(e["name"], e["path"]) for e in files["entries"]] == [
        ("c.txt", "c.txt"),
        ("d.txt", "deep/d.txt"),
    ]
    dirs = call("list", tmp_path, {"recursive": True, "includeFiles": False})
    assert [e["path"] for e in dirs["entries"]] == ["b", "b/deep"]


def test_list_errors(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert failure("list", tmp_path, {"path": "missing"}).code == "E_BASE_PATH_NOT_FOUND"
    assert failure("list", tmp_path, {"path": "f"}).code == "E_BASE_FS"
    assert failure("list", tmp_path, {"recursive": 1}).code == "E_TOOL_INVALID_ARGS"


def test_mkdir_recursive_and_not(tmp_path: Path) -> None:
    out = call("mkdir", tmp_path, {"path": "x/y/z"})
    assert out == {"path": str(tmp_path / "x" / "y" / "z"), "created": True, "recursive": True}
    assert call("mkdir", tmp_path, {"path": "x/y/z"})["created"] is True   # exists: fine
    assert call("mkdir", tmp_path, {"path": "x/n", "recursive": False})["recursive"] is False
    assert (tmp_path / "x" / "n").is_dir()
    assert failure("mkdir", tmp_path, {"path": "x/n", "recursive": False}).code == "E_BASE_FS"
    assert (
        failure("mkdir", tmp_path, {"path": "p/q", "recursive": False}).code
        == "E_BASE_PATH_NOT_FOUND"
    )
