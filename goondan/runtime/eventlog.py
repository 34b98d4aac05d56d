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
from goondan.types import JsonObject, remember
from goondan.workspace.files import private_dirs, private_opener

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ENCODED",
    "EVENT_LOG_NAME",
    "OBJECTS",
    "ROTATED_LOG_NAME",
    "BackgroundBatcher",
    "RuntimeEventLog",
    "add_piece",
    "encode_object",
    "encode_text",
    "encode_value",
    "event_line",
    "event_lines_module",
    "fill_caches",
    "general_line",
    "iter_event_log",
    "line_source",
    "max_bytes_from_env",
    "piece",
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
# wire order. Those functions are generated source (:func:`line_source`) kept in
# goondan/runtime/eventlines.py — compiled and cached like any module, never at run time; a test
# checks the file is current.
#
# Most values repeat from line to line (agent, instance, trace, turn, step and parent span ids,
# tool and model names, small counts), so each such key has a cache of its whole piece — value
# -> ``,"key":<JSON>`` or ``""`` where the key is left out — and a line is one f-string of cache
# subscripts and the few values new on every line (span id, timestamp, latency). A value missing
# from its cache raises ``KeyError``: :func:`fill_caches` adds it and the line is made again; the
# ids new for every turn or step are looked up with ``get`` and added where met (:func:`add_piece`). A
# string cache holds only ``str`` and ``None`` keys and an integer cache only ``int`` keys (looked
# up after a type test), so ``True`` never finds the entry of ``1``; any other value (or an
# unhashable one) takes the general path. This is the writer thread's whole per-event cost
# (docs/observability.md "Cost of all this").
ENCODED: dict[Any, str] = {}
_ENCODED_LIMIT = 8192
_PIECES_LIMIT = 4096  # entries per key's cache before it is cleared
# Small objects other than TokenUsage.to_dict's usual shape (which encode_object writes
# directly) are cached by a tuple of their values, their keys and the types of both, in order:
# equal tuples mean the same JSON once the types tell 1, 1.0 and True apart (and a str subclass
# from a str) and the order is the key order. Only objects whose keys are strings and whose
# values are strings, integers, booleans or null are kept: equality would confuse a key ``True``
# with ``1`` (written "true" and "1"), ``0.0`` with ``-0.0``, and tuples holding either; a query
# with one of those never meets an entry with the same types, so it misses.
OBJECTS: dict[tuple[Any, ...], str] = {}
_EXACT = frozenset({str, int, bool, type(None)})
_SMALL_OBJECT = 8  # keys at most
_PROMPT, _COMPLETION, _TOTAL = "prompt", "completion", "total"  # TokenUsage.to_dict's keys


def encode_text(text: str) -> str:
    """``text`` as a JSON string, remembered in :data:`ENCODED`."""
    return remember(ENCODED, text, encode_basestring(text), _ENCODED_LIMIT)


def encode_object(value: Any) -> str:
    """The JSON of an object field's value (``tokenUsage``): ``TokenUsage.to_dict()``'s usual
    shape written directly, other small dicts through :data:`OBJECTS`."""
    if type(value) is not dict:
        return encode_value(value)
    if len(value) == 3:
        # {"prompt", "completion", "total"} of ints, as TokenUsage.to_dict makes it: its keys are
        # the interned constants (identity, so no str subclass or other key passes for them),
        # and exact ints (not bool) print as json.dumps prints them. The counts differ from
        # step to step in a real run, so a cache would mostly miss here.
        first, second, third = value
        if first is _PROMPT and second is _COMPLETION and third is _TOTAL:
            prompt, completion, total = value.values()
            if type(prompt) is int and type(completion) is int and type(total) is int:
                return f'{{"prompt":{prompt},"completion":{completion},"total":{total}}}'
    elif len(value) > _SMALL_OBJECT:
        return dumps_compact(value)
    key = (*value.values(), *map(type, value.values()), *value, *map(type, value))
    try:
        encoded = OBJECTS.get(key)
    except TypeError:  # an unhashable value (a list, a nested object)
        return dumps_compact(value)
    if encoded is None:
        encoded = dumps_compact(value)  # un-encodable: it raises, nothing kept
        if all(type(k) is str for k in value) and all(type(v) in _EXACT for v in value.values()):
            remember(OBJECTS, key, encoded, _ENCODED_LIMIT)
    return encoded


def encode_value(value: Any) -> str:
    """The JSON of any field value, as ``dumps_compact`` writes it: repeated strings through
    :data:`ENCODED`, small objects through :data:`OBJECTS`, finite floats by ``repr``."""
    kind = type(value)
    if kind is str:
        return ENCODED.get(value) or encode_text(value)
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return repr(value)  # what json.dumps writes for a finite float
    if kind is dict:
        return encode_object(value)
    return dumps_compact(value)


# How a key is left out of the payload (RuntimeEvent.to_dict): never, when the value is falsy
# (traceId, spanId), when it is None (every other optional key).
_NEVER, _FALSY, _NONE = "never", "falsy", "none"


def piece(prefix: str, value: Any, omit: str) -> str:
    """``prefix`` (``,"key":``) and ``value``'s JSON, or ``""`` where ``to_dict`` leaves the key out."""
    if (omit == _NONE and value is None) or (omit == _FALSY and not value):
        return ""
    return prefix + encode_value(value)


def fill_caches(event: Any, fields: tuple[tuple[str, dict[Any, str], str, str, type], ...]) -> bool:
    """Add ``event``'s cacheable values missing from their keys' caches (``fields``: attribute,
    cache, prefix, omission, ``str`` or ``int``); whether any was added."""
    added = False
    for attr, cache, prefix, omit, kind in fields:
        value = getattr(event, attr)
        if (type(value) is kind or (value is None and kind is str)) and value not in cache:
            remember(cache, value, piece(prefix, value, omit), _PIECES_LIMIT)
            added = True
    return added


def general_line(event: RuntimeEvent) -> bytes:
    """``encode_json(event.to_dict())`` and a newline: the path of values no cache takes."""
    return encode_json(event.to_dict()) + b"\n"


# Fields encoded directly, not cached: values new on (nearly) every line, and the step id and
# parent span, each on the two or three lines of one step only (a cache entry, made once and
# then looked up twice, costs more than encoding the id three times).
_UNIQUE = frozenset({"span_id", "timestamp", "tool_call_id", "correlation_id", "error_message", "text",
                     "step_id", "parent_span_id"})
# Fields whose value is new for every turn (trace and turn ids, the input event): cached, but a
# new value is added where it is met (add_piece) rather than by making the line again.
_PER_TURN = frozenset({"trace_id", "turn_id", "event_id"})


def add_piece(cache: dict[Any, str], prefix: str, value: Any, omit: str) -> str:
    """:func:`piece`, kept in ``cache`` when ``value`` is a string or ``None``."""
    encoded = piece(prefix, value, omit)
    if value is None or type(value) is str:
        remember(cache, value, encoded, _PIECES_LIMIT)
    return encoded


def _omission(attr: str) -> str:
    if attr in ("agent_name", "instance_key"):
        return _NEVER
    return _FALSY if attr in ("trace_id", "span_id") else _NONE


def line_source(cls: type[RuntimeEvent]) -> str:
    """The source of ``cls``'s line function: ``to_dict``'s keys in its order, one f-string of
    per-key cache subscripts and directly encoded values (see the comment above)."""
    annotations = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    name = cls.__name__
    heads = ['{"type":' + encode_basestring(t) + ',"timestamp":' for t in cls.TYPES]
    body = [f"def line_{name}(e: Any) -> bytes:", "    try:"]
    pieces: list[str] = []  # the f-string: constants and {expressions}
    cached: list[str] = []  # (attr, cache, prefix, omission, kind) of fields_<name>

    def field(attr: str, key: str) -> None:
        prefix = "," + encode_basestring(key) + ":"
        omit = _omission(attr)
        annotation = annotations[attr]
        local = f"f_{attr}"
        if annotation.startswith("str") and attr in _PER_TURN:
            body.append(f"        v = e.{attr}")
            body.append(f"        {local} = P_{key}.get(v) or add_piece(P_{key}, {prefix!r}, v, {omit!r})")
            pieces.append("{" + local + "}")
            return
        if annotation.startswith("str") and attr not in _UNIQUE:
            pieces.append("{" + f"P_{key}[e.{attr}]" + "}")
            cached.append(f"({attr!r}, P_{key}, {prefix!r}, {omit!r}, str)")
            return
        body.append(f"        v = e.{attr}")
        if annotation.startswith("int"):
            body.append(f"        {local} = P_{key}[v] if type(v) is int else piece({prefix!r}, v, {omit!r})")
            cached.append(f"({attr!r}, P_{key}, {prefix!r}, {omit!r}, int)")
        else:
            if annotation.startswith("str"):
                value = "encode_basestring(v)"  # not a str: TypeError, the general path
            elif annotation.startswith("float"):
                value = "(float_repr(v) if type(v) is float and v - v == 0.0 else encode_value(v))"
            elif annotation.startswith("JsonObject"):
                value = "encode_object(v)"
            else:
                value = "encode_value(v)"
            test = {"never": None, "falsy": "v", "none": "v is not None"}[omit]
            if test is None:
                body.append(f"        {local} = {prefix!r} + {value}")
            else:
                body.append(f"        {local} = {prefix!r} + {value} if {test} else ''")
        pieces.append("{" + local + "}")

    if len(heads) > 1:
        body.append(f"        head = {heads[1]!r} if e.failed else {heads[0]!r}")
    else:
        body.append(f"        head = {heads[0]!r}")
    pieces.append("{head}{encode_basestring(e.timestamp)}")
    for attr, key in (("agent_name", "agentName"), ("instance_key", "instanceKey"),
                      ("trace_id", "traceId"), ("span_id", "spanId"),
                      ("parent_span_id", "parentSpanId")):
        field(attr, key)
    timed = False
    for attr, key in cls._wire_fields:
        if key != "latencyMs":
            field(attr, key)
            continue
        # to_dict repeats latencyMs as "duration" (its older name) after every other key
        timed = True
        body += [f"        v = e.{attr}",
                 "        if v is None:",
                 f"            f_{attr} = duration = ''",
                 "        else:",
                 "            duration = float_repr(v) if type(v) is float and v - v == 0.0 else encode_value(v)",
                 f"            f_{attr} = {',' + encode_basestring(key) + ':'!r} + duration",
                 f"            duration = {',' + encode_basestring('duration') + ':'!r} + duration"]
        pieces.append("{f_" + attr + "}")
    if timed:
        pieces.append("{duration}")
    text = "".join(pieces) + "}}\\n"
    assert "'" not in text
    body += [f"        return f'{text}'.encode()",
             "    except (KeyError, TypeError):  # a value new to its cache, or one no cache takes",
             f"        if fill_caches(e, fields_{name}):",
             f"            return line_{name}(e)",
             "        return general_line(e)",
             "    except UnicodeEncodeError:  # a lone surrogate: the general path cleans it",
             "        return general_line(e)"]
    table = f"fields_{name} = (\n" + "".join(f"    {c},\n" for c in cached) + ")\n"
    return "\n".join(body) + "\n\n\n" + table


def _cache_keys(classes: list[type[RuntimeEvent]]) -> list[str]:
    keys: dict[str, str] = {}
    for cls in classes:
        annotations = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        fields = [("agent_name", "agentName"), ("instance_key", "instanceKey"), ("trace_id", "traceId"),
                  ("span_id", "spanId"), ("parent_span_id", "parentSpanId"), *cls._wire_fields]
        for attr, key in fields:
            annotation = annotations[attr]
            if (annotation.startswith("str") and attr not in _UNIQUE) or annotation.startswith("int"):
                mode = f"{_omission(attr)} {annotation.split()[0]}"
                if keys.setdefault(key, mode) != mode:  # one cache per key: one way to write it
                    raise AssertionError(f"{key}: {keys[key]} and {mode}")
    return sorted(keys)


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
        "from goondan.runtime.eventlog import (\n    add_piece,\n    encode_object,\n    encode_value,\n    fill_caches,\n    general_line,\n    piece,\n)\n\n"
        "float_repr = float.__repr__\n\n"
        "# per key: value -> the key and the value's JSON (or '' where the key is left out)\n"
        + "".join(f"P_{key}: dict[Any, str] = {{}}\n" for key in _cache_keys(classes))
    )
    body = "\n\n".join(line_source(cls) for cls in classes)
    table = "LINES = {\n" + "".join(f"    events.{c.__name__}: line_{c.__name__},\n" for c in classes) + "}\n"
    return head + "\n\n" + body + "\n\n" + table


_LINES: dict[type, Any] | None = None


def _line_functions() -> dict[type, Any]:
    """Event class -> its generated line function (goondan/runtime/eventlines.py, imported at
    the first line: the module imports this one)."""
    global _LINES
    if _LINES is None:
        from goondan.runtime.eventlines import LINES

        _LINES = LINES
    return _LINES


def event_line(event: RuntimeEvent) -> bytes:
    """``event`` as one line of ``runtime-events.jsonl``: ``encode_json(event.to_dict())`` and a
    newline, byte for byte (lone surrogates become U+FFFD there too)."""
    encoded: bytes = (_line_functions().get(type(event)) or general_line)(event)
    return encoded


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

    def flush(self, timeout_s: float = 10.0) -> None:
        """Block until every item queued so far is processed."""
        if self._thread is None:
            return
        with self._cond:  # the thread takes items under the lock: none is counted twice or missed
            target = self._done + self._in_flight + len(self._items)
            self._wake.set()
            self._cond.wait_for(lambda: self._done >= target, timeout_s)

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
        self._batcher.start()
        return self._put

    def handle(self, event: RuntimeEvent) -> None:
        """Queue ``event`` (not ``llm.delta``) for the writer thread; drop it when the queue is full.

        The payload is built and serialised in the thread, off the turn's path."""
        if type(event) in _NOT_WRITTEN_CLASSES:
            return
        if self.only is not None and event.type not in self.only:
            return
        self._batcher.start()
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
        # event_line, one call fewer per event: a lone surrogate becomes U+FFFD instead of
        # failing the whole batch.
        line_of = _line_functions().get
        lines = []
        for event in events:
            try:
                lines.append((line_of(type(event)) or general_line)(event))
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
            private_dirs(self.path.parent)
            stream = open(self.path, "ab", opener=private_opener)  # noqa: SIM115 - kept open by the writer thread
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
