"""Leases with fencing tokens (goondan/storage/leases.py), one contract for every backend: the
JSONL state root and a real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from goondan.storage.leases import JsonlLeases, LeaseStore, StaleLeaseError

NAME = "orchestrator/ws/swarm"


@dataclass
class Backend:
    """A lease store and a fenced write: ``write(token, value)`` stores ``value`` only when
    ``token`` holds NAME; ``written()`` is what got stored."""

    leases: LeaseStore
    write: Callable[[int, str], None]
    written: Callable[[], list[str]]


def _jsonl(tmp_path: Path) -> Iterator[Backend]:
    leases = JsonlLeases.for_state_root(tmp_path)
    out = tmp_path / "writes.txt"

    def write(token: int, value: str) -> None:
        with leases.fenced(NAME, token), out.open("a") as f:
            f.write(value + "\n")

    def written() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    yield Backend(leases, write, written)


def _postgres(url: str) -> Iterator[Backend]:
    from goondan.storage.postgres.db import Database
    from goondan.storage.postgres.leases import PostgresLeases, fenced

    with Database.open(url, max_size=8) as db:
        db.run(lambda conn: conn.execute("CREATE TABLE writes (id serial, value text)"))

        def write(token: int, value: str) -> None:
            def work(conn: Any) -> None:
                fenced(conn, NAME, token)
                conn.execute("INSERT INTO writes (value) VALUES (%s)", (value,))

            db.run(work)

        def written() -> list[str]:
            rows = db.run(lambda c: c.execute("SELECT value FROM writes ORDER BY id").fetchall())
            return [r[0] for r in rows]

        yield Backend(PostgresLeases(db), write, written)


@pytest.fixture(params=["jsonl", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "jsonl":
        yield from _jsonl(tmp_path)
    else:
        yield from _postgres(request.getfixturevalue("postgres_url"))


def _poll(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def test_two_owners_race_and_exactly_one_gets_the_lease(backend: Backend) -> None:
    owners = [f"node-{i}" for i in range(6)]
    results: dict[str, int | None] = {}
    barrier = threading.Barrier(len(owners))

    def contend(owner: str) -> None:
        barrier.wait(10)
        results[owner] = backend.leases.acquire_lease(NAME, owner, 30)

    threads = [threading.Thread(target=contend, args=(o,)) for o in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    winners = {o: t for o, t in results.items() if t is not None}
    assert len(results) == len(owners)
    assert len(winners) == 1
    [(owner, token)] = winners.items()
    lease = backend.leases.lease(NAME)
    assert lease is not None
    assert (lease.owner, lease.token, lease.held) == (owner, token, True)


def test_the_holder_acquiring_again_keeps_its_token(backend: Backend) -> None:
    token = backend.leases.acquire_lease(NAME, "a", 30)
    assert token is not None
    assert backend.leases.acquire_lease(NAME, "a", 30) == token
    assert backend.leases.acquire_lease(NAME, "b", 30) is None


def test_an_expired_lease_is_taken_over_with_a_larger_token(backend: Backend) -> None:
    old = backend.leases.acquire_lease(NAME, "a", 0.3)
    assert old is not None
    assert backend.leases.acquire_lease(NAME, "b", 30) is None
    new = _poll(lambda: backend.leases.acquire_lease(NAME, "b", 30))
    assert new is not None and new > old
    assert backend.leases.renew_lease(NAME, old, 30) is False
    lease = backend.leases.lease(NAME)
    assert lease is not None and (lease.owner, lease.token) == ("b", new)


def test_renewing_keeps_the_lease_past_its_ttl(backend: Backend) -> None:
    token = backend.leases.acquire_lease(NAME, "a", 1.0)
    assert token is not None
    until = time.monotonic() + 1.3  # past the TTL; a stall of ~1 s would be a real loss
    while time.monotonic() < until:
        assert backend.leases.renew_lease(NAME, token, 1.0)
        assert backend.leases.acquire_lease(NAME, "b", 30) is None
        time.sleep(0.05)  # the renewal cadence (a twentieth of the TTL), not a wait
    backend.write(token, "still mine")
    assert backend.written() == ["still mine"]


def test_a_write_with_the_current_token_is_stored(backend: Backend) -> None:
    token = backend.leases.acquire_lease(NAME, "a", 30)
    assert token is not None
    backend.write(token, "one")
    backend.write(token, "two")
    assert backend.written() == ["one", "two"]


def test_a_write_with_a_stale_token_is_refused_after_a_takeover(backend: Backend) -> None:
    old = backend.leases.acquire_lease(NAME, "a", 0.2)
    assert old is not None
    backend.write(old, "before")
    new = _poll(lambda: backend.leases.acquire_lease(NAME, "b", 30))
    assert new is not None
    with pytest.raises(StaleLeaseError) as caught:
        backend.write(old, "from the old leader")
    assert caught.value.code == "E_STORE_LEASE_LOST"
    assert caught.value.current == new
    backend.write(new, "after")
    assert backend.written() == ["before", "after"]


def test_a_holder_that_stopped_renewing_past_its_ttl_cannot_write(backend: Backend) -> None:
    """The SIGSTOP case: the owner is paused past its TTL (here: it simply does not renew),
    nobody took over yet, and it wakes up and writes — refused: its lease ran out."""
    token = backend.leases.acquire_lease(NAME, "a", 0.2)
    assert token is not None
    assert _poll(lambda: not backend.leases.lease(NAME).held)  # type: ignore[union-attr]
    with pytest.raises(StaleLeaseError):
        backend.write(token, "late")
    assert backend.leases.renew_lease(NAME, token, 30) is False
    assert backend.written() == []


def test_release_frees_the_lease_at_once_and_ends_the_token(backend: Backend) -> None:
    token = backend.leases.acquire_lease(NAME, "a", 30)
    assert token is not None
    assert backend.leases.release_lease(NAME, token) is True
    assert backend.leases.release_lease(NAME, token) is False
    with pytest.raises(StaleLeaseError):
        backend.write(token, "after release")
    other = backend.leases.acquire_lease(NAME, "b", 30)
    assert other is not None and other > token


def test_tokens_grow_across_lease_names_and_are_never_reused(backend: Backend) -> None:
    tokens = []
    for i in range(3):
        for name in (NAME, f"other-{i}"):
            token = backend.leases.acquire_lease(name, f"owner-{i}", 30)
            assert token is not None
            tokens.append(token)
            assert backend.leases.release_lease(name, token)
    assert tokens == sorted(set(tokens))


def test_a_write_for_a_lease_never_granted_is_refused(backend: Backend) -> None:
    with pytest.raises(StaleLeaseError):
        backend.write(1, "nobody's")
    assert backend.leases.lease(NAME) is None


def test_a_non_positive_ttl_is_a_programming_error(backend: Backend) -> None:
    with pytest.raises(ValueError, match="ttl"):
        backend.leases.acquire_lease(NAME, "a", 0)
