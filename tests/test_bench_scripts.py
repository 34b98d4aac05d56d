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


@pytest.fixture(scope="module")
def bench_store() -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module("bench_store")
    finally:
        sys.path.remove(str(SCRIPTS))


def test_bench_store_measures_raw_operations_and_turns_on_both_backends(
    bench_store: ModuleType, tmp_path: Path, postgres_url: str
) -> None:
    rows = {"append", "append + flush", "fenced append + flush", "lease renew"}
    raw = {"jsonl": bench_store.bench_jsonl(tmp_path, 3),
           "postgres": bench_store.bench_postgres(postgres_url, 3)}
    assert all(set(r) == rows and all(m > 0 for m, _ in r.values()) for r in raw.values())
    assert bench_store.server_settings(postgres_url)["synchronous_commit"] == "on"
    turns = asyncio.run(bench_store.turn_overheads(
        tmp_path, {"jsonl": None, "postgres": postgres_url}, 2))
    assert set(turns) == {"jsonl", "postgres"}
    assert all(t["K=0"] > 0 and t["K=20"] > 0 for t in turns.values())
    # what a turn commits on PostgreSQL: a 20-step turn more than a K=0 turn
    assert 0 < turns["postgres"]["K=0 commits"] < turns["postgres"]["K=20 commits"]


@pytest.mark.e2e
@pytest.mark.slow
def test_bench_store_measures_ingress_and_conversations_on_postgres(
    bench_store: ModuleType, tmp_path: Path, postgres_url: str
) -> None:
    assert asyncio.run(bench_store.ingress_events_per_s(
        tmp_path / "ingress", "postgres", postgres_url, 2, 1, 120)) > 0
    row = asyncio.run(bench_store.conversations(
        tmp_path / "conversations", "postgres", postgres_url, 2, 1, 120))
    assert (row["answered"], row["failed"], row["failedStarts"]) == (4, 0, 0)
    assert row["peakConnections"] >= 2 and row["eventsPerS"] > 0
