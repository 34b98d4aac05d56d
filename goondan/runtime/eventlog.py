"""``runtime-events.jsonl``: every span and ingress event of an instance, kept on disk.

:class:`RuntimeEventLog` is an :class:`~goondan.runtime.observe.EventSink`. ``handle`` only
puts the event's (already built) payload on a bounded queue; a background thread turns queued
payloads into JSON lines, appends them in batches and flushes once per batch. It never fsyncs:
the runtime events are diagnostics, and the turn's durable writes (the conversation) must not
wait behind them. When the queue is full an event is dropped and counted rather than blocking
a turn.

The file is bounded: before a write would take it past ``max_bytes`` it is renamed to
``runtime-events.1.jsonl`` (replacing the previous one) and a new file starts, so an instance
keeps at most about ``2 × max_bytes`` of events. Streamed fragments (``llm.delta``) and the
start events of steps, LLM calls and tool calls are not written (see ``_NOT_WRITTEN``). See docs/observability.md "Runtime events on disk".
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from goondan.llm.wire import encode_json
from goondan.runtime.events import LlmCallStarted, LlmDelta, RuntimeEvent, StepStarted, ToolCalled
from goondan.runtime.observe import EventSink
from goondan.types import JsonObject

__all__ = [
    "DEFAULT_MAX_BYTES",
    "EVENT_LOG_NAME",
    "ROTATED_LOG_NAME",
    "BackgroundBatcher",
    "RuntimeEventLog",
    "iter_event_log",
    "max_bytes_from_env",
]

EVENT_LOG_NAME = "runtime-events.jsonl"
ROTATED_LOG_NAME = "runtime-events.1.jsonl"
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
_QUEUE_LIMIT = 10_000
_BATCH_INTERVAL_S = 0.2
# Streamed fragments, and the start events of steps, LLM calls and tool calls: each of those
# spans is described whole by its end event (ids, parent, duration, attributes), so writing the
# start too would double the cost for nothing. turn.started and agent.requested are written:
# a turn or request still running (or cut short by a crash) shows in the tree.
_NOT_WRITTEN = frozenset({"llm.delta", "step.started", "llm.started", "tool.called"})
# The same, as classes: one identity test per event on the turn's path (``event.type`` is a property).
_NOT_WRITTEN_CLASSES = frozenset({LlmDelta, StepStarted, LlmCallStarted, ToolCalled})
_log = logging.getLogger("goondan.runtime")


def max_bytes_from_env(env: Mapping[str, str] = os.environ) -> int:
    """``GOONDAN_RUNTIME_EVENTS_MAX_BYTES`` (0 turns the log off), else the default."""
    raw = env.get("GOONDAN_RUNTIME_EVENTS_MAX_BYTES")
    try:
        return max(0, int(raw)) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


class BackgroundBatcher:
    """A bounded queue drained by a daemon thread in batches, every ``interval_s``.

    ``put`` is a ``deque.append`` (no lock, no wake-up): the producer — the event loop running
    a turn — pays next to nothing, and the thread wakes once per interval rather than once per
    item, so it hardly competes with the turn for the interpreter. Past ``limit`` queued items
    ``put`` drops and counts. ``flush`` and ``close`` wake the thread at once.
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
        self._put = 0
        self._done = 0
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"<BackgroundBatcher {self.name} queued={len(self._items)} dropped={self.dropped}>"

    def put(self, item: Any) -> bool:
        """Queue ``item``; ``False`` (and counted) when the queue is full or closed."""
        if self._stopping or len(self._items) >= self.limit:
            self.dropped += 1
            return False
        self._items.append(item)
        self._put += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return True

    def flush(self, timeout_s: float = 10.0) -> None:
        """Block until every item queued so far is processed."""
        target = self._put
        if self._thread is None:
            return
        self._wake.set()
        with self._cond:
            self._cond.wait_for(lambda: self._done >= target, timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Process what is queued, then stop the thread."""
        self._stopping = True
        if self._thread is not None:
            self._wake.set()
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            items = []
            while self._items:
                items.append(self._items.popleft())
            if items:
                started = time.thread_time()
                try:
                    self.process(items)
                except Exception:  # the owner logs its own failures; never kill the thread
                    _log.exception("%s: processing a batch failed", self.name)
                self.cpu_s += time.thread_time() - started
            with self._cond:
                self._done += len(items)
                self._cond.notify_all()
            if self._stopping and not self._items:
                return


class RuntimeEventLog(EventSink):
    """Appends an instance's runtime events to ``<dir>/runtime-events.jsonl`` from a thread."""

    skips = _NOT_WRITTEN

    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 queue_limit: int = _QUEUE_LIMIT, only: frozenset[str] | None = None) -> None:
        self.path = Path(directory) / EVENT_LOG_NAME
        self.rotated_path = Path(directory) / ROTATED_LOG_NAME
        self.max_bytes = max(1024, max_bytes)
        self.written = 0
        self.only = only  # event types to keep (None: every type but llm.delta)
        self._failed = False
        self._batcher = BackgroundBatcher("goondan-event-log", self._write_batch, limit=queue_limit,
                                          interval_s=_BATCH_INTERVAL_S)
        self._put = self._batcher.put

    def __repr__(self) -> str:
        return f"<RuntimeEventLog {self.path} written={self.written} dropped={self.dropped}>"

    @property
    def dropped(self) -> int:
        """Events not written because the queue was full."""
        return self._batcher.dropped

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the writer thread has spent writing batches."""
        return self._batcher.cpu_s

    def handle(self, event: RuntimeEvent) -> None:
        """Queue ``event`` (not ``llm.delta``) for the writer thread; drop it when the queue is full.

        The payload is built and serialised in the thread, off the turn's path."""
        if type(event) in _NOT_WRITTEN_CLASSES:
            return
        if self.only is not None and event.type not in self.only:
            return
        self._put(event)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, then stop the thread (blocking: call via ``asyncio.to_thread``)."""
        self._batcher.close(timeout_s)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until everything queued so far is written (for tests and ``inspect``)."""
        self._batcher.flush(timeout_s)

    # -- writer thread -----------------------------------------------------------------------------
    def _write_batch(self, events: list[RuntimeEvent]) -> None:
        if self._failed:
            return
        # encode_json: the C encoder made once, and a lone surrogate becomes U+FFFD instead of
        # failing the whole batch.
        lines = [encode_json(e.to_dict()) + b"\n" for e in events]
        try:
            # Opened per batch (every 200 ms at most), not kept: an instance's log holds no
            # descriptor between batches, however long the process lives.
            self._write(None, lines).close()
        except OSError:  # a full disk must not take the process down: the log is advisory
            _log.exception("runtime event log %s failed; events are no longer written", self.path)
            self._failed = True
            return
        self.written += len(lines)

    def _write(self, stream: Any, lines: list[bytes]) -> Any:
        """Append ``lines`` (one write per file), rotating whenever the next line would not fit."""
        if stream is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            stream = open(self.path, "ab")  # noqa: SIM115 - kept open by the writer thread
        size = stream.tell()
        chunk: list[bytes] = []
        for line in lines:
            if size and size + len(line) > self.max_bytes:
                stream.write(b"".join(chunk))
                stream.close()
                os.replace(self.path, self.rotated_path)
                stream = open(self.path, "ab")  # noqa: SIM115
                chunk, size = [], 0
            chunk.append(line)
            size += len(line)
        stream.write(b"".join(chunk))
        stream.flush()
        return stream


def iter_event_log(directory: Path) -> Iterator[JsonObject]:
    """The events of an instance directory, oldest first (the rotated file, then the current one).

    Lines that are not JSON objects (a torn last line) are skipped.
    """
    for path in (Path(directory) / ROTATED_LOG_NAME, Path(directory) / EVENT_LOG_NAME):
        try:
            handle = open(path, "rb")  # noqa: SIM115
        except OSError:
            continue
        with handle:
            for raw in handle:
                try:
                    value = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    yield value
