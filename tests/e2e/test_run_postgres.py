"""``goondan run`` and ``goondan send`` on a PostgreSQL store (issue 36; docs/orchestrator.md
"The store"), against the real PostgreSQL of tests/support/postgres.py.

The store URL reaches ``goondan run`` and ``goondan send`` through ``GOONDAN_STORE`` (as a
deployment passes a password); the state root given with ``--state-root`` keeps only the
runtime files (pid records, control socket, logs): no conversation, journal, inbox or approval
is written there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from goondan.swarm.state import list_live_processes, read_active
from tests.support import soak
from tests.support.backends import apply_schema
from tests.support.connector_e2e import FAKE_KEY, base_bundle, goondan_run, start_run, wait_for
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _goondan(state_root: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY, "GOONDAN_STORE": url},
    )


def _query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return list(conn.execute(sql, params).fetchall())


def _messages(url: str, key: str) -> list[dict[str, Any]]:
    rows = _query(url, "SELECT m.message FROM goondan_messages m JOIN goondan_instances i "
                  "ON i.id = m.instance_id WHERE i.instance_key = %s ORDER BY m.position", key)
    return [json.loads(row[0]) for row in rows]


def _texts(url: str, key: str) -> list[str]:
    out: list[str] = []
    for record in _messages(url, key):
        content = record["data"]["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out.extend(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return out


def _count(url: str, key: str, marker: str) -> int:
    return sum(text.count(marker) for text in _texts(url, key))


def _no_jsonl_state(state_root: Path) -> None:
    """Nothing of the store's under the local state root."""
    for pattern in ("workspaces/*/instances", "workspaces/*/inputs", "workspaces/*/approvals"):
        assert not list(state_root.glob(pattern)), pattern


@pytest.fixture
def store_url(postgres_url: str) -> str:
    apply_schema(postgres_url)
    return postgres_url


def _running(state_root: Path, proc: subprocess.Popen[bytes]) -> bool:
    active = read_active(state_root)
    return (active is not None and active.pid == proc.pid) or proc.poll() is not None


@pytest.mark.soak
@pytest.mark.timeout(soak.trials(240, 3600))
def test_sigkill_of_goondan_run_after_a_send_ack_delivers_the_input_once_from_postgres(
    state_root: Path, tmp_path: Path, store_url: str,
) -> None:
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, "")
    trials = soak.trials(2, 50)
    env = {"GOONDAN_STORE": store_url}
    for i in range(trials):
        proc = start_run(bundle, state_root, env)
        try:
            wait_for(lambda: _running(state_root, proc), 60, "the orchestrator")  # noqa: B023
            sent = _goondan(state_root, store_url, "send", "--bundle", str(bundle), "-k",
                            "durable", "--no-wait", f"<<p-{i}>>")
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.strip().startswith("evt")
            # durable before the acknowledgement: the row is committed
            assert _query(store_url, "SELECT count(*) FROM goondan_inbox WHERE id = %s",
                          sent.stdout.strip()) == [(1,)]
        finally:
            proc.send_signal(signal.SIGKILL)  # the orchestrator alone, right after the ack
            proc.wait(timeout=30)
    proc = start_run(bundle, state_root, env)
    try:
        wait_for(lambda: _running(state_root, proc), 60, "the orchestrator")
        wait_for(lambda: all(_count(store_url, "durable", f"<<p-{i}>>") >= 1
                             for i in range(trials)), 60, "every input's turn")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert [_count(store_url, "durable", f"<<p-{i}>>") for i in range(trials)] == [1] * trials
    _no_jsonl_state(state_root)
    print(f"{trials} orchestrator SIGKILLs after a send ack (PostgreSQL): each input once")


def _control(state_root: Path, request: dict[str, Any]) -> dict[str, Any]:
    import socket

    active = read_active(state_root)
    assert active is not None and active.control_socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(active.control_socket)
        sock.sendall(json.dumps(request).encode() + b"\n")
        answer: dict[str, Any] = json.loads(sock.makefile("rb").readline())
    return answer


def test_an_approval_parks_in_postgres_and_its_decision_resumes_the_turn(
    state_root: Path, tmp_path: Path, store_url: str,
) -> None:
    """The approvals example (tests/e2e/test_approvals_run.py) on PostgreSQL: the parked turn's
    approval is a row of the store; a decision stored there and announced to the swarm (what
    ``goondan approvals approve`` does) resumes the turn, which runs the tool once."""
    from goondan.storage.postgres.backend import PostgresBackend
    from tests.e2e.test_approvals_run import _bundle
    from tests.support.fake_provider import FakeProvider, FakeReply

    with FakeProvider() as fake:
        fake.enqueue(FakeReply.calls(("files__delete", {"path": "old.txt"})),
                     FakeReply.reply("old.txt is gone."))
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        env = {"GOONDAN_STORE": store_url, FAKE_KEY_ENV: "sk-approvals-test"}
        with goondan_run(bundle, state_root, env) as proc:
            sent = subprocess.run(
                [sys.executable, "-m", "goondan", "--state-root", str(state_root), "send",
                 "--bundle", str(bundle), "--json", "delete old.txt"],
                cwd=REPO, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
            assert sent.returncode == 0, sent.stderr
            answer = json.loads(sent.stdout)
            assert answer["status"] == "waitingForApproval"
            [row] = answer["approvals"]
            [(workspace, status)] = _query(
                store_url, "SELECT workspace_id, decision IS NULL FROM goondan_approvals "
                "WHERE id = %s", row["id"])
            assert status is True
            assert [a["id"] for a in _control(state_root, {"command": "status"})["approvals"]] \
                == [row["id"]]
            assert not (bundle / "work" / "runs.log").exists()
            backend = PostgresBackend.open(store_url)
            try:
                backend.approvals(workspace).decide(row["id"], approve=True, by="test",
                                                    via="test")
            finally:
                backend.close()
            assert _control(state_root, {"command": "approval", "id": row["id"]})["applied"]
            wait_for(lambda: _count(store_url, "default", "old.txt is gone.") == 1, 30,
                     "the resumed turn's answer")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    assert (bundle / "work" / "runs.log").read_text().split()[0] == "delete"
    assert len((bundle / "work" / "runs.log").read_text().splitlines()) == 1
    assert not (bundle / "work" / "old.txt").exists()
    _no_jsonl_state(state_root)


def test_webhook_events_acknowledged_before_a_sigkill_run_once_from_the_postgres_inbox(
    state_root: Path, tmp_path: Path, store_url: str,
) -> None:
    """A Connection's inbox is a queue of the store: an event answered 200 just before the
    orchestrator's SIGKILL runs once after the restart, and its id is refused as a duplicate
    afterwards; the connector's ``ctx.state_dir`` stays on this machine."""
    from tests.e2e.test_connector_delivery import WEBHOOK_CONNECTION, post_webhook
    from tests.support.connector_e2e import address_file, webhook_port

    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, WEBHOOK_CONNECTION)
    env = {"GOONDAN_STORE": store_url}
    trials = 1  # the orchestrator SIGKILL trials of the Swarm's inbox are above
    for i in range(trials):
        proc = start_run(bundle, state_root, env)
        try:
            answer = post_webhook(webhook_port(state_root, "http-in"), f"evt-{i}", f"<<p-{i}>>")
            assert (answer["id"], answer["duplicate"]) == (f"evt-{i}", False)
        finally:
            proc.send_signal(signal.SIGKILL)  # the orchestrator alone, the moment the 200 arrived
            proc.wait(timeout=30)
        wait_for(lambda: address_file(state_root, "http-in") is None, 30,
                 "the orphaned connector to stop")
    proc = start_run(bundle, state_root, env)
    try:
        answer = post_webhook(webhook_port(state_root, "http-in"), "evt-0", "<<again>>")
        assert answer["duplicate"] is True
        wait_for(lambda: all(_count(store_url, "durable", f"<<p-{i}>>") >= 1
                             for i in range(trials)), 60, "every event's turn")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert [_count(store_url, "durable", f"<<p-{i}>>") for i in range(trials)] == [1] * trials
    assert _count(store_url, "durable", "<<again>>") == 0
    rows = _query(store_url, "SELECT scope, id, state FROM goondan_inbox ORDER BY id")
    assert rows == [("connections/default/http-in", f"evt-{i}", "started")
                    for i in range(trials)]
    _no_jsonl_state(state_root)
    assert not list(state_root.glob("workspaces/*/connections/*/*/inbox.jsonl"))


@pytest.mark.parametrize(("store", "extra", "expected"), [
    ("postgresql://goondan:pw-s3cret@127.0.0.1:1/goondan", (), "E_STORE_UNAVAILABLE"),
    ("postgresql://goondan:pw-s3cret@127.0.0.1:1/goondan", ("--engine", "ray"),
     "E_STORE_UNAVAILABLE"),  # checked before Ray starts
    ("mysql://goondan:pw-s3cret@127.0.0.1/goondan", (), "E_STORE_URL"),
])
def test_run_with_an_unusable_store_fails_before_starting_and_masks_the_password(
    state_root: Path, tmp_path: Path, store: str, extra: tuple[str, ...], expected: str,
) -> None:
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, "")
    done = subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), "run", "--bundle",
         str(bundle), "--input", "hi", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**os.environ, "GOONDAN_STORE": store},
    )
    assert done.returncode != 0
    assert expected in done.stderr, done.stderr
    assert "pw-s3cret" not in done.stderr + done.stdout
    assert not list(state_root.glob("runtime/logs/*/*.log"))  # nothing was started


def _cmdlines(state_root: Path) -> str:
    """The command lines of the swarm's orchestrator and agent processes."""
    active = read_active(state_root)
    assert active is not None
    pids = [active.pid] + [row.pid for row in list_live_processes(state_root) if row.pid]
    out = ""
    for pid in pids:
        try:
            out += Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace") + "\n"
        except OSError:
            continue
    return out


def test_run_send_attach_and_restart_with_a_postgres_store_keep_the_state_in_postgres_only(
    state_root: Path, tmp_path: Path, store_url: str,
) -> None:
    """``run --detach --store URL``: the background orchestrator gets the URL in its
    environment, its agent processes through the spawn pipe (on no command line); ``send`` and
    an attaching ``run`` reach it with the same store (another store is ``E_STORE_MISMATCH``);
    ``restart --fresh`` deletes the agent's instances from the store; the conversation and the
    inputs are in PostgreSQL only, the runtime files under the local state root."""
    from urllib.parse import urlsplit

    from goondan.storage.url import mask_url

    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, "")
    env = {k: v for k, v in os.environ.items() if k != "GOONDAN_STORE"}
    password = urlsplit(store_url).password
    assert password

    def goondan(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
            cwd=REPO, capture_output=True, text=True, timeout=120, env=env)

    started = goondan("run", "--detach", "--store", store_url, "--bundle", str(bundle))
    assert started.returncode == 0, started.stderr
    try:
        active = read_active(state_root)
        assert active is not None and active.store == mask_url(store_url)
        sent = goondan("send", "--store", store_url, "--bundle", str(bundle), "-k", "pg",
                       "<<hello>>")
        assert (sent.returncode, sent.stdout.strip()) == (0, "ok"), sent.stderr
        assert _count(store_url, "pg", "<<hello>>") == 1
        assert password not in _cmdlines(state_root)
        other = store_url.rsplit("/", 1)[0] + "/another"
        refused = goondan("send", "--store", other, "--bundle", str(bundle), "-k", "pg", "x")
        assert refused.returncode != 0 and "[E_STORE_MISMATCH]" in refused.stderr
        # restart --full starts the swarm again from GOONDAN_STORE: without it, nothing stops
        no_url = goondan("restart", "--bundle", str(bundle), "--full")
        assert no_url.returncode != 0 and "[E_STORE_MISMATCH]" in no_url.stderr
        assert read_active(state_root) == active
        fresh = goondan("restart", "--bundle", str(bundle), "--fresh", "--agent", "assistant")
        assert fresh.returncode == 0, fresh.stderr
        assert _messages(store_url, "pg") == []
        attached = goondan("run", "--store", store_url, "--bundle", str(bundle), "-k", "pg",
                           "--input", "<<attached>>")
        assert attached.returncode == 0, attached.stderr
    finally:
        stopped = goondan("stop", "--bundle", str(bundle))
    assert stopped.returncode == 0, stopped.stderr
    assert [m["data"]["role"] for m in _messages(store_url, "pg")] == ["user", "assistant"]
    assert _count(store_url, "pg", "<<attached>>") == 1
    # each input's start is final: only its id is kept in the queue
    assert _query(store_url, "SELECT DISTINCT state, event FROM goondan_inbox") == [
        ("started", None)]
    _no_jsonl_state(state_root)
    assert list(state_root.glob("runtime/logs/*/orchestrator.stderr.log"))  # runtime: local
    assert password not in "".join(  # the URL's password is in no log
        p.read_text(errors="replace") for p in state_root.glob("runtime/logs/*/*.log"))


@pytest.mark.isolation("pooled")  # its subject is pooled isolation
def test_pooled_run_keeps_its_conversations_in_postgres(
    state_root: Path, tmp_path: Path, store_url: str,
) -> None:
    """``policy.isolation: pooled`` (here ``GOONDAN_ISOLATION``) with ``--store``: the hosted
    instances open the swarm's store, not the local state root."""
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, "")
    proc = start_run(bundle, state_root, {"GOONDAN_STORE": store_url,
                                          "GOONDAN_ISOLATION": "pooled"})
    try:
        wait_for(lambda: _running(state_root, proc), 60, "the orchestrator")
        sent = _goondan(state_root, store_url, "send", "--bundle", str(bundle), "-k", "pooled",
                        "--no-wait", "<<pooled-1>>")
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: len(_messages(store_url, "pooled")) >= 2, 60, "the turn in the store")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    assert _count(store_url, "pooled", "<<pooled-1>>") == 1
    _no_jsonl_state(state_root)
    # the host wrote the turn's spans into the store (docs/storage.md "Spans")
    assert _query(store_url, "SELECT DISTINCT agent_name, instance_key, status FROM goondan_spans "
                  "WHERE span LIKE '%%\"kind\":\"turn\"%%'") == [("assistant", "pooled", "ok")]
