"""goondan/codecache.py: dataclass methods compiled once, reused by later starts, identical."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = r"""
import dataclasses, sys
from goondan import codecache
codecache.install()

@dataclasses.dataclass(order=True, frozen=True)
class Point:
    x: int
    y: int = 3
    tags: list = dataclasses.field(default_factory=list, compare=False)

p = Point(1)
# compiled without codecache.py's own future flags: annotations are objects, not strings
annotations = Point.__init__.__annotations__
assert annotations == {"x": int, "y": int, "tags": list, "return": None}, annotations
assert repr(p) == "Point(x=1, y=3, tags=[])", repr(p)
assert p == Point(1, 3, ["other"]) and p < Point(2) and hash(p) == hash(Point(1))
try:
    p.x = 5
except dataclasses.FrozenInstanceError:
    pass
else:
    raise AssertionError("frozen")
print("NEW", len(codecache._new), "USED", len(codecache._used))
"""


def _run(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GOONDAN_CACHE_DIR": str(tmp_path)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("GOONDAN_NO_CACHE", None)
    env.update(extra)
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result


def _cache(tmp_path: Path) -> Path:
    return tmp_path / f"dataclass-methods.{sys.implementation.cache_tag}.bin"


def test_methods_are_compiled_once_and_behave_the_same(tmp_path: Path) -> None:
    first = _run(tmp_path)
    assert "USED 0" in first.stdout and "NEW 0" not in first.stdout
    assert _cache(tmp_path).is_file()
    second = _run(tmp_path)
    assert "NEW 0" in second.stdout and "USED 0" not in second.stdout


def test_a_corrupt_table_is_ignored_and_replaced(tmp_path: Path) -> None:
    _cache(tmp_path).write_bytes(b"\x00garbage")
    assert "NEW 0" not in _run(tmp_path).stdout
    assert "NEW 0" in _run(tmp_path).stdout


def test_no_table_without_bytecode_writing_or_with_the_cache_off(tmp_path: Path) -> None:
    _run(tmp_path, PYTHONDONTWRITEBYTECODE="1")
    assert not _cache(tmp_path).exists()
    off = _run(tmp_path, GOONDAN_NO_CACHE="1")
    assert "NEW 0 USED 0" in off.stdout and not _cache(tmp_path).exists()


def test_an_unwritable_location_is_harmless(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    _run(blocker / "sub")  # GOONDAN_CACHE_DIR below a regular file: nothing can be written


def test_importing_goondan_installs_nothing() -> None:
    code = "import dataclasses, goondan.cli, goondan.runtime; print('exec' in vars(dataclasses))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"
