"""Spans written into the store (PostgreSQL's ``goondan_spans``), so ``inspect trace --store``
shows one tree for a trace split across processes and machines (docs/observability.md
"Spans in the PostgreSQL store").

:class:`StoreSpanLog` is the event sink of an instance (or of an orchestrator, for its ingress
events) whose store keeps spans. Like the event log it only queues the event on the turn's
thread; one :class:`SpanStoreWriter` thread per process pairs each sink's events into spans
(:class:`~goondan.runtime.traces.SpanAssembler`, the one ``inspect trace`` uses on the JSONL
logs, fed the same events) and upserts the spans a batch touched — of all the sinks writing to
one table and workspace: a pooled host's hundreds of instances — in one transaction: a started
span as ``running``, again when it ends. The thread wakes every 200 ms, at once when a turn
ends, and :meth:`StoreSpanLog.close` writes what is queued.

A store that cannot be written never fails a turn: the failure is logged once per process as a
warning (then at debug level), and the spans not written are kept (up to ``PENDING_LIMIT`` per
sink) and sent again with the next batch — the upsert is idempotent.

**No message text.** A span object holds ids, names, durations, usage and errors; the fields
that can carry the text of a message are the error message of a tool call (the text of its
error result, which the conversation holds) and of an agent request (the callee's error, the
caller's tool result), and the ``reason`` of a wait for approval (an extension may write the
call's arguments into it): :func:`stored_span` keeps the errors' code and drops those texts.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Protocol

from goondan.runtime.batcher import BackgroundBatcher
from goondan.runtime.eventlog import RuntimeEventLog
from goondan.runtime.events import RuntimeEvent
from goondan.runtime.observe import EventSink
from goondan.runtime.traces import SpanAssembler, SpanRecord, touched_span_id
from goondan.types import JsonObject

__all__ = ["PENDING_LIMIT", "SpanStoreWriter", "SpanTable", "StoreSpanLog", "span_log_for",
           "stored_span"]

StoredSpan = tuple[JsonObject, int]
PENDING_LIMIT = 10_000
_QUEUE_LIMIT = 10_000
_INTERVAL_S = 0.2
_TURN_ENDS = frozenset({"turn.completed", "turn.failed"})
_TEXT_ERRORS = frozenset({"toolCall", "agentCall"})  # their error message is a tool result's
_TEXT_ATTRIBUTES = {"approval": ("reason",)}  # ctx.require_approval(reason=f"... {args} ...")
_log = logging.getLogger("goondan.runtime")


class SpanTable(Protocol):
    """Where spans are kept (:class:`goondan.storage.postgres.spans.PostgresSpans`)."""

    def upsert(self, workspace_id: str, spans: list[StoredSpan]) -> None: ...

    def by_span_id(self, workspace_id: str, span_ids: list[str]) -> list[StoredSpan]: ...


def stored_span(record: SpanRecord) -> JsonObject:
    """The span object the store keeps: ``record.to_dict()`` without message text (see the
    module docstring)."""
    doc = record.to_dict()
    error = doc.get("error")
    if record.kind in _TEXT_ERRORS and isinstance(error, dict) and error.get("message"):
        doc["error"] = {"code": error.get("code"), "message": None}
    for name in _TEXT_ATTRIBUTES.get(record.kind, ()):
        doc["attributes"].pop(name, None)
    return doc


class SpanStoreWriter:
    """The thread that writes the spans of every :class:`StoreSpanLog` of the process."""

    def __init__(self, queue_limit: int = _QUEUE_LIMIT, interval_s: float = _INTERVAL_S) -> None:
        self.batcher = BackgroundBatcher("goondan-span-store", self._write, limit=queue_limit,
                                         interval_s=interval_s)
        self.warned = False

    def __repr__(self) -> str:
        return f"<SpanStoreWriter {self.batcher!r}>"

    def _write(self, items: list[tuple[StoreSpanLog, RuntimeEvent]]) -> None:
        by_sink: dict[StoreSpanLog, list[RuntimeEvent]] = {}
        for sink, event in items:
            by_sink.setdefault(sink, []).append(event)
        groups: dict[tuple[Any, str], list[StoreSpanLog]] = {}
        for sink, events in by_sink.items():
            sink._assemble(events)
            if sink.pending:
                groups.setdefault((sink.table, sink.workspace_id), []).append(sink)
        for (table, workspace_id), sinks in groups.items():
            try:
                table.upsert(workspace_id, [row for s in sinks for row in s.pending.values()])
            except Exception as exc:  # never the turn's failure: kept for the next batch
                self.failed(table, exc)
                for sink in sinks:
                    sink._trim()
                continue
            for sink in sinks:
                sink.written += len(sink.pending)
                sink.pending.clear()

    def failed(self, table: Any, exc: BaseException) -> None:
        """A write failed: a warning the first time in this process, then debug."""
        level = logging.DEBUG if self.warned else logging.WARNING
        self.warned = True
        _log.log(level, "spans not written to %r (kept and sent again with the next batch; "
                 "turns go on): %s", table, exc)


_shared: SpanStoreWriter | None = None


def shared_span_writer() -> SpanStoreWriter:
    """This process's writer (a forked child gets its own)."""
    global _shared
    if _shared is None:
        _shared = SpanStoreWriter()
    return _shared


def _forget_shared_writer() -> None:
    global _shared
    _shared = None


os.register_at_fork(after_in_child=_forget_shared_writer)


class StoreSpanLog(EventSink):
    """Writes the spans of one instance's events (``only``: of these event types) into a
    :class:`SpanTable`, from the process's :class:`SpanStoreWriter` thread."""

    skips = RuntimeEventLog.skips  # the same events as runtime-events.jsonl: the same spans

    def __init__(self, table: SpanTable, workspace_id: str, *,
                 only: frozenset[str] | None = None, writer: SpanStoreWriter | None = None
                 ) -> None:
        self.table = table
        self.workspace_id = workspace_id
        self.only = only
        self.assembler = SpanAssembler()  # used by the writer thread only
        self.pending: dict[str, StoredSpan] = {}  # span id -> span not yet written
        self.written = 0  # span writes stored (a span is written at its start and its end)
        self.dropped = 0  # events not queued (full queue, closed) and spans given up
        self._closed = False
        self._writer = writer or shared_span_writer()

    def __repr__(self) -> str:
        return (f"<StoreSpanLog {self.workspace_id} written={self.written} "
                f"pending={len(self.pending)} dropped={self.dropped}>")

    def handle(self, event: RuntimeEvent) -> None:
        """Queue ``event`` for the writer thread (a full queue drops it); a turn's end wakes
        the thread."""
        kind = event.type
        if kind in self.skips or (self.only is not None and kind not in self.only):
            return
        if self._closed:
            self.dropped += 1
            return
        batcher = self._writer.batcher
        batcher.start()
        if not batcher.put((self, event)):
            self.dropped += 1
        elif kind in _TURN_ENDS:
            batcher.wake()

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until everything queued so far was handled (written, or kept after a failure)."""
        self._writer.batcher.flush(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued (blocking: call via ``asyncio.to_thread``); later events are
        dropped. The thread goes on for the process's other sinks."""
        self._closed = True
        self._writer.batcher.flush(timeout_s)

    # -- writer thread -----------------------------------------------------------------------------
    def _assemble(self, events: list[RuntimeEvent]) -> None:
        """Pair ``events`` into spans; each span they touched is pending (to be written)."""
        payloads = [event.to_dict() for event in events]
        self._adopt_waits(payloads)
        open_spans = self.assembler.open
        for payload in payloads:
            finished = self.assembler.feed(payload)
            key = touched_span_id(payload)
            record = finished if finished is not None else open_spans.get(key or "")
            if record is not None and record.start_unix_nanos >= 0:
                self.pending[record.span_id] = (stored_span(record), record.start_unix_nanos)

    def _adopt_waits(self, payloads: list[JsonObject]) -> None:
        """An ``approval.decided`` whose wait was opened by another process (the turn parked,
        its instance closed): the stored open wait is read back, so the decision closes it."""
        requested: set[str] = set()
        wanted: list[str] = []
        for payload in payloads:
            key = touched_span_id(payload)
            if key is None:
                continue
            if payload.get("type") == "approval.requested":
                requested.add(key)
            elif (payload.get("type") == "approval.decided" and key not in requested
                  and key not in self.assembler.open):
                wanted.append(key)
        if not wanted:
            return
        try:
            found = self.table.by_span_id(self.workspace_id, wanted)
        except Exception as exc:  # the store is unreachable: the wait stays open there
            self._writer.failed(self.table, exc)
            return
        for doc, start in found:
            if doc.get("kind") == "approval" and doc.get("status") == "running":
                self.assembler.open[str(doc["spanId"])] = SpanRecord.from_dict(doc, start)

    def _trim(self) -> None:
        """After a failed write: keep the newest ``PENDING_LIMIT`` spans."""
        while len(self.pending) > PENDING_LIMIT:
            del self.pending[next(iter(self.pending))]
            self.dropped += 1


def span_log_for(storage: Any, workspace_id: str, *,
                 only: frozenset[str] | None = None) -> StoreSpanLog | None:
    """The span sink of a store that keeps spans (its backend has ``spans()``), else None
    (the JSONL state root: spans are rebuilt from ``runtime-events.jsonl``)."""
    spans = getattr(storage, "spans", None)
    if not callable(spans):
        return None
    return StoreSpanLog(spans(), workspace_id, only=only)
