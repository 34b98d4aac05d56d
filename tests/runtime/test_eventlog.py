"""runtime-events.jsonl: written from a thread, bounded by rotation, drops counted when full."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.llm.wire import encode_json
from goondan.runtime.eventlog import (
    ROTATED_LOG_NAME,
    BackgroundBatcher,
    EventLogWriter,
    RuntimeEventLog,
    event_line,
    iter_event_log,
    max_bytes_from_env,
)
from goondan.runtime.events import (
    LlmDelta,
    RuntimeEvent,
    StepEnded,
    StepStarted,
    ToolEnded,
    event_from_dict,
)
from tests.support.event_strategies import event_classes, events_of


def _step(i: int) -> StepEnded:
    return StepEnded(trace_id="a" * 32, span_id=f"{i:016x}", turn_id="t", step_id=f"s{i}",
                     step_index=i, agent_name="a", instance_key="k")


def test_events_are_appended_in_order_without_deltas(tmp_path: Path) -> None:
    log = RuntimeEventLog(tmp_path)
    for i in range(50):
        log.handle(_step(i))
        log.handle(LlmDelta(turn_id="t", kind="text", text="x"))
        log.handle(StepStarted(trace_id="a" * 32, span_id=f"{i:016x}", turn_id="t", step_id=f"s{i}",
                               step_index=i))  # described whole by its end event: not written
    log.close()
    events = list(iter_event_log(tmp_path))
    assert [e["stepIndex"] for e in events] == list(range(50))
    assert {e["type"] for e in events} == {"step.completed"} and log.written == 50


def test_the_logs_of_many_instances_share_one_writer_thread(tmp_path: Path) -> None:
    """A pooled or Ray host runs hundreds of instances: their logs are written by one thread,
    each log's events in order, in its own file."""
    before = {t for t in threading.enumerate() if t.name == "goondan-event-log"}
    logs = [RuntimeEventLog(tmp_path / f"i{n}") for n in range(20)]
    for i in range(5):
        for log in logs:
            log.handle(_step(i))
    writers = {t for t in threading.enumerate() if t.name == "goondan-event-log"} - before
    for log in logs:
        log.close()
    assert len(writers) <= 1
    for n, log in enumerate(logs):
        assert [e["stepIndex"] for e in iter_event_log(tmp_path / f"i{n}")] == list(range(5))
        assert log.written == 5 and log.dropped == 0
    logs[0].handle(_step(9))  # a closed log writes nothing more
    assert logs[0].dropped == 1


def test_the_log_rotates_by_size_and_stays_bounded(tmp_path: Path) -> None:
    log = RuntimeEventLog(tmp_path, max_bytes=4096)
    for i in range(400):
        log.handle(ToolEnded(trace_id="b" * 32, span_id=f"{i:016x}", turn_id="t", step_id="s",
                             step_index=0, tool_call_id=f"c{i}", tool_name="x__y", status="ok"))
        if i % 50 == 0:
            log.flush()
    log.close()
    current, rotated = tmp_path / "runtime-events.jsonl", tmp_path / ROTATED_LOG_NAME
    assert rotated.exists() and current.stat().st_size <= 4096 and rotated.stat().st_size <= 4096
    kept = [e["toolCallId"] for e in iter_event_log(tmp_path)]
    assert kept[-1] == "c399" and kept == sorted(kept, key=lambda c: int(c[1:]))  # oldest first
    assert all(json.loads(line) for line in current.read_text().splitlines())


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    writer = EventLogWriter(queue_limit=5)
    writer.batcher._thread = object()  # type: ignore[assignment]  # no thread: the queue only fills
    log = RuntimeEventLog(tmp_path, writer=writer)
    for i in range(8):
        log.handle(_step(i))
    assert log.dropped == 3


def test_flush_returns_once_everything_queued_before_it_is_processed() -> None:
    """``flush`` waits for the items still queued and for those the thread has taken but not
    finished (a slow batch); after ``close`` a put drops and counts."""
    processed: list[int] = []
    started, release = threading.Event(), threading.Event()

    def process(items: list[int]) -> None:
        if items[0] == 0:  # the first batch is held until the second item is queued
            started.set()
            release.wait(10)
        processed.extend(items)

    batcher = BackgroundBatcher("test", process, limit=100, interval_s=60.0)
    batcher.start()
    batcher.put(0)
    batcher._wake.set()
    assert started.wait(10)
    batcher.put(1)  # queued while batch [0] is in flight
    threading.Timer(0.05, release.set).start()
    batcher.flush()
    assert processed == [0, 1]
    batcher.close()
    assert batcher.put(2) is False and batcher.dropped == 1 and processed == [0, 1]


def test_max_bytes_from_env() -> None:
    assert max_bytes_from_env({"GOONDAN_RUNTIME_EVENTS_MAX_BYTES": "0"}) == 0
    assert max_bytes_from_env({"GOONDAN_RUNTIME_EVENTS_MAX_BYTES": "2048"}) == 2048
    assert max_bytes_from_env({}) == 8 * 1024 * 1024


# -- one line per event: the payload's JSON --------------------------------------------------------
_any_text = st.text(max_size=12) | st.sampled_from(
    ["", "plain", 'q"uote', "back\\slash", "new\nline", "\ud800x", "é✓", "\x00\x1f\x7f", "\u2028"]
)
_scalar = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _any_text
           | st.floats(allow_nan=True, allow_infinity=True) | st.just(-0.0))
# JSON turns them into "1", "true", ...
_keys = _any_text | st.sampled_from([1, True, 0.0, -0.0, None])
_value = (
    _scalar
    | st.dictionaries(_any_text, _scalar, max_size=4)
    | st.dictionaries(_keys, _scalar, max_size=2)
    | st.lists(_scalar, max_size=3)
    | st.dictionaries(
        st.just("nested"), st.dictionaries(_any_text, _scalar, max_size=2), max_size=1
    )
)


@settings(max_examples=400, deadline=None)
@given(cls=st.sampled_from(event_classes()), data=st.data())
def test_event_line_is_the_payload_json_byte_for_byte(
    cls: type[RuntimeEvent], data: st.DataObject
) -> None:
    """``event_line`` (the writer thread's encoder) writes exactly ``encode_json(to_dict())``
    and a newline, whatever the field values: wrong types, lone surrogates, non-finite floats,
    1 / 1.0 / True, nested objects."""
    event = data.draw(events_of(cls, frame=False))
    for f in dataclasses.fields(cls):  # some fields replaced by anything at all
        if f.init and data.draw(st.booleans(), label=f"replace {f.name}"):
            setattr(event, f.name, data.draw(_value, label=f.name))
    event._payload = None
    expected = encode_json(event.to_dict()) + b"\n"
    assert event_line(event) == expected
    assert event_line(event) == expected


@settings(max_examples=200, deadline=None)
@given(
    event=st.sampled_from(
        [c for c in event_classes() if not RuntimeEventLog.skips.issuperset(c.TYPES)]
    ).flatmap(events_of)
)
def test_every_field_of_every_event_is_written_and_reads_back(
    tmp_path_factory: Any, event: RuntimeEvent
) -> None:
    """A line of the log decodes to the event it was written from, every field included (the
    strategies come from the dataclass fields: a new field is covered without a list)."""
    directory = tmp_path_factory.mktemp("log")
    log = RuntimeEventLog(directory, only=frozenset(type(event).TYPES))
    log.handle(event)
    log.close()
    [line] = (directory / "runtime-events.jsonl").read_bytes().splitlines(keepends=True)
    assert line == event_line(event)
    payload = json.loads(line)
    if "\ufffd" not in line.decode():  # a lone surrogate is written as U+FFFD: not the same text
        assert payload == json.loads(encode_json(event.to_dict()))
        assert event_from_dict(payload).to_dict() == payload


def test_a_value_json_cannot_encode_skips_that_event_not_the_batch(tmp_path: Path) -> None:
    log = RuntimeEventLog(tmp_path)
    log.handle(_step(1))
    bad = _step(2)
    bad.error_message = object()  # type: ignore[assignment]
    log.handle(bad)
    log.handle(_step(3))
    log.close()
    assert [e["stepIndex"] for e in iter_event_log(tmp_path)] == [1, 3]
