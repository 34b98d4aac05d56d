"""The PostgreSQL backend beyond the shared contract: what its tables hold after a commit, one
transaction per commit, a moved position refused, the fencing seam, a killed holder's lock,
and ``import goondan`` never importing psycopg."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.errors import InstanceLockedError, WorkspaceError
from goondan.storage.postgres.backend import PostgresBackend
from tests.support.backends import apply_schema

WS = "proj-0123abcd"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(postgres_url: str) -> str:
    apply_schema(postgres_url)
    return postgres_url


def rows(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def terminate(url: str, pid: int | None) -> None:
    """End the session ``pid`` and wait until the server has (its locks are released)."""
    rows(url, "SELECT pg_terminate_backend(%s)", pid)
    deadline = time.monotonic() + 10
    while rows(url, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", pid):
        assert time.monotonic() < deadline, "the terminated session did not end"
        time.sleep(0.02)


def execute(url: str, query: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(query)  # type: ignore[arg-type]


def turn(store: Any, state: Any, events: list[MessageEvent], turn_id: str) -> Any:
    for event in events:
        state.emit(event)
        store.append_event(event, turn_id)
    return store.commit(state)


def test_after_a_commit_each_message_is_stored_once_and_no_event_is_kept(url: str) -> None:
    backend = PostgresBackend.open(url)
    store = backend.open_instance(WS, "planner", "k")
    first = Message.user("hello")
    state = turn(store, store.load(), [MessageEvent.append(first),
                                       MessageEvent.append(Message.assistant("hi there"))], "t1")
    assert rows(url, "SELECT count(*) FROM goondan_events") == [(0,)]
    state = turn(store, state, [MessageEvent.replace(first.id, Message.user("hello again"))],
                 "t2")
    texts = rows(url, "SELECT message FROM goondan_messages ORDER BY position")
    assert len(texts) == 2
    assert sum('"hello again"' in t for (t,) in texts) == 1
    assert not any('"hello"' in t for (t,) in texts)  # the replaced text is gone
    assert rows(url, "SELECT count(*) FROM goondan_events") == [(0,)]
    assert rows(url, "SELECT message_count FROM goondan_instances") == [(2,)]
    store.close()
    backend.close()


def test_a_commit_is_one_transaction(url: str) -> None:
    backend = PostgresBackend.open(url)
    store = backend.open_instance(WS, "planner", "k")
    turn(store, store.load(), [MessageEvent.append(Message.user(f"m{n}")) for n in range(3)], "t")
    # Every row a commit writes carries the id of the transaction that wrote it.
    [(instance_xid,)] = rows(url, "SELECT xmin::text FROM goondan_instances")
    message_xids = rows(url, "SELECT DISTINCT xmin::text FROM goondan_messages")
    assert message_xids == [(instance_xid,)]
    store.close()
    backend.close()


def test_a_commit_onto_a_moved_position_is_refused_and_writes_nothing(url: str) -> None:
    backend = PostgresBackend.open(url)
    store = backend.open_instance(WS, "planner", "k")
    state = turn(store, store.load(), [MessageEvent.append(Message.user("mine"))], "t1")
    # Another writer got in (say, after this one's connection and lock were lost).
    other = Message.user("theirs").to_dict()
    import json

    rows(url, "WITH m AS (INSERT INTO goondan_messages SELECT id, 1, %s FROM goondan_instances "
         "RETURNING 1) UPDATE goondan_instances SET message_count = 2 RETURNING 1",
         json.dumps(other))
    event = MessageEvent.append(Message.user("late"))
    state.emit(event)
    store.append_event(event, "t2")
    with pytest.raises(WorkspaceError) as info:
        store.commit(state)
    assert info.value.code == "E_STORE_CONFLICT"
    texts = [json.loads(t)["data"]["content"] for (t,) in rows(
        url, "SELECT message FROM goondan_messages ORDER BY position")]
    assert texts == ["mine", "theirs"]
    store.close()
    backend.close()


def test_every_write_runs_the_fence_first_and_a_refused_fence_writes_nothing(url: str) -> None:
    calls: list[str] = []
    lease_lost = False

    def fence(conn: Any) -> None:
        calls.append(conn.execute("SELECT 'in transaction'").fetchone()[0])
        if lease_lost:
            raise WorkspaceError("the lease was taken over", code="E_STORE_FENCED")

    backend = PostgresBackend.open(url, fence=fence)
    store = backend.open_instance(WS, "planner", "k")
    state = turn(store, store.load(), [MessageEvent.append(Message.user("a"))], "t1")
    assert calls  # events and the commit were fenced
    lease_lost = True
    event = MessageEvent.append(Message.user("b"))
    state.emit(event)
    for write in (lambda: store.append_event(event, "t2"), lambda: store.commit(state),
                  lambda: store.set_status("processing"),
                  lambda: store.journal.append({"type": "turn.started", "turnId": "t2"}),
                  lambda: store.save_extension_state("x", {"n": 1})):
        with pytest.raises(WorkspaceError) as info:
            write()
        assert info.value.code == "E_STORE_FENCED"
    assert rows(url, "SELECT count(*) FROM goondan_messages") == [(1,)]
    assert rows(url, "SELECT count(*) FROM goondan_events") == [(0,)]
    assert rows(url, "SELECT count(*) FROM goondan_turn_records") == [(0,)]
    store.close()
    backend.close()


@pytest.mark.e2e
def test_the_locks_of_a_killed_holder_are_released(url: str) -> None:
    code = (
        "import sys, time\n"
        "from goondan.storage.postgres.backend import PostgresBackend\n"
        "backend = PostgresBackend.open(sys.argv[1])\n"
        "stores = [backend.open_instance(sys.argv[2], 'planner', k) for k in 'abc']\n"
        "print('open', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", code, url, WS], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "open"
        backend = PostgresBackend.open(url)
        for key in "abc":
            with pytest.raises(InstanceLockedError):
                backend.open_instance(WS, "planner", key)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        deadline = time.monotonic() + 10
        for key in "abc":  # the server notices the dropped connection and ends its session
            while True:
                try:
                    backend.open_instance(WS, "planner", key).close()
                    break
                except InstanceLockedError:
                    assert time.monotonic() < deadline, "a lock outlived its killed holder"
                    time.sleep(0.05)
        backend.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_import_goondan_never_imports_psycopg() -> None:
    code = ("import sys, goondan, goondan.cli, goondan.storage, goondan.storage.contract, "
            "goondan.storage.jsonl, goondan.storage.backends, goondan.runtime.instance\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('psycopg', 'psycopg_pool')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert done.stdout.strip() == "[]"


def test_an_instance_opened_under_a_lease_writes_nothing_once_the_lease_is_taken_over(
    url: str,
) -> None:
    from goondan.storage.postgres.backend import lease_fence
    from goondan.storage.postgres.leases import PostgresLeases

    backend = PostgresBackend.open(url)
    leases = PostgresLeases(backend.db)
    name = f"orchestrator/{WS}/main"
    token = leases.acquire_lease(name, "node-a", 30)
    assert token is not None
    fenced = backend.with_fence(lease_fence(name, token))
    store = fenced.open_instance(WS, "planner", "k")
    state = turn(store, store.load(), [MessageEvent.append(Message.user("a"))], "t1")
    assert leases.release_lease(name, token)  # node-a stalled; node-b takes over
    assert leases.acquire_lease(name, "node-b", 30) is not None
    event = MessageEvent.append(Message.user("b"))
    state.emit(event)
    with pytest.raises(WorkspaceError) as info:
        store.append_event(event, "t2")
    assert info.value.code == "E_STORE_LEASE_LOST"
    with pytest.raises(WorkspaceError):
        store.commit(state)
    assert rows(url, "SELECT count(*) FROM goondan_messages") == [(1,)]
    assert rows(url, "SELECT count(*) FROM goondan_events") == [(0,)]
    store.close()
    backend.close()


def test_a_write_broken_before_its_commit_runs_again_one_lost_committing_is_unavailable(
    url: str,
) -> None:
    killed: list[int] = []

    def fence(conn: Any) -> None:  # the first write's pooled session ends before its commit
        if not killed:
            killed.append(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    backend = PostgresBackend.open(url, fence=fence)
    store = backend.open_instance(WS, "planner", "k")
    state = store.load()
    first = MessageEvent.append(Message.user("a"))
    state.emit(first)
    store.append_event(first, "t1")  # retried on a fresh connection: nothing had committed
    assert killed and rows(url, "SELECT count(*) FROM goondan_events") == [(1,)]
    execute(url, """
        CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER die_at_commit AFTER INSERT ON goondan_events
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION die();
        """)
    second = MessageEvent.append(Message.user("b"))
    state.emit(second)
    with pytest.raises(WorkspaceError) as info:
        store.append_event(second, "t1")
    assert info.value.code == "E_STORE_UNAVAILABLE"
    assert "while committing" in info.value.message
    password = url.split(":")[2].split("@")[0]
    assert password not in info.value.message and password not in str(info.value.location)
    store.close()
    backend.close()


def test_a_terminated_lock_session_refuses_the_next_commit_and_writes_nothing(url: str) -> None:
    backend = PostgresBackend.open(url)
    store = backend.open_instance(WS, "planner", "k")
    state = turn(store, store.load(), [MessageEvent.append(Message.user("a"))], "t1")
    event = MessageEvent.append(Message.user("b"))
    state.emit(event)
    store.append_event(event, "t2")
    pid = backend.db.locks.pid
    assert pid is not None
    terminate(url, pid)  # a restart, a take-over …
    other = PostgresBackend.open(url)
    try:
        mine = other.open_instance(WS, "planner", "k")  # the lock went with the session
        mine.close()
        for write in (lambda: store.commit(state), lambda: store.set_status("idle"),
                      lambda: store.append_event(event, "t2")):
            with pytest.raises(WorkspaceError) as info:
                write()
            assert info.value.code == "E_INSTANCE_LOCK_LOST"
            assert "reopen" in str(info.value.suggestion)
        assert rows(url, "SELECT count(*) FROM goondan_messages") == [(1,)]
        assert rows(url, "SELECT count(*) FROM goondan_events") == [(1,)]
        store.close()
        again = backend.open_instance(WS, "planner", "k")  # a new lock session
        assert [m.text for m in again.load().next_messages] == ["a", "b"]
        assert backend.db.locks.pid not in (None, pid)
        with pytest.raises(InstanceLockedError):
            other.open_instance(WS, "planner", "k")
        again.close()
    finally:
        other.close()
        backend.close()


def test_a_lock_session_found_ended_by_the_next_open_refuses_the_older_instances_writes(
    url: str,
) -> None:
    backend = PostgresBackend.open(url)
    first = backend.open_instance(WS, "planner", "a")
    state = first.load()
    pid = backend.db.locks.pid
    terminate(url, pid)
    second = backend.open_instance(WS, "planner", "b")  # finds it ended: a new lock session
    assert backend.db.locks.pid not in (None, pid)
    event = MessageEvent.append(Message.user("late"))
    state.emit(event)
    with pytest.raises(WorkspaceError) as info:  # known lost: refused without a round trip
        first.append_event(event, "t1")
    assert info.value.code == "E_INSTANCE_LOCK_LOST"
    assert rows(url, "SELECT count(*) FROM goondan_events") == [(0,)]
    second.close()
    first.close()
    backend.close()


def test_one_process_holds_the_locks_of_all_its_open_instances_in_one_session(
    url: str,
) -> None:
    named = url + ("&" if "?" in url else "?") + "application_name=goondan-many"
    backend = PostgresBackend.open(named)
    other = PostgresBackend.open(url)
    opened: list[Any] = []
    try:
        for n in range(150):  # more than the test server's max_connections (100)
            opened.append(backend.open_instance(WS, "worker", f"k{n}"))
        sessions = rows(url, "SELECT count(*) FROM pg_stat_activity "
                        "WHERE application_name = 'goondan-many'")[0][0]
        assert sessions <= 1 + 4  # the lock session + the pool, whatever the instances
        for opener in (other, backend):  # another process, and this one again
            with pytest.raises(InstanceLockedError):
                opener.open_instance(WS, "worker", "k7")
        with pytest.raises(InstanceLockedError) as info:
            backend.delete_instance(WS, "worker", "k7")
        assert "this process" in info.value.message
        opened.pop(7).close()
        other.open_instance(WS, "worker", "k7").close()
        assert backend.delete_instance(WS, "worker", "k7") is True
    finally:
        for store in opened:
            store.close()
        other.close()
        backend.close()


def test_writes_from_two_threads_keep_their_transactions_apart(url: str) -> None:
    # The runtime appends a turn's events from the event loop while its "processing" status
    # write runs in a worker thread: both use the instance's one connection.
    import threading

    backend = PostgresBackend.open(url)
    store = backend.open_instance(WS, "planner", "k")
    state = store.load()
    failures: list[BaseException] = []

    def statuses() -> None:
        try:
            for n in range(150):
                store.set_status("processing" if n % 2 else "idle")
        except BaseException as exc:  # reported below
            failures.append(exc)

    worker = threading.Thread(target=statuses)
    worker.start()
    for n in range(150):
        event = MessageEvent.append(Message.user(f"m{n}"))
        state.emit(event)
        store.append_event(event, "t1")
    worker.join(60)
    assert failures == []
    store.commit(state)
    store.close()
    again = backend.open_instance(WS, "planner", "k")
    assert [m.text for m in again.load().next_messages] == [f"m{n}" for n in range(150)]
    again.close()
    backend.close()


def test_queue_writes_and_approval_requests_are_fenced_too(url: str) -> None:
    from goondan.storage.postgres.backend import lease_fence
    from goondan.storage.postgres.leases import PostgresLeases

    backend = PostgresBackend.open(url)
    leases = PostgresLeases(backend.db)
    name = f"orchestrator/{WS}/main"
    token = leases.acquire_lease(name, "node-a", 30)
    assert token is not None
    fenced = backend.with_fence(lease_fence(name, token))
    queue = fenced.queue(WS, "inputs/main")
    queue.append_entry({"id": "e1", "type": "message"}, "planner", "k")
    assert leases.release_lease(name, token)
    assert leases.acquire_lease(name, "node-b", 30) is not None
    for write in (lambda: queue.append_entry({"id": "e2", "type": "message"}, "planner", "k"),
                  lambda: queue.claim("planner", "k", "e1"),
                  lambda: queue.confirm("planner", "k", "e1"),
                  lambda: queue.take("planner", "k", owner="1:1"),
                  lambda: fenced.approvals(WS).request(
                      agent="planner", instance_key="k", turn_id="t", tool_call_id="c",
                      tool="x__y", args={})):
        with pytest.raises(WorkspaceError) as info:
            write()
        assert info.value.code == "E_STORE_LEASE_LOST"
    assert [e.id for e in backend.queue(WS, "inputs/main").open_entries()] == ["e1"]
    assert backend.approvals(WS).list() == []
    backend.close()
