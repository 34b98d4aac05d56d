"""Leases with fencing tokens: one owner at a time per name, and writes refused once it lost it.

A lease is named (say ``orchestrator/<workspace>/<swarm>``) and held by one ``owner`` (a string
the caller chooses: host, pid, a random id) for ``ttl`` seconds at a time, judged by **the store's
clock** — the database server's for PostgreSQL, this machine's for the JSONL state root — never
by the caller's. :meth:`LeaseStore.acquire_lease` returns a **fencing token**: an integer that
grows with every grant, of any lease, and is never reused. The holder renews before the TTL
runs out; when it does not (it died, it was stopped, it is cut off), anyone may take the lease
over and gets a larger token.

**Fencing.** A token is valid exactly while its lease is held: from its grant until it expires
or is released. Every write made on behalf of a lease checks its token first, in the same
transaction (PostgreSQL: :func:`goondan.storage.postgres.leases.fenced`) or under the same file
lock (JSONL: :meth:`JsonlLeases.fenced`), and is refused with :class:`StaleLeaseError`
(``E_STORE_LEASE_LOST``) when the token is no longer valid — also when nobody took over yet:
an owner that did not renew in time has lost its lease, whatever it believes. A write that
passed the check holds the lease row (file) shared until it commits, so a takeover waits for it
and the write is ordered before the new owner's.

The JSONL implementation (:class:`JsonlLeases`) keeps every lease and the token counter in one
file, ``<stateRoot>/runtime/leases.json``, read and replaced (atomically, fsynced) under an
``flock`` of ``leases.lock``. It works between processes of **one machine** only: ``flock`` and
the clock are local (a state root on NFS gets neither right). PostgreSQL's
(:class:`goondan.storage.postgres.leases.PostgresLeases`) works across machines.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from goondan.errors import WorkspaceError
from goondan.workspace.files import atomic_write, io_error, private_dirs, read_json_file

__all__ = [
    "LEASE_LOST",
    "JsonlLeases",
    "Lease",
    "LeaseStore",
    "StaleLeaseError",
    "check_ttl",
]

LEASE_LOST = "E_STORE_LEASE_LOST"
ACQUIRE_WAIT = 1.0  # seconds a contender waits for writes in flight before answering None


class StaleLeaseError(WorkspaceError):
    """A write carried a fencing token whose lease is no longer held (``E_STORE_LEASE_LOST``)."""

    code = LEASE_LOST

    def __init__(self, name: str, token: int, *, current: int | None = None) -> None:
        why = "it expired or was released" if current in (None, token) else (
            f"it was taken over (token {current})"
        )
        super().__init__(
            f"lease {name!r}: token {token} is no longer valid ({why}); the write was refused",
            location=name,
            suggestion="this process lost the lease: stop writing, and acquire it again",
        )
        self.name = name
        self.token = token
        self.current = current


@dataclass(frozen=True)
class Lease:
    """The last grant of a lease; ``expires_in`` seconds by the store's clock (≤ 0: expired)."""

    name: str
    owner: str
    token: int
    expires_in: float

    @property
    def held(self) -> bool:
        return self.expires_in > 0


def check_ttl(ttl: float) -> float:
    if not ttl > 0:
        raise ValueError(f"a lease's ttl must be positive seconds, not {ttl!r}")
    return float(ttl)


@runtime_checkable
class LeaseStore(Protocol):
    """Leases with fencing tokens (module docstring); every backend offers it."""

    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        """A new token when the lease was free or expired; the current token when ``owner``
        holds it already (the lease is renewed); ``None`` when another owner holds it."""
        ...

    def renew_lease(self, name: str, token: int, ttl: float) -> bool:
        """Extend a held lease to ``ttl`` from now; ``False`` when the token is no longer valid."""
        ...

    def release_lease(self, name: str, token: int) -> bool:
        """End a held lease now (a standby may take it at once); ``False`` if already lost."""
        ...

    def lease(self, name: str) -> Lease | None:
        """The lease's last grant (held or not), ``None`` when it was never granted."""
        ...


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class JsonlLeases:
    """:class:`LeaseStore` in one file of a state root (single machine; module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "leases.json"
        self.lock_path = directory / "leases.lock"

    @classmethod
    def for_state_root(cls, state_root: Path) -> JsonlLeases:
        return cls(state_root / "runtime")

    # -- the file, under its lock --------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, kind: int, *, wait: float | None = None) -> Iterator[bool]:
        """Hold ``flock(kind)`` for the block; yields False when ``wait`` ran out first."""
        try:
            private_dirs(self.directory)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise io_error(exc, self.lock_path, "open the lease lock") from exc
        try:
            if wait is None:
                fcntl.flock(fd, kind)
                yield True
                return
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, kind | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.01)  # a write in flight holds it shared: it ends soon
            yield True
        finally:
            os.close(fd)  # drops the lock

    def _read(self) -> dict[str, Any]:
        data = read_json_file(self.path)
        if not isinstance(data, dict):
            return {"lastToken": 0, "leases": {}}
        data.setdefault("lastToken", 0)
        data.setdefault("leases", {})
        return data

    def _write(self, data: dict[str, Any]) -> None:
        atomic_write(self.path, json.dumps(data, sort_keys=True).encode("utf-8"), fsync=True)

    @staticmethod
    def _now() -> datetime:
        return datetime.now(UTC)

    # -- LeaseStore ---------------------------------------------------------------------------

    def acquire_lease(self, name: str, owner: str, ttl: float) -> int | None:
        ttl = check_ttl(ttl)
        with self._locked(fcntl.LOCK_EX, wait=ACQUIRE_WAIT) as locked:
            if not locked:
                return None
            data = self._read()
            now = self._now()
            current = data["leases"].get(name)
            live = current is not None and _parse(current["expiresAt"]) > now
            if live and current["owner"] != owner:
                return None
            if live:
                token = int(current["token"])
                acquired = current["acquiredAt"]
            else:
                token = int(data["lastToken"]) + 1
                data["lastToken"] = token
                acquired = _iso(now)
            data["leases"][name] = {
                "owner": owner, "token": token, "acquiredAt": acquired,
                "renewedAt": _iso(now), "expiresAt": _iso(now + timedelta(seconds=ttl)),
            }
            self._write(data)
            return token

    def renew_lease(self, name: str, token: int, ttl: float) -> bool:
        ttl = check_ttl(ttl)
        with self._locked(fcntl.LOCK_EX):
            data = self._read()
            now = self._now()
            current = data["leases"].get(name)
            if not self._valid(current, token, now):
                return False
            current["renewedAt"] = _iso(now)
            current["expiresAt"] = _iso(now + timedelta(seconds=ttl))
            self._write(data)
            return True

    def release_lease(self, name: str, token: int) -> bool:
        with self._locked(fcntl.LOCK_EX):
            data = self._read()
            now = self._now()
            current = data["leases"].get(name)
            if not self._valid(current, token, now):
                return False
            current["expiresAt"] = _iso(now)
            self._write(data)
            return True

    def lease(self, name: str) -> Lease | None:
        with self._locked(fcntl.LOCK_SH):
            current = self._read()["leases"].get(name)
        if current is None:
            return None
        left = (_parse(current["expiresAt"]) - self._now()).total_seconds()
        return Lease(name, str(current["owner"]), int(current["token"]), left)

    @contextlib.contextmanager
    def fenced(self, name: str, token: int) -> Iterator[None]:
        """Run the block (a write) only while ``token`` holds ``name``; ``StaleLeaseError`` if not.

        The lease file stays locked shared until the block ends, so no takeover happens during
        the write.
        """
        with self._locked(fcntl.LOCK_SH):
            current = self._read()["leases"].get(name)
            if not self._valid(current, token, self._now()):
                raise StaleLeaseError(
                    name, token, current=int(current["token"]) if current else None
                )
            yield

    @staticmethod
    def _valid(current: dict[str, Any] | None, token: int, now: datetime) -> bool:
        return (
            current is not None
            and int(current["token"]) == token
            and _parse(current["expiresAt"]) > now
        )
