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
import dataclasses
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

from goondan.llm.wire import encode_json
from goondan.runtime.events import LlmCallStarted, LlmDelta, RuntimeEvent, StepStarted, ToolCalled
from goondan.runtime.observe import EventSink
from goondan.text import dumps_compact
from goondan.types import JsonObject

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENCODED",
    "EVENT_LOG_NAME",
    "ROTATED_LOG_NAME",
    "BackgroundBatcher",
    "RuntimeEventLog",
    "encode_text",
    "encode_value",
    "event_line",
    "event_lines_module",
    "iter_event_log",
    "line_source",
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


# -- one event, one JSON line ---------------------------------------------------------------------
# ``event_line(e)`` is ``encode_json(e.to_dict()) + b"\n"`` to the byte (a property test checks
# it), written without the payload dict by one function per event class that reads the fields in
# wire order and joins pre-encoded keys with encoded values. Those functions are generated source
# (:func:`line_source`) kept in goondan/runtime/eventlines.py — compiled and cached like any
# module, never at run time; a test checks the file is current. Strings repeat from line to line
# (agent, instance, turn, trace and step ids, tool and model names), so their JSON form is kept
# in a bounded cache; so are small flat objects (``tokenUsage``). This is the writer thread's
# whole per-event cost (docs/observability.md "Cost of all this").
ENCODED: dict[Any, str] = {}
_ENCODED_LIMIT = 8192
# A flat object with string keys is cached by its keys, the types of its values and the values:
# 1, 1.0 and True are equal as keys but not as JSON, so the types are part of the key; floats are
# never cached (0.0 == -0.0), nor objects with other keys (True and 1 would share an entry).
_FLAT_TYPES = frozenset({str, int, bool, type(None)})
_STR_KEYS = frozenset({str})


def encode_text(text: str) -> str:
    """``text`` as a JSON string, remembered in :data:`ENCODED`."""
    if len(ENCODED) >= _ENCODED_LIMIT:
        ENCODED.clear()
    encoded: str = encode_basestring(text)
    ENCODED[text] = encoded
    return encoded


def encode_value(value: Any) -> str:
    """The JSON of any field value, as ``dumps_compact`` writes it: repeated strings and small
    flat objects through :data:`ENCODED`, finite floats by ``repr``."""
    kind = type(value)
    if kind is str:
        return ENCODED.get(value) or encode_text(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return repr(value)  # what json.dumps writes for a finite float
    if kind is dict and _STR_KEYS.issuperset(map(type, value)) and _FLAT_TYPES.issuperset(map(type, value.values())):
        key = (tuple(value), tuple(map(type, value.values())), tuple(value.values()))
        encoded = ENCODED.get(key)
        if encoded is None:
            if len(ENCODED) >= _ENCODED_LIMIT:
                ENCODED.clear()
            encoded = ENCODED[key] = dumps_compact(value)
        return encoded
    return dumps_compact(value)


# Fields whose value is new on (nearly) every line: encoded directly, not cached.
_UNIQUE = frozenset({"span_id", "timestamp", "tool_call_id", "correlation_id", "error_message", "text"})


def _value_expression(attr: str, annotation: str) -> str:
    """An expression encoding ``v`` (the value of ``attr``): the annotated type's fast path
    first, :func:`encode_value` for anything else."""
    if annotation.startswith("str"):
        fast = "encode_basestring(v)" if attr in _UNIQUE else "(cached(v) or encode_text(v))"
        return f"{fast} if type(v) is str else encode_value(v)"
    if annotation.startswith("int"):
        return "int_repr(v) if type(v) is int else encode_value(v)"
    if annotation.startswith("float"):
        return "float_repr(v) if type(v) is float and v - v == 0.0 else encode_value(v)"
    return "encode_value(v)"


def line_source(cls: type[RuntimeEvent]) -> str:
    """The source of ``cls``'s line function: ``to_dict``'s keys in its order, each value
    encoded into a local, the line made by one f-string."""
    annotations = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    heads = ['{"type":' + encode_basestring(name) + ',"timestamp":' for name in cls.TYPES]
    body = [f"def line_{cls.__name__}(e: Any) -> bytes:"]
    pieces: list[str] = []  # the f-string: constants and {locals}

    def constant(text: str) -> None:
        assert "'" not in text and "\\" not in text
        pieces.append(text.replace("{", "{{").replace("}", "}}"))

    def field(attr: str, key: str | None, omit: str | None = None) -> None:
        local = f"f_{attr}"
        body.append(f"    v = e.{attr}")
        expression = _value_expression(attr, annotations[attr])
        if omit is None:  # always written
            body.append(f"    {local} = {expression}")
            if key is not None:
                constant("," + encode_basestring(key) + ":")
        else:  # the key and value, or nothing
            prefix = "," + encode_basestring(key or "") + ":"
            body.append(f"    {local} = '' if {omit} else {prefix!r} + ({expression})")
        pieces.append("{" + local + "}")

    if len(heads) > 1:
        body.append(f"    head = {heads[1]!r} if e.failed else {heads[0]!r}")
    else:
        body.append(f"    head = {heads[0]!r}")
    pieces.append("{head}")
    field("timestamp", None)
    field("agent_name", "agentName")
    field("instance_key", "instanceKey")
    field("trace_id", "traceId", "not v")
    field("span_id", "spanId", "not v")
    field("parent_span_id", "parentSpanId", "v is None")
    timed = False
    for attr, key in cls._wire_fields:
        if key != "latencyMs":
            field(attr, key, "v is None")
            continue
        # to_dict repeats latencyMs as "duration" (its older name) after every other key
        timed = True
        body += [f"    v = e.{attr}",
                 "    if v is None:",
                 f"        f_{attr} = duration = ''",
                 "    else:",
                 f"        duration = {_value_expression(attr, annotations[attr])}",
                 f"        f_{attr} = {',' + encode_basestring(key) + ':'!r} + duration",
                 f"        duration = {',' + encode_basestring('duration') + ':'!r} + duration"]
        pieces.append("{f_" + attr + "}")
    if timed:
        pieces.append("{duration}")
    constant("}")
    body.append("    return f'" + "".join(pieces) + "\\n'.encode()")
    return "\n".join(body) + "\n"


def event_lines_module() -> str:
    """The whole text of goondan/runtime/eventlines.py (``scripts/gen_event_lines.py`` writes it)."""
    from goondan.runtime.events import _REGISTRY

    classes = sorted(set(_REGISTRY.values()), key=lambda c: c.__name__)
    head = (
        '"""Generated by scripts/gen_event_lines.py from the event classes: do not edit.\n\n'
        "One function per runtime event class: the event as a line of runtime-events.jsonl, the\n"
        "bytes of ``encode_json(event.to_dict()) + b\"\\\\n\"`` (see goondan/runtime/eventlog.py).\n"
        '"""\n\n'
        "from __future__ import annotations\n\n"
        "from json.encoder import encode_basestring\n"
        "from typing import Any\n\n"
        "from goondan.runtime import events\n"
        "from goondan.runtime.eventlog import ENCODED, encode_text, encode_value\n\n"
        "cached = ENCODED.get\n"
        "int_repr = int.__repr__\n"
        "float_repr = float.__repr__\n"
    )
    body = "\n\n".join(line_source(cls) for cls in classes)
    table = "LINES = {\n" + "".join(f"    events.{c.__name__}: line_{c.__name__},\n" for c in classes) + "}\n"
    return head + "\n\n" + body + "\n\n" + table


_LINES: dict[type, Any] | None = None


def event_line(event: RuntimeEvent) -> bytes:
    """``event`` as one line of ``runtime-events.jsonl``: ``encode_json(event.to_dict())`` and a
    newline, byte for byte (lone surrogates become U+FFFD there too)."""
    global _LINES
    if _LINES is None:
        from goondan.runtime.eventlines import LINES

        _LINES = LINES
    line = _LINES.get(type(event))
    try:
        if line is not None:
            encoded: bytes = line(event)
            return encoded
    except UnicodeEncodeError:  # a lone surrogate: the general path cleans it
        pass
    return encode_json(event.to_dict()) + b"\n"


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

    def handler_for(self, event_class: type[RuntimeEvent]) -> Callable[[RuntimeEvent], object] | None:
        """The queue's ``put`` itself for the classes written (one call per event on the turn's path)."""
        if event_class in _NOT_WRITTEN_CLASSES:
            return None
        if self.only is not None:
            return self.handle if not self.only.isdisjoint(event_class.TYPES) else None
        return self._put

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
        # event_line: a lone surrogate becomes U+FFFD instead of failing the whole batch.
        lines = []
        for event in events:
            try:
                lines.append(event_line(event))
            except (TypeError, ValueError, RecursionError) as exc:  # one bad value loses one event
                _log.warning("runtime event %s not written: %s", event.type, exc)
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
