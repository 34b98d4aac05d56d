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
    OBJECTS,
    ROTATED_LOG_NAME,
    BackgroundBatcher,
    RuntimeEventLog,
    encode_object,
    event_line,
    event_lines_module,
    iter_event_log,
    max_bytes_from_env,
)
from goondan.runtime.events import (
    _REGISTRY,
    LlmDelta,
    RuntimeEvent,
    StepEnded,
    StepStarted,
    ToolEnded,
)
from goondan.text import dumps_compact
from goondan.types import TokenUsage


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
    log = RuntimeEventLog(tmp_path, queue_limit=5)
    log._batcher._thread = object()  # type: ignore[assignment]  # no writer: the queue only fills
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


# -- the line encoder equals the payload's JSON ----------------------------------------------------
_any_text = st.text(max_size=12) | st.sampled_from(["", "plain", 'q"uote', "back\\slash", "new\nline", "\ud800x",
                                                    "é✓", "\x00\x1f\x7f", "\u2028"])
_scalar = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _any_text
           | st.floats(allow_nan=True, allow_infinity=True) | st.just(-0.0))
_keys = _any_text | st.sampled_from([1, True, 0.0, -0.0, None])  # JSON turns them into "1", "true", ...
_value = (_scalar | st.dictionaries(_any_text, _scalar, max_size=4) | st.dictionaries(_keys, _scalar, max_size=2)
          | st.lists(_scalar, max_size=3)
          | st.dictionaries(st.just("nested"), st.dictionaries(_any_text, _scalar, max_size=2), max_size=1))


def _event_classes() -> list[type[RuntimeEvent]]:
    return sorted(set(_REGISTRY.values()), key=lambda c: c.__name__)


@settings(max_examples=400, deadline=None)
@given(cls=st.sampled_from(_event_classes()), data=st.data())
def test_event_line_is_the_payload_json_byte_for_byte(cls: type[RuntimeEvent], data: st.DataObject) -> None:
    """``event_line`` (the writer thread's encoder) writes exactly ``encode_json(to_dict())``
    and a newline, whatever the field values: wrong types, lone surrogates, non-finite floats,
    1 / 1.0 / True (equal as cache keys, not as JSON), nested objects."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    # the values the runtime writes most of the time, then anything at all
    values = {f.name: data.draw(_value if data.draw(st.booleans()) else _typical(f.name), label=f.name)
              for f in fields}
    event = cls(**values)
    expected = encode_json(event.to_dict()) + b"\n"
    assert event_line(event) == expected
    assert event_line(event) == expected  # again, through the caches


def _typical(name: str) -> st.SearchStrategy[Any]:
    if name in ("failed", "stream"):
        return st.booleans()
    if name.endswith(("_count", "_index", "index")):
        return st.none() | st.integers(0, 50)
    if name in ("latency_ms", "cost"):
        return st.none() | st.floats(0, 5_000)
    if name == "token_usage":
        counts = st.integers(-(2**70), 2**70) | st.booleans() | st.floats(0, 10)
        return (st.none() | st.sampled_from([{"prompt": 1, "completion": 2, "total": 3}, {"prompt": 1.0},
                                             {"prompt": True}, {}])
                | st.fixed_dictionaries({"prompt": counts, "completion": counts, "total": counts}))
    return st.none() | st.sampled_from(["", "a" * 32, "turn-1", "step-1", "plain", "x"])


def test_small_objects_equal_as_keys_but_not_as_json_never_share_a_cache_entry() -> None:
    """``encode_object`` caches by values, types and keys: 1 / 1.0 / True, the keys ``True`` and
    ``1``, ``0.0`` and ``-0.0`` (also inside a tuple) each keep their own JSON, in either order."""
    confusable = [{"a": 1}, {"a": 1.0}, {"a": True}, {True: 1}, {1: 1}, {"a": 0.0}, {"a": -0.0},
                  {"a": (0.0,)}, {"a": (-0.0,)}, {"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": "1"}]
    for ordering in (confusable, confusable[::-1]):
        OBJECTS.clear()
        for value in ordering * 2:
            assert encode_object(value) == dumps_compact(value), value


class _Key(str):
    """A key equal to ``prompt`` whatever its text (JSON writes its text)."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("prompt")


def test_token_usage_is_written_directly_only_in_its_exact_shape() -> None:
    """``TokenUsage.to_dict()``'s shape (ints under its own three keys, in order) is written
    without a cache; anything that only resembles it takes the general path, and every one is
    what ``dumps_compact`` writes."""
    usage = TokenUsage(input_tokens=1200, output_tokens=-3, total_tokens=2**70).to_dict()
    lookalikes: list[dict[Any, Any]] = [
        usage, TokenUsage(10, 1, 11, cached_tokens=4).to_dict(), TokenUsage.unknown().to_dict(),
        {"prompt": True, "completion": 1, "total": 2}, {"prompt": 1, "completion": 1.0, "total": 2},
        {"completion": 1, "prompt": 2, "total": 3}, json.loads('{"prompt": 1, "completion": 2, "total": 3}'),
        {"".join(["pro", "mpt"]): 1, "completion": 2, "total": 3}, {_Key("other"): 1, "completion": 2, "total": 3},
    ]
    for value in lookalikes * 2:
        assert encode_object(value) == dumps_compact(value), value
    assert encode_object(usage) == '{"prompt":1200,"completion":-3,"total":1180591620717411303424}'


def test_the_generated_line_module_is_current() -> None:
    """goondan/runtime/eventlines.py is what scripts/gen_event_lines.py writes from the event
    classes today (run the script after changing an event class)."""
    generated = Path(__file__).resolve().parents[2] / "goondan" / "runtime" / "eventlines.py"
    assert generated.read_text(encoding="utf-8") == event_lines_module()
    from goondan.runtime.eventlines import LINES

    assert set(LINES) == set(_REGISTRY.values())


def test_a_value_json_cannot_encode_skips_that_event_not_the_batch(tmp_path: Path) -> None:
    log = RuntimeEventLog(tmp_path)
    log.handle(_step(1))
    bad = _step(2)
    bad.error_message = object()  # type: ignore[assignment]
    log.handle(bad)
    log.handle(_step(3))
    log.close()
    assert [e["stepIndex"] for e in iter_event_log(tmp_path)] == [1, 3]
