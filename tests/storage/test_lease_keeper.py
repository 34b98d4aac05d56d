"""LeaseKeeper (goondan/storage/keeper.py): one active, the others standing by; a standby takes
over when the active one releases, dies or cannot renew; the holder hears of every change."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import WorkspaceError
from goondan.storage.keeper import LeaseKeeper
from goondan.storage.leases import JsonlLeases, LeaseStore

NAME = "swarm/ws/main"
TTL = 0.5


@pytest.fixture(params=["jsonl", "postgres"])
def make_leases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """A factory of lease stores on one store (each its own handle, as separate processes)."""
    if request.param == "jsonl":
        yield lambda: JsonlLeases(tmp_path)
        return
    from goondan.storage.postgres.db import Database
    from goondan.storage.postgres.leases import PostgresLeases

    url = request.getfixturevalue("postgres_url")
    opened: list[Database] = []

    def make() -> PostgresLeases:
        db = Database.open(url, max_size=2)
        opened.append(db)
        return PostgresLeases(db)

    yield make
    for db in opened:
        db.close()


def _until(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return value


def test_one_keeper_is_active_and_a_release_hands_over_at_once(
    make_leases: Callable[[], LeaseStore],
) -> None:
    changes: list[int | None] = []
    a = LeaseKeeper(make_leases(), NAME, "a", ttl=30, interval=0.05,
                    on_change=changes.append).start()
    token_a = a.wait_active(10)
    assert token_a is not None and changes == [token_a]
    b = LeaseKeeper(make_leases(), NAME, "b", ttl=30, interval=0.05).start()
    try:
        assert b.wait_active(0.3) is None  # a holds it (30 s TTL)
        started = time.monotonic()
        a.stop()  # releases
        token_b = b.wait_active(10)
        assert token_b is not None and token_b > token_a
        assert time.monotonic() - started < 5  # not the 30 s TTL
        assert changes == [token_a, None]
    finally:
        b.stop()


def test_the_active_keeper_renews_past_its_ttl(make_leases: Callable[[], LeaseStore]) -> None:
    # Renewals every 0.1 s of a 2 s lease: only a stall of ~2 s (an fsync on a machine under
    # extreme load) could lose it — which would be a real loss, not a test artefact.
    ttl = 2.0
    a = LeaseKeeper(make_leases(), NAME, "a", ttl=ttl, interval=0.1).start()
    token = a.wait_active(10)
    assert token is not None
    b = LeaseKeeper(make_leases(), NAME, "b", ttl=ttl, interval=0.1).start()  # a standby
    try:
        until = time.monotonic() + 1.25 * ttl
        while time.monotonic() < until:
            assert a.token == token and b.token is None
            time.sleep(0.02)  # sampling the state while the keepers run
    finally:
        a.stop()
        b.stop()


def test_a_holder_that_dies_is_replaced_after_the_ttl(
    make_leases: Callable[[], LeaseStore],
) -> None:
    a = LeaseKeeper(make_leases(), NAME, "a", ttl=TTL).start()
    assert a.wait_active(10) is not None
    b = LeaseKeeper(make_leases(), NAME, "b", ttl=TTL).start()
    try:
        a.stop(release=False)  # as a SIGKILL: no release, no more renewals
        assert b.wait_active(10) is not None
    finally:
        b.stop()


def test_a_keeper_whose_lease_was_taken_hears_it_lost(
    make_leases: Callable[[], LeaseStore],
) -> None:
    changes: list[int | None] = []
    store = make_leases()
    a = LeaseKeeper(store, NAME, "a", ttl=30, interval=0.05, on_change=changes.append).start()
    try:
        token = a.wait_active(10)
        assert token is not None
        assert store.release_lease(NAME, token)  # behind its back: its next renewal fails
        assert make_leases().acquire_lease(NAME, "b", 30) is not None
        assert _until(lambda: changes == [token, None])
        assert a.token is None
    finally:
        a.stop()


class _Unreachable:
    """A lease store whose renewals fail, as when the database cannot be reached."""

    def __init__(self, inner: LeaseStore) -> None:
        self.inner = inner
        self.down = False

    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        return self.inner.acquire_lease(name, owner, ttl)

    def renew_lease(self, name: str, token: int, ttl: float) -> bool:
        if self.down:
            raise WorkspaceError("the store is down", code="E_STORE_UNAVAILABLE")
        return self.inner.renew_lease(name, token, ttl)

    def release_lease(self, name: str, token: int) -> bool:
        return self.inner.release_lease(name, token)

    def lease(self, name: str) -> Any:
        return self.inner.lease(name)


def test_a_keeper_cut_off_from_the_store_gives_up_by_its_own_deadline_not_before(
    make_leases: Callable[[], LeaseStore],
) -> None:
    store = _Unreachable(make_leases())
    changes: list[int | None] = []
    a = LeaseKeeper(store, NAME, "a", ttl=TTL, on_change=changes.append).start()
    try:
        token = a.wait_active(10)
        assert token is not None
        store.down = True
        cut = time.monotonic()
        assert _until(lambda: changes == [token, None])
        assert time.monotonic() - cut <= TTL + 3.0  # by the deadline (+ a loaded scheduler)
        assert time.monotonic() - cut >= TTL / 5  # and not at the first failed renewal
    finally:
        a.stop()


def test_a_renewal_interval_outside_the_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="interval"):
        LeaseKeeper(JsonlLeases(Path("/nonexistent")), NAME, "a", ttl=1, interval=1)
