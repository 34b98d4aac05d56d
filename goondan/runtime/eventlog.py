"""``runtime-events.jsonl``: every span and ingress event of an instance, kept on disk.

:class:`RuntimeEventLog` queues events (a full queue drops and counts them); a thread appends
each batch as ``encode_json(event.to_dict())`` lines, flushes and never fsyncs (diagnostics do
not hold up durable writes), rotating past ``max_bytes`` (docs/observability.md "Runtime
events on disk").

One :class:`EventLogWriter` thread per process writes the logs of all its instances. A pooled
or Ray host runs hundreds of instances; a thread each (``Thread.start`` waits in the host's
event loop until the OS has run it, and it woke five times a second while its instance lived)
kept two pooled hosts with 300 idle live instances at 58 ms of CPU per second (2 ms/s with one
thread per process) and cost ~24 KiB PSS per instance (docs/scaling.md, "Measured figures")."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from goondan.llm.wire import encode_json
from goondan.runtime.batcher import BackgroundBatcher
from goondan.runtime.events import RuntimeEvent
from goondan.runtime.observe import EventSink
from goondan.types import JsonObject
from goondan.workspace.files import private_dirs, private_opener

__all__ = ["DEFAULT_MAX_BYTES", "EVENT_LOG_NAME", "ROTATED_LOG_NAME", "BackgroundBatcher",
           "EventLogWriter", "RuntimeEventLog", "event_line", "iter_event_log",
           "max_bytes_from_env"]

EVENT_LOG_NAME = "runtime-events.jsonl"
ROTATED_LOG_NAME = "runtime-events.1.jsonl"
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
_QUEUE_LIMIT = 10_000
_BATCH_INTERVAL_S = 0.2
# An end event describes its span whole; turn.started and agent.requested are written so that
# a turn or request still running (or cut short by a crash) shows in the tree.
_NOT_WRITTEN = frozenset({"llm.delta", "step.started", "llm.started", "tool.called"})
_log = logging.getLogger("goondan.runtime")


def max_bytes_from_env(env: Mapping[str, str] = os.environ) -> int:
    """``GOONDAN_RUNTIME_EVENTS_MAX_BYTES`` (0 turns the log off), else the default."""
    raw = env.get("GOONDAN_RUNTIME_EVENTS_MAX_BYTES")
    try:
        return max(0, int(raw)) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


def event_line(event: RuntimeEvent) -> bytes:
    """``event`` as one line of ``runtime-events.jsonl`` (lone surrogates become U+FFFD)."""
    return encode_json(event.to_dict()) + b"\n"


class EventLogWriter:
    """The thread that appends the queued events of every :class:`RuntimeEventLog` using it, in
    batches (each log's events in the order they were queued); ``queue_limit`` bounds the events
    queued for all of them together."""

    def __init__(self, queue_limit: int = _QUEUE_LIMIT) -> None:
        self.batcher = BackgroundBatcher("goondan-event-log", self._write, limit=queue_limit,
                                         interval_s=_BATCH_INTERVAL_S)

    def __repr__(self) -> str:
        return f"<EventLogWriter {self.batcher!r}>"

    @staticmethod
    def _write(items: list[tuple[RuntimeEventLog, RuntimeEvent]]) -> None:
        by_log: dict[RuntimeEventLog, list[RuntimeEvent]] = {}
        for log, event in items:
            by_log.setdefault(log, []).append(event)
        for log, events in by_log.items():
            log._write_batch(events)


_shared: EventLogWriter | None = None


def shared_writer() -> EventLogWriter:
    """This process's writer (a forked child gets its own: the parent's thread is not in it)."""
    global _shared
    if _shared is None:
        _shared = EventLogWriter()
    return _shared


def _forget_shared_writer() -> None:
    global _shared
    _shared = None


os.register_at_fork(after_in_child=_forget_shared_writer)


class RuntimeEventLog(EventSink):
    """Appends an instance's runtime events to ``<dir>/runtime-events.jsonl`` from a thread."""

    skips = _NOT_WRITTEN

    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 only: frozenset[str] | None = None, writer: EventLogWriter | None = None
                 ) -> None:
        self.path = Path(directory) / EVENT_LOG_NAME
        self.rotated_path = Path(directory) / ROTATED_LOG_NAME
        self.max_bytes = max(1024, max_bytes)
        self.written = 0
        self.only = only  # event types to keep (None: every type not skipped)
        self.dropped = 0  # events not written because the queue was full (or the log closed)
        self._failed = False
        self._closed = False
        self._writer = writer or shared_writer()

    def __repr__(self) -> str:
        return f"<RuntimeEventLog {self.path} written={self.written} dropped={self.dropped}>"

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the writer thread has spent writing batches (of every log it writes)."""
        return self._writer.batcher.cpu_s

    def handle(self, event: RuntimeEvent) -> None:
        """Queue ``event`` for the writer thread (unless skipped); a full queue drops it."""
        kind = event.type
        if kind in _NOT_WRITTEN or (self.only is not None and kind not in self.only):
            return
        if self._closed:
            self.dropped += 1
            return
        self._writer.batcher.start()
        if not self._writer.batcher.put((self, event)):
            self.dropped += 1

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued; later events are dropped (blocking: call via
        ``asyncio.to_thread``). The writer thread goes on for the process's other logs."""
        self._closed = True
        self._writer.batcher.flush(timeout_s)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until everything queued so far is written (for tests and ``inspect``)."""
        self._writer.batcher.flush(timeout_s)

    # -- writer thread -----------------------------------------------------------------------------
    def _write_batch(self, events: list[RuntimeEvent]) -> None:
        if self._failed:
            return
        lines = []
        for event in events:
            try:
                lines.append(event_line(event))
            except (TypeError, ValueError, RecursionError) as exc:  # one bad value loses one event
                _log.warning("runtime event %s not written: %s", event.type, exc)
        try:
            self._append(lines)
            self.written += len(lines)
        except OSError:  # a full disk must not take the process down: the log is advisory
            _log.exception("runtime event log %s failed; events are no longer written", self.path)
            self._failed = True

    def _append(self, lines: list[bytes]) -> None:
        """Append ``lines`` (one write per file), rotating whenever the next line would not fit.
        Opened per batch: no descriptor is held between batches."""
        private_dirs(self.path.parent)
        stream = open(self.path, "ab", opener=private_opener)  # noqa: SIM115 - closed below
        try:
            size = stream.tell()
            chunk: list[bytes] = []
            for line in lines:
                if size and size + len(line) > self.max_bytes:
                    stream.write(b"".join(chunk))
                    stream.close()
                    os.replace(self.path, self.rotated_path)
                    stream = open(self.path, "ab", opener=private_opener)  # noqa: SIM115
                    chunk, size = [], 0
                chunk.append(line)
                size += len(line)
            stream.write(b"".join(chunk))
        finally:
            stream.close()


def iter_event_log(directory: Path) -> Iterator[JsonObject]:
    """The events of an instance directory, oldest first (the rotated file, then the current
    one); lines that are not JSON objects (a torn last line) are skipped."""
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
