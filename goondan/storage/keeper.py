"""Holding a lease over time: acquire when free, renew while held, notice when it is lost.

:class:`LeaseKeeper` runs one daemon thread per lease (store calls are blocking I/O). While it
does not hold the lease (a standby) it tries to acquire it every ``interval``; while it holds it
(active) it renews it every ``interval`` (default: a fifth of the TTL). It reports every change
to ``on_change(token)`` — a token when it became active, ``None`` when it lost the lease — from
its thread.

**When is the lease lost?** When a renewal answers ``False`` (it expired, or was taken over),
and also when renewals fail (the store cannot be reached) until the keeper's own conservative
deadline passes: the TTL counted from the moment the last successful renewal was *sent*, on
this machine's monotonic clock. After that moment the store may have given the lease to
someone else, so the keeper says it lost it even though it could not ask. Fencing makes the
store refuse the old token's writes regardless (docs/storage.md); the keeper lets the holder
stop trying before that.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from goondan.errors import GoondanError
from goondan.storage.leases import LeaseStore, check_ttl

__all__ = ["LeaseKeeper"]

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Keep lease ``name`` for ``owner`` (see the module docstring); :meth:`start`, :meth:`stop`."""

    def __init__(
        self,
        leases: LeaseStore,
        name: str,
        owner: str,
        *,
        ttl: float = 5.0,
        interval: float | None = None,
        on_change: Callable[[int | None], None] | None = None,
    ) -> None:
        self.leases = leases
        self.name = name
        self.owner = owner
        self.ttl = check_ttl(ttl)
        self.interval = interval if interval is not None else self.ttl / 5
        if not 0 < self.interval < self.ttl:
            raise ValueError(f"the renewal interval must be within (0, ttl), not {interval!r}")
        self._on_change = on_change
        self._token: int | None = None
        self._deadline = 0.0  # monotonic: when the held lease may have expired at the latest
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    @property
    def token(self) -> int | None:
        """The fencing token while this keeper holds the lease, else ``None`` — also past the
        deadline while a renewal is still under way (a store that does not answer)."""
        with self._changed:
            if self._token is not None and time.monotonic() >= self._deadline:
                return None
            return self._token

    def wait_active(self, timeout: float | None = None) -> int | None:
        """Block until the lease is held (its token) or ``timeout`` passes (``None``)."""
        with self._changed:
            self._changed.wait_for(lambda: self._token is not None, timeout)
            return self._token

    def start(self) -> LeaseKeeper:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"lease-keeper:{self.name}", daemon=True
            )
            self._thread.start()
        return self

    def halt(self) -> None:
        """Stop trying from now on without waiting for the thread (callable from
        ``on_change``): a holder that lost the lease and steps down must not take it again."""
        self._stop.set()

    def stop(self, *, release: bool = True) -> None:
        """Stop the thread; release the lease (a standby takes over at once) unless told not."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        token = self._token
        if token is not None:
            if release:
                with contextlib.suppress(GoondanError):
                    self.leases.release_lease(self.name, token)
            self._set(None)

    # -- the thread -----------------------------------------------------------------------

    def _set(self, token: int | None) -> None:
        with self._changed:
            if token == self._token:
                return
            self._token = token
            self._changed.notify_all()
        if self._on_change is not None:
            try:
                self._on_change(token)
            except Exception:  # the holder's callback must not stop the keeper
                log.exception("lease %s: on_change failed", self.name)

    def _step(self) -> None:
        sent = time.monotonic()
        token = self._token
        try:
            if token is None:
                token = self.leases.acquire_lease(self.name, self.owner, self.ttl)
                if token is not None:
                    self._deadline = sent + self.ttl
                    self._set(token)
            elif self.leases.renew_lease(self.name, token, self.ttl):
                self._deadline = sent + self.ttl
            else:
                self._set(None)
        except GoondanError as err:  # the store is unreachable: hold on until the deadline
            log.warning("lease %s: %s [%s]", self.name, err.message, err.code)
            if self._token is not None and time.monotonic() >= self._deadline:
                self._set(None)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._step()
            wait = self.interval
            if self._token is not None:  # never sleep past the deadline while holding
                wait = min(wait, max(0.0, self._deadline - time.monotonic()))
            self._stop.wait(wait)
