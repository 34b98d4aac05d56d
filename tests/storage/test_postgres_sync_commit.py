"""Which PostgreSQL write transactions wait for their WAL flush (docs/storage.md "Cost").

The running turn's event rows and turn-journal records (and the spans of ``inspect trace``)
are committed with ``synchronous_commit = off`` — the JSONL store appends them without an
fsync — and every other write waits for its flush: the fold-commit, the instance's creation
and status, extension state, and all that a caller is told was stored (queued inputs,
claims, approvals, leases).

The probe is on the server: a statement trigger on every ``goondan_`` table records
``current_setting('synchronous_commit')`` of the transaction that wrote it, so the real write
paths are observed as they run, with nothing of goondan replaced.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.storage.postgres.backend import PostgresBackend, lease_fence
from goondan.storage.postgres.leases import PostgresLeases
from goondan.types import AgentEvent
from tests.support.aio import run
from tests.support.backends import apply_schema

WS = "proj-0123abcd"
LEDGER = Path(__file__).resolve().parent.parent / "fixtures" / "runtime" / "ledger"
TABLES = ("goondan_instances", "goondan_messages", "goondan_events", "goondan_turn_records",
          "goondan_extension_state", "goondan_approvals", "goondan_inbox", "goondan_leases",
          "goondan_spans")


def sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description is not None else []


@pytest.fixture
def url(postgres_url: str) -> str:
    apply_schema(postgres_url)
    sql(postgres_url, """
        CREATE TABLE sync_probe (n bigserial, tbl text, op text, sync text, tx bigint);
        CREATE FUNCTION sync_probe() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO sync_probe (tbl, op, sync, tx) VALUES (TG_TABLE_NAME, TG_OP,
            current_setting('synchronous_commit'), txid_current());
          RETURN NULL;
        END $$""")
    for table in TABLES:
        sql(postgres_url, f"CREATE TRIGGER probe AFTER INSERT OR UPDATE OR DELETE ON {table} "
                          "FOR EACH STATEMENT EXECUTE FUNCTION sync_probe()")
    return postgres_url


class Probe:
    """The writes recorded since the last :meth:`take`: ``{(table, op, synchronous_commit)}``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen = 0

    def take(self) -> set[tuple[str, str, str]]:
        return {(tbl, op, sync) for tbl, op, sync, _tx in self.rows()}

    def rows(self) -> list[tuple[str, str, str, int]]:
        """``(table, op, synchronous_commit, transaction id)`` of each write statement."""
        found = sql(self.url, "SELECT n, tbl, op, sync, tx FROM sync_probe WHERE n > %s "
                    "ORDER BY n", self.seen)
        if found:
            self.seen = found[-1][0]
        return [(tbl, op, sync, tx) for _n, tbl, op, sync, tx in found]

    def of(self, write: Callable[[], object]) -> set[tuple[str, str, str]]:
        self.take()
        write()
        return self.take()


def test_only_running_turn_events_and_journal_records_commit_without_a_flush(url: str) -> None:
    probe = Probe(url)
    backend = PostgresBackend.open(url)
    leases = PostgresLeases(backend.db)
    name = f"orchestrator/{WS}/main"
    token = leases.acquire_lease(name, "node-a", 30)
    assert token is not None
    fenced = backend.with_fence(lease_fence(name, token))
    assert probe.take() >= {("goondan_leases", "INSERT", "on")}

    created = probe.of(lambda: fenced.open_instance(WS, "planner", "k").close())
    assert created == {("goondan_instances", "INSERT", "on")}
    store = fenced.open_instance(WS, "planner", "k")
    state = store.load()
    event = MessageEvent.append(Message.user("hello"))
    state.emit(event)
    # the running turn: no flush awaited (the JSONL store does not fsync these either)
    assert probe.of(lambda: store.journal.append({"type": "turn.started", "turnId": "t1"})) == {
        ("goondan_turn_records", "INSERT", "off")}
    assert probe.of(lambda: store.append_event(event, "t1")) == {
        ("goondan_events", "INSERT", "off")}
    assert probe.of(lambda: store.journal.append(
        {"type": "toolCall.started", "turnId": "t1", "toolCallId": "c1"})) == {
        ("goondan_turn_records", "INSERT", "off")}
    # the fold-commit, status, extension state: flushed
    assert probe.of(lambda: store.commit(state)) == {
        ("goondan_instances", "UPDATE", "on"), ("goondan_messages", "INSERT", "on"),
        ("goondan_events", "DELETE", "on")}
    assert probe.of(lambda: store.set_status("processing")) == {
        ("goondan_instances", "UPDATE", "on")}
    assert probe.of(lambda: store.save_extension_state("x", {"n": 1})) == {  # an upsert
        ("goondan_extension_state", "INSERT", "on"), ("goondan_extension_state", "UPDATE", "on")}
    assert probe.of(store.journal.clear) == {("goondan_turn_records", "DELETE", "off")}
    store.close()

    # what the orchestrator acknowledges: inputs, their claims, approvals, leases — flushed
    queue = fenced.queue(WS, "inputs/main")
    approvals = fenced.approvals(WS)
    acknowledged: list[Callable[[], object]] = [
        lambda: queue.append_entry({"id": "e1", "type": "message"}, "planner", "k"),
        lambda: queue.claim("planner", "k", "e1", owner="1:1"),
        lambda: queue.confirm("planner", "k", "e1"),
        lambda: queue.append_entry({"id": "e2", "type": "message"}, "planner", "k"),
        lambda: queue.take("planner", "k", owner="1:1"),
        lambda: approvals.request(agent="planner", instance_key="k", turn_id="t1",
                                  tool_call_id="c1", tool="x__y", args={}),
        lambda: approvals.decide(approvals.list()[0].id, approve=True, by="me", via="cli"),
        lambda: leases.renew_lease(name, token, 30),
        lambda: leases.release_lease(name, token),
        lambda: backend.delete_instance(WS, "planner", "k"),
    ]
    for write in acknowledged:
        seen = probe.of(write)
        assert seen and {sync for _t, _o, sync in seen} == {"on"}, seen
    backend.close()


def test_a_real_turn_flushes_only_its_commit_status_and_acknowledged_writes(
        url: str, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(LEDGER, bundle, ignore=shutil.ignore_patterns("__pycache__"))
    probe = Probe(url)
    backend = PostgresBackend.open(url)

    async def main() -> None:
        model = ScriptedModel([{"toolCalls": [{"name": "ledger__mark", "args": {}}]}, "ok"])
        async with Runtime.from_bundle(bundle, state_root=tmp_path / "state", storage=backend,
                                       models={"worker": model}) as rt:
            instance = await rt.instance("worker", "k")
            probe.take()
            result = await instance.run(AgentEvent(type="message", input="go", instance_key="k"))
            assert result.text == "ok"

    run(main())
    written = probe.rows()
    seen = {(t, o, sync) for t, o, sync, _tx in written}
    backend.close()
    flushed = {tx for _t, _o, sync, tx in written if sync == "on"}
    # the fold-commit and the status "idle" (and "processing", recorded for a turn that lasts)
    assert 2 <= len(flushed) <= 3, written
    asynchronous = {(t, o) for t, o, sync in seen if sync == "off"}
    synchronous = {(t, o) for t, o, sync in seen if sync == "on"}
    # ... and the spans (docs/storage.md "Spans"; an upsert fires INSERT and UPDATE triggers)
    assert asynchronous == {("goondan_events", "INSERT"), ("goondan_turn_records", "INSERT"),
                            ("goondan_turn_records", "DELETE"), ("goondan_spans", "INSERT"),
                            ("goondan_spans", "UPDATE")}
    assert ("goondan_messages", "INSERT") in synchronous  # the fold-commit
    assert not {t for t, _o in synchronous} & {"goondan_turn_records"}
    assert ("goondan_events", "INSERT") not in synchronous
