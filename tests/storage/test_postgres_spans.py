"""The span table of a PostgreSQL store (``goondan_spans``, goondan/storage/postgres/spans.py)
against the real test server: a re-sent span is one row, a finished span never goes back to
``running``, and the readers find traces by prefix, the latest one and an instance's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from goondan.storage.postgres.backend import PostgresBackend
from goondan.storage.postgres.spans import PostgresSpans


@pytest.fixture
def spans(postgres_url: str) -> Iterator[PostgresSpans]:
    backend = PostgresBackend.open(postgres_url)
    try:
        yield backend.spans()
    finally:
        backend.close()


def span(trace: str, span_id: str, status: str = "ok", *, parent: str | None = None,
         agent: str = "a", key: str = "k") -> dict[str, Any]:
    return {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": f"turn {agent}",
            "kind": "turn", "agentName": agent, "instanceKey": key,
            "startTime": "2026-11-27T22:00:00.000Z", "durationMs": None if status == "running"
            else 1.5, "status": status, "attributes": {"turnId": "t1"}}


def test_a_resent_span_is_one_row_and_a_finished_span_never_goes_back_to_running(
    spans: PostgresSpans,
) -> None:
    trace = "ab" * 16
    spans.upsert("ws", [(span(trace, "s1", "running"), 100)])
    spans.upsert("ws", [(span(trace, "s1", "ok"), 100), (span(trace, "s2", "error"), 200)])
    spans.upsert("ws", [(span(trace, "s1", "ok"), 100)])  # the same end, sent again
    spans.upsert("ws", [(span(trace, "s1", "running"), 100)])  # a late re-send of its start
    stored = spans.of_traces([trace])
    assert [(doc["spanId"], doc["status"], start) for doc, start in stored] == [
        ("s1", "ok", 100), ("s2", "error", 200)]
    assert stored[0][0] == span(trace, "s1", "ok")  # the span object as written
    # the same ids in another workspace are another span
    spans.upsert("other", [(span(trace, "s1", "running"), 100)])
    assert [d["status"] for d, _ in spans.by_span_id("other", ["s1"])] == ["running"]
    assert [d["status"] for d, _ in spans.by_span_id("ws", ["s1", "s2"])] == ["ok", "error"]


def test_traces_are_found_by_prefix_latest_and_instance(spans: PostgresSpans) -> None:
    first, second, third = "a1" + "0" * 30, "a2" + "0" * 30, "b1" + "0" * 30
    spans.upsert("ws", [(span(first, "s1", agent="x", key="k1"), 100),
                        (span(first, "s2", parent="s1", agent="y", key="k2"), 150),
                        (span(second, "s3", agent="y", key="k2"), 300),
                        (span(third, "s4", agent="x", key="k1"), 200)])
    assert spans.trace_ids(None) == [second]  # the trace of the span that started last
    assert spans.trace_ids("a") == [first, second]  # ambiguous: both are returned
    assert spans.trace_ids("b1") == [third]
    assert spans.trace_ids("c") == []
    assert spans.trace_ids("a_") == []  # LIKE's wildcards are taken literally
    assert spans.traces_of_instance("ws", "y", "k2") == [first, second]
    assert spans.traces_of_instance("ws", "y", "k2", limit=1) == [second]
    assert spans.traces_of_instance("ws", "x", "k1") == [first, third]
    assert spans.recent_traces(2) == [third, second]
    assert {d["spanId"] for d, _ in spans.of_traces([first])} == {"s1", "s2"}
