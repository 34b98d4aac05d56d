"""Durable file primitives: backwards line reading (inspect --limit) on any line lengths."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goondan.workspace import files
from goondan.workspace.files import iter_lines_backwards


def forwards(data: bytes) -> list[tuple[int, bytes]]:
    found, offset = [], 0
    for line in data.split(b"\n"):
        if line.strip():
            found.append((offset, line))
        offset += len(line) + 1
    return found[::-1]


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=80).map(lambda b: bytes(b"ab \n"[x % 4] for x in b)),
       block=st.integers(min_value=1, max_value=9))
def test_backwards_lines_equal_forwards_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              data: bytes, block: int) -> None:
    monkeypatch.setattr(files, "_BLOCK", block)
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    assert list(iter_lines_backwards(path)) == forwards(data)


def test_a_gigantic_line_is_read_backwards_in_one_piece(tmp_path: Path) -> None:
    # 8 MiB in 64 KiB blocks: was quadratic (every block re-copied the partial line).
    path = tmp_path / "base.jsonl"
    path.write_bytes(b"a\n" + b"x" * (8 << 20) + b"\nb\n")
    assert [(o, len(line)) for o, line in iter_lines_backwards(path)] == [
        ((8 << 20) + 3, 1), (2, 8 << 20), (0, 1)]
