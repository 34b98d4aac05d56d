"""Claim files: among any number of processes exactly one claims each id."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from goondan.workspace import claims
from goondan.workspace.claims import claim, read_claims


def test_claim_once_and_see_other_writers(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "started.jsonl"
    assert claim(path, "a") and not claim(path, "a")
    with path.open("ab") as handle:  # another process's claim, then a torn write of a crash
        handle.write(b'{"id":"b"}\n{"id":"tor')
    assert not claim(path, "b")
    assert claim(path, "c")
    assert read_claims(path) == {"a", "b", "c"}
    assert path.read_bytes().endswith(b'{"id":"tor\n{"id":"c"}\n')
    claims._seen.clear()  # a fresh process reads everything
    assert not claim(path, "c") and claim(path, "d")


def _claim_all(path: str, ids: list[str], out: str) -> None:
    won = [i for i in ids if claim(Path(path), i)]
    Path(out).write_text("\n".join(won))


def test_concurrent_processes_claim_each_id_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "started.jsonl"
    ids = [f"e{i}" for i in range(300)]
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(
            target=_claim_all,
            args=(str(path), ids if n % 2 == 0 else ids[::-1], str(tmp_path / f"{n}.txt")),
        )
        for n in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    won = [
        line for n in range(4) for line in (tmp_path / f"{n}.txt").read_text().splitlines() if line
    ]
    assert sorted(won) == sorted(ids)
    assert read_claims(path) == set(ids)


def _dead_owner(tmp_path: Path) -> str:
    """The owner token of a process that has exited (and been reaped)."""
    context = multiprocessing.get_context("fork")
    child = context.Process(target=lambda: None)
    child.start()
    assert child.pid is not None
    token = claims.owner_token(child.pid)
    child.join(30)
    return token


def test_a_reservation_of_a_live_owner_blocks_and_one_of_a_dead_owner_is_taken_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "started.jsonl"
    me = claims.owner_token()
    assert claims.owner_alive(me)
    assert claim(path, "a", owner=me)
    assert not claim(path, "a", owner=me)  # reserved by a live process
    assert read_claims(path) == {"a"}
    dead = _dead_owner(tmp_path)
    assert not claims.owner_alive(dead)
    with path.open("ab") as handle:  # a process reserved "b" and was SIGKILLed before its input
        handle.write(b'{"id":"b","owner":"' + dead.encode() + b'"}\n')
    assert read_claims(path) == {"a"}  # "b" is pending again
    assert claims.started_ids(path) == set()
    assert claim(path, "b", owner=me)  # taken over
    claims.confirm(path, "b")
    assert claims.started_ids(path) == {"b"} and not claim(path, "b", owner=me)


def test_a_dead_owners_reservation_whose_input_was_written_becomes_final(tmp_path: Path) -> None:
    path = tmp_path / "started.jsonl"
    dead = _dead_owner(tmp_path)
    path.write_bytes(b'{"id":"c","owner":"' + dead.encode() + b'"}\n')
    assert not claim(path, "c", owner=claims.owner_token(), written=lambda: True)
    assert claims.started_ids(path) == {"c"}
    claims._seen.clear()
    assert claims.claim_states(path) == {"c": claims.STARTED}


def test_compaction_drops_consumed_final_claims_and_a_cached_reader_starts_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "started.jsonl"
    me = claims.owner_token()
    for i in range(5):
        assert claim(path, f"e{i}", owner=me)
        claims.confirm(path, f"e{i}")
    assert claim(path, "live", owner=me)  # a reservation stays
    # their reservations and final claims
    assert claims.compact(path, {"e0", "e1", "e2", "e3"}) == 8
    assert claims.claim_states(path) == {"e4": claims.STARTED, "live": me}
    with path.open("ab") as handle:  # another process appends past this process's cached offset
        handle.write(b'{"id":"x1"}\n' * 40)
    assert not claim(path, "x1", owner=me)  # seen: the cache was dropped with the old file
    assert not claim(path, "e4", owner=me) and claim(path, "e0", owner=me)
    assert not list(tmp_path.glob("*.compact"))
