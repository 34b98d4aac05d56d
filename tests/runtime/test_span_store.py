"""Spans written into a PostgreSQL store (goondan/runtime/span_store.py, docs/storage.md
"Spans"), against the real test server: no row holds message text; a turn's spans are one
batch, and so are those of a process's instances; a store that cannot be written fails no turn
and gets the spans later. (The tree ``inspect trace --store`` reads back from agent processes:
tests/commands/test_trace.py.)"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.runtime.span_store import SpanStoreWriter, StoreSpanLog
from goondan.storage.postgres.backend import PostgresBackend
from goondan.storage.postgres.db import Database
from goondan.storage.postgres.shared import SharedConnection
from goondan.storage.postgres.spans import PostgresSpans
from tests.support.aio import run as run_async
from tests.support.postgres import PostgresCluster

REPO = Path(__file__).resolve().parents[2]
DELEGATION = REPO / "examples" / "delegation"
PROBE = '''
def fail(ctx, args):
    raise ValueError(f"no luck with {args['text']}")


handlers = {"fail": fail}
'''
MARK = "zq7Mark"  # in every message of the turn below, in no span


def probe_bundle(tmp_path: Path) -> Path:
    """examples/delegation whose worker has a tool that fails with its argument's text."""
    bundle = tmp_path / "delegation"
    shutil.copytree(DELEGATION, bundle)
    (bundle / "probe.py").write_text(PROBE)
    text = (bundle / "goondan.yaml").read_text()
    worker_prompt = "    systemPrompt: You are a careful calculator. Answer with the result only.\n"
    assert worker_prompt in text
    tools = "  tools:\n    - ref: {kind: Tool, name: probe}\n"
    text = text.replace(worker_prompt, worker_prompt + tools)
    text += ("---\napiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: probe}\nspec:\n"
             "  entry: ./probe.py\n  exports:\n    - name: fail\n      description: Fails.\n"
             "      parameters: {type: object, properties: {text: {type: string}}}\n")
    (bundle / "goondan.yaml").write_text(text)
    return bundle


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_no_span_row_holds_the_text_of_a_message(tmp_path: Path, postgres_url: str) -> None:
    """User input, model output, tool arguments, a tool's failure text and an agent request's
    input all carry MARK; the spans of that turn do not."""
    bundle = probe_bundle(tmp_path)
    coordinator = ScriptedModel([
        {"text": f"asking {MARK}", "toolCalls": [
            {"name": "agents__request", "args": {"target": "worker", "input": f"do {MARK}"}}]},
        f"final {MARK}"])
    worker = ScriptedModel([
        {"toolCalls": [{"name": "probe__fail", "args": {"text": f"arg {MARK}"}}]},
        f"worker {MARK}"])

    async def main() -> None:
        backend = PostgresBackend.open(postgres_url)
        try:
            async with Runtime.from_bundle(bundle, state_root=tmp_path / "state",
                                           storage=backend,
                                           models={"coordinator": coordinator,
                                                   "worker": worker}) as rt:
                result = await rt.run_turn("coordinator", f"question {MARK}", instance_key="k")
                assert result.text == f"final {MARK}"
        finally:
            backend.close()

    run_async(main())
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT s::text FROM goondan_spans s").fetchall()
        held = conn.execute("SELECT count(*) FROM goondan_messages "
                            "WHERE message LIKE %s", (f"%{MARK}%",)).fetchone()
    assert held is not None and held[0] >= 6  # the conversations hold it
    assert len(rows) == 13  # 2 turns, 4 steps, 4 LLM calls, 2 tool calls, 1 agent request
    assert [row[0] for row in rows if MARK in row[0]] == []
    spans = [json.loads(text) for (text,) in _span_texts(postgres_url)]
    [tool] = [s for s in spans if s["kind"] == "toolCall" and s["name"] == "probe__fail"]
    assert tool["status"] == "error" and tool["error"]["code"] and tool["error"]["message"] is None


def test_a_stored_span_keeps_codes_and_drops_the_texts_a_tool_call_can_put_in_it() -> None:
    """The fields of span objects that may carry a message's text (docs/storage.md "Spans")."""
    from goondan.runtime.span_store import stored_span
    from goondan.runtime.traces import SpanRecord

    def record(kind: str, **fields: Any) -> SpanRecord:
        return SpanRecord(trace_id="t" * 32, span_id="s" * 16, parent_span_id=None, name=kind,
                          kind=kind, agent_name="a", instance_key="k", start_time="",
                          start_unix_nanos=0, **fields)

    for kind in ("toolCall", "agentCall"):
        doc = stored_span(record(kind, status="error", error_code="E_TOOL",
                                 error_message=f"no luck with {MARK}"))
        assert doc["error"] == {"code": "E_TOOL", "message": None}
    wait = stored_span(record("approval", attributes={"reason": f"writes {MARK}",
                                                       "toolName": "files__write"}))
    assert wait["attributes"] == {"toolName": "files__write"}
    turn = stored_span(record("turn", status="error", error_code="E_BUDGET_EXCEEDED",
                              error_message="over budget"))
    assert turn["error"] == {"code": "E_BUDGET_EXCEEDED", "message": "over budget"}


def _span_texts(url: str) -> list[tuple[str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return list(conn.execute("SELECT span FROM goondan_spans").fetchall())


class CountingSpans(PostgresSpans):
    """The real table, counting its write transactions."""

    def __init__(self, shared: SharedConnection) -> None:
        super().__init__(shared)
        self.batches: list[int] = []

    def upsert(self, workspace_id: str, spans: list[tuple[dict[str, Any], int]]) -> None:
        super().upsert(workspace_id, spans)
        self.batches.append(len(spans))  # once committed


def _three_steps() -> ScriptedModel:
    call = {"toolCalls": [{"name": "probe__fail", "args": {"text": "x"}}]}
    return ScriptedModel([call, call, "done"], loop=True)


def _worker_turns(bundle: Path, state_root: Path, sink: StoreSpanLog, turns: int) -> None:
    """``turns`` three-step turns of the worker (on the JSONL state root) with ``sink``."""
    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root,
                                       models={"worker": _three_steps()}) as rt:
            instance = await rt.instance("worker", "k")
            instance.observer.add_sink(sink)
            for _ in range(turns):
                result = await rt.run_turn("worker", "go", instance_key="k")
                assert result.text == "done"

    run_async(main())


def test_a_turns_spans_are_one_batch_and_a_second_write_changes_nothing(
    tmp_path: Path, postgres_url: str,
) -> None:
    db = Database.open(postgres_url)
    try:
        table = CountingSpans(SharedConnection(db))
        writer = SpanStoreWriter(interval_s=3600)  # only the turn's end wakes it
        sink = StoreSpanLog(table, "ws", writer=writer)
        _worker_turns(probe_bundle(tmp_path), tmp_path / "state", sink, 1)
        wait_until(lambda: bool(table.batches), "the batch")
        # turn.started and every end event in one transaction: turn, 3 steps, 3 LLM calls, 2 tools
        assert table.batches == [9]
        first = table.of_traces(table.trace_ids(None))
        assert len(first) == 9 and {d["status"] for d, _ in first} == {"ok", "error"}
        table.upsert("ws", first)  # sent again: idempotent
        assert table.of_traces(table.trace_ids(None)) == first
        writer.batcher.close()
    finally:
        db.close()


def test_the_spans_of_a_processs_instances_are_written_in_one_transaction(
    postgres_url: str,
) -> None:
    """Two instances of a host (two sinks, each with its own table object on the process's
    one pool): what one batch took is one upsert."""
    from goondan.runtime.events import TurnStarted

    db = Database.open(postgres_url)
    writer = SpanStoreWriter(interval_s=3600)
    tables = [CountingSpans(SharedConnection(db)) for _ in range(2)]
    try:
        for number, table in enumerate(tables):
            sink = StoreSpanLog(table, "ws", writer=writer)
            sink.handle(TurnStarted(trace_id=f"{number}" * 32, span_id=f"{number}" * 16,
                                    agent_name="a", instance_key=f"k{number}", turn_id="t"))
        writer.batcher.flush()
        assert tables[0].batches + tables[1].batches == [2]
        assert len(tables[0].of_traces(["0" * 32, "1" * 32])) == 2
    finally:
        writer.batcher.close()
        db.close()


@pytest.mark.slow
def test_an_unreachable_store_fails_no_turn_and_warns_once(
    tmp_path: Path, postgres_cluster: PostgresCluster, caplog: pytest.LogCaptureFixture,
) -> None:
    name = postgres_cluster.create_database()
    db = Database.open(postgres_cluster.url(name), connect_timeout=0.2)
    postgres_cluster.drop_database(name)  # gone, with the pool's connection: unreachable now
    writer = SpanStoreWriter()
    sink = StoreSpanLog(PostgresSpans(SharedConnection(db)), "ws", writer=writer)
    try:
        with caplog.at_level(logging.DEBUG, logger="goondan.runtime"):
            _worker_turns(probe_bundle(tmp_path), tmp_path / "state", sink, 2)
            sink.flush(timeout_s=20)
        warnings = [r for r in caplog.records
                    if r.levelno == logging.WARNING and "spans not written" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
        assert len(sink.pending) == 18 and sink.written == 0  # kept for the next batch
    finally:
        writer.batcher.close()
        db.close()


def test_spans_a_failed_write_kept_are_written_with_the_next_batch(
    tmp_path: Path, postgres_url: str,
) -> None:
    import psycopg

    db = Database.open(postgres_url)
    writer = SpanStoreWriter()
    sink = StoreSpanLog(PostgresSpans(SharedConnection(db)), "ws", writer=writer)
    bundle = probe_bundle(tmp_path)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE goondan_spans RENAME TO goondan_spans_away")
            _worker_turns(bundle, tmp_path / "state", sink, 1)
            sink.flush()
            assert len(sink.pending) == 9
            conn.execute("ALTER TABLE goondan_spans_away RENAME TO goondan_spans")
            _worker_turns(bundle, tmp_path / "state", sink, 1)
            sink.flush()
            row = conn.execute("SELECT count(DISTINCT trace_id), count(*) "
                               "FROM goondan_spans").fetchone()
        assert row == (2, 18) and sink.pending == {}
    finally:
        writer.batcher.close()
        db.close()


def test_an_orchestrators_sink_writes_only_the_ingress_spans(postgres_url: str) -> None:
    """``only``: the orchestrator hears every agent's events and writes its ingress spans."""
    from goondan.runtime.events import IngressReceived, TurnStarted

    db = Database.open(postgres_url)
    writer = SpanStoreWriter()
    table = PostgresSpans(SharedConnection(db))
    sink = StoreSpanLog(table, "ws", only=frozenset({"ingress.received"}), writer=writer)
    try:
        trace = "c" * 32
        sink.handle(TurnStarted(trace_id=trace, span_id="1" * 16, parent_span_id="2" * 16,
                                agent_name="a", instance_key="k", turn_id="t"))
        sink.handle(IngressReceived(trace_id=trace, span_id="2" * 16, agent_name="a",
                                    instance_key="k", source="http-in", event_id="e1",
                                    event_type="message", target="a"))
        sink.flush()
        [(doc, _)] = table.of_traces([trace])
        assert (doc["kind"], doc["name"], doc["status"], doc["parentSpanId"]) == (
            "ingress", "ingress http-in", "ok", None)
        assert doc["attributes"]["eventId"] == "e1"
    finally:
        writer.batcher.close()
        db.close()
