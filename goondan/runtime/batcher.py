"""A bounded queue drained in batches by a daemon thread: the event log's and the exporter's."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundBatcher"]

_log = logging.getLogger("goondan.runtime")


class BackgroundBatcher:
    """A bounded queue drained by a daemon thread in batches, every ``interval_s``.

    ``put`` is a length test and a ``deque.append`` (no lock, no wake-up, no counter): the
    producer — the event loop running a turn — pays next to nothing, and the thread wakes once
    per interval rather than once per item, so it hardly competes with the turn for the
    interpreter. Past ``limit`` queued items ``put`` drops and counts. The thread starts at
    :meth:`start` (a sink calls it when it is attached, or at its first event); ``flush`` and
    ``close`` wake it at once.
    """

    def __init__(self, name: str, process: Callable[[list[Any]], None], *, limit: int,
                 interval_s: float) -> None:
        self.name = name
        self.process = process
        self.limit = limit
        self.interval_s = interval_s
        self.dropped = 0
        # CPU seconds the thread spent processing batches (time.thread_time): what the
        # background work costs, for benchmarks and diagnostics.
        self.cpu_s = 0.0
        self._items: collections.deque[Any] = collections.deque()
        self._capacity = limit  # 0 once closed: every put drops
        self._done = 0  # items processed (under _cond)
        self._in_flight = 0  # items taken from the queue, not yet processed (under _cond)
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<BackgroundBatcher {self.name} queued={len(self._items)} dropped={self.dropped}>"

    def start(self) -> None:
        """Start the thread (once; a closed batcher stays stopped)."""
        if self._thread is None and not self._stopping:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def put(self, item: Any) -> bool:
        """Queue ``item``; ``False`` (and counted) when the queue is full or closed."""
        items = self._items
        if len(items) < self._capacity:
            items.append(item)
            return True
        self.dropped += 1
        return False

    def wake(self) -> None:
        """Process what is queued now rather than at the end of the interval (no waiting)."""
        self._wake.set()

    def flush(self, timeout_s: float = 10.0) -> None:
        """Block until every item queued so far is processed."""
        if self._thread is None:
            return
        with self._cond:  # the thread takes items under the lock: none is counted twice or missed
            target = self._done + self._in_flight + len(self._items)
            self._wake.set()
            self._cond.wait_for(lambda: self._done >= target, timeout_s)

    @property
    def running(self) -> bool:
        """The thread is alive (a :meth:`close` that timed out leaves it running)."""
        return self._thread is not None and self._thread.is_alive()

    def close(self, timeout_s: float = 10.0) -> None:
        """Process what is queued, then stop the thread."""
        self._capacity = 0
        self._stopping = True
        if self._thread is not None:
            self._wake.set()
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            items = []
            with self._cond:
                while self._items:
                    items.append(self._items.popleft())
                self._in_flight = len(items)
            if items:
                started = time.thread_time()
                try:
                    self.process(items)
                except Exception:  # the owner logs its own failures; never kill the thread
                    _log.exception("%s: processing a batch failed", self.name)
                self.cpu_s += time.thread_time() - started
            with self._cond:
                self._done += len(items)
                self._in_flight = 0
                self._cond.notify_all()
            if self._stopping and not self._items:
                return
