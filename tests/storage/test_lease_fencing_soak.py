"""Fencing under contention (docs/storage.md "Leases and fencing"): several contenders take a
short lease from one another again and again — some stop renewing mid-way, as a paused process
would — and each writes through the fence while it believes it leads. Whatever the
interleaving, the stored writes never go back to an older token: once a newer leader wrote, no
older one ever writes again. Both backends; ``trials(2, 100)`` rounds (``make soak``)."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.storage.leases import JsonlLeases, LeaseStore, StaleLeaseError
from tests.support.soak import trials

pytestmark = [pytest.mark.slow, pytest.mark.soak]

NAME = "swarm/soak"
TTL = 0.15
ROUND = 0.6  # seconds of contention per trial
CONTENDERS = 3

Writer = Callable[[int, str], None]


def _contend(me: str, leases: LeaseStore, write: Writer, done: threading.Event, seed: int,
             refused: list[int]) -> None:
    rng = random.Random(seed)
    token: int | None = None
    n = tenure = 0
    while not done.is_set():
        if token is None:
            token = leases.acquire_lease(NAME, me, TTL)
            tenure = 0
            if token is None:
                time.sleep(0.01)  # contender's polling cadence
                continue
        try:
            write(token, f"{me}:{n}")
            n += 1
            tenure += 1
        except StaleLeaseError:
            refused.append(token)
            token = None
            continue
        if tenure >= 5 or rng.random() < 0.1:
            time.sleep(TTL * 1.5)  # a pause past the TTL (SIGSTOP, GC): it keeps its token
        elif not leases.renew_lease(NAME, token, TTL):
            token = None


def _round(
    make: Callable[[], tuple[LeaseStore, Writer]], tokens: Callable[[], list[int]], seed: int
) -> list[int]:
    """Contend for at least ROUND seconds and until leadership changed hands and a paused
    leader was refused (at most 20 s: a loaded machine may need longer than ROUND)."""
    refused: list[int] = []
    done = threading.Event()
    threads = []
    for i in range(CONTENDERS):
        leases, write = make()
        threads.append(threading.Thread(
            target=_contend, args=(f"node-{i}", leases, write, done, seed * 10 + i, refused)
        ))
    for thread in threads:
        thread.start()
    start = time.monotonic()
    while time.monotonic() - start < 20:
        if time.monotonic() - start >= ROUND and refused and len(set(tokens())) >= 2:
            break
        time.sleep(0.05)  # polling the condition above
    done.set()
    for thread in threads:
        thread.join(30)
    return refused


def _never_back(tokens: list[int]) -> None:
    assert tokens, "nobody wrote"
    regressions = [(a, b) for a, b in itertools.pairwise(tokens) if b < a]
    assert regressions == []


@pytest.fixture
def jsonl(tmp_path: Path) -> Iterator[tuple[Callable[[], tuple[LeaseStore, Writer]], Any]]:
    out = tmp_path / "writes.txt"
    out.touch()

    def make() -> tuple[LeaseStore, Writer]:
        leases = JsonlLeases(tmp_path)  # its own descriptors: flock as between processes

        def write(token: int, value: str) -> None:
            with leases.fenced(NAME, token), out.open("a") as f:
                f.write(f"{token} {value}\n")

        return leases, write

    def tokens() -> list[int]:  # whole lines only: a writer may be in the middle of one
        return [int(line.split()[0]) for line in out.read_text().split("\n")[:-1]]

    yield make, tokens


@pytest.fixture
def postgres(postgres_url: str) -> Iterator[tuple[Callable[[], tuple[LeaseStore, Writer]], Any]]:
    from goondan.storage.postgres.db import Database
    from goondan.storage.postgres.leases import PostgresLeases, fenced

    opened: list[Database] = []
    main = Database.open(postgres_url)
    opened.append(main)
    main.run(lambda c: c.execute("CREATE TABLE writes (id bigserial, token bigint, v text)"))

    def make() -> tuple[LeaseStore, Writer]:
        db = Database.open(postgres_url, max_size=2)  # a contender: its own connections
        opened.append(db)

        def write(token: int, value: str) -> None:
            def work(conn: Any) -> None:
                fenced(conn, NAME, token)
                conn.execute("INSERT INTO writes (token, v) VALUES (%s, %s)", (token, value))

            db.run(work)

        return PostgresLeases(db), write

    def tokens() -> list[int]:
        rows = main.run(lambda c: c.execute("SELECT token FROM writes ORDER BY id").fetchall())
        return [int(r[0]) for r in rows]

    try:
        yield make, tokens
    finally:
        for db in opened:
            db.close()


@pytest.mark.parametrize("trial", range(trials(2, 100)))
@pytest.mark.parametrize("backend", ["jsonl", "postgres"])
def test_writes_never_go_back_to_an_older_leader(
    backend: str, trial: int, request: pytest.FixtureRequest
) -> None:
    make, tokens = request.getfixturevalue(backend)
    refused = _round(make, tokens, seed=trial)
    written = tokens()
    _never_back(written)
    # Not vacuous: leadership changed hands during the round, and a paused leader was refused.
    assert len(set(written)) >= 2
    assert refused
