"""The benchmark scripts still run against the code they measure (``make bench`` is not part of
``make test``, so an API change would otherwise break them silently).

Each test runs a script's own measuring function on a tiny workload; the figures themselves are
the scripts' business (docs/runtime.md "Performance")."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.fixture(scope="module")
def bench_turn() -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module("bench_turn")
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.mark.parametrize("fsync", [False, True])
def test_bench_turn_times_one_ledger_record(bench_turn: ModuleType, fsync: bool) -> None:
    assert bench_turn.ledger_record_us(fsync, count=20) > 0


def test_bench_turn_measures_every_turn_it_reports(
    bench_turn: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_turn, "TURNS", 4)
    monkeypatch.setattr(bench_turn, "LONG_TURNS", 2)
    figures = asyncio.run(bench_turn.measure(tmp_path))
    names = {"small", "large", "twenty", "small-nojournal", "twenty-nojournal"}
    assert set(figures) == names
    assert all(wall > 0 and cpu > 0 for wall, cpu in figures.values())
