"""Orchestrator failover on a PostgreSQL store (issue 36 item 3; docs/orchestrator.md
"Failover"): two ``goondan run --foreground`` nodes on one store, each with its own local state
root (nothing shared but the database). One is active, the other stands by; the active one dies
(SIGKILL of its whole process group) or is stopped past its lease (SIGSTOP, then SIGCONT) in
the middle of a turn whose tool waits on a gate file this test controls.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.swarm.state import read_active
from tests.support import soak
from tests.support.backends import apply_schema
from tests.support.connector_e2e import FAKE_KEY, wait_for
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]
REPO = Path(__file__).resolve().parents[2]
TAKEOVER_LIMIT = 5.0  # seconds from the active node's death to the standby holding the lease

GATE_TOOL = '''
import asyncio
from pathlib import Path


async def wait(ctx, input):
    gate = Path(input["gate"])
    Path(input["log"]).open("a").write(f"{ctx.tool_call_id}\\n")
    while not gate.exists():
        await asyncio.sleep(0.02)
    return "gate passed"


handlers = {"wait": wait}
'''


def _bundle(root: Path, gate: Path, log: Path) -> Path:
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "gate.py").write_text(GATE_TOOL, encoding="utf-8")
    (root / "goondan.yaml").write_text(f"""\
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: failover}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: fake}}
spec:
  provider: scripted
  model: fake
  options:
    loop: true
    script:
      - when: "^go"
        steps:
          - toolCalls:
              - {{name: gate__wait, args: {{gate: "{gate}", log: "{log}"}}}}
          - text: "<<answer>>"
      - text: unused
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: gate}}
spec:
  entry: ./tools/gate.py
  exports:
    - name: wait
      description: Wait until the gate file exists.
      idempotent: true
      parameters:
        type: object
        properties: {{gate: {{type: string}}, log: {{type: string}}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: worker}}
spec:
  modelConfig: {{modelRef: Model/fake}}
  prompts: {{systemPrompt: You are a test agent.}}
  tools: [{{ref: Tool/gate}}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/worker
  agents: [{{ref: Agent/worker}}]
""", encoding="utf-8")
    return root


def _query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return list(conn.execute(sql, params).fetchall())


def _goondan(state_root: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY, "GOONDAN_STORE": url},
    )


def _holder_pid(url: str) -> int | None:
    """The pid in the owner record of the held swarm lease."""
    rows = _query(url, "SELECT owner FROM goondan_leases WHERE name LIKE 'swarm:%%' "
                  "AND expires_at > clock_timestamp()")
    return int(json.loads(rows[0][0])["pid"]) if rows else None


def _standby_pids(url: str) -> set[int]:
    rows = _query(url, "SELECT owner FROM goondan_leases WHERE name LIKE 'standby:%%' "
                  "AND expires_at > clock_timestamp()")
    return {int(json.loads(owner)["pid"]) for (owner,) in rows}


def _texts(url: str, key: str) -> list[str]:
    rows = _query(url, "SELECT m.message FROM goondan_messages m JOIN goondan_instances i "
                  "ON i.id = m.instance_id WHERE i.instance_key = %s ORDER BY m.position", key)
    out: list[str] = []
    for (text,) in rows:
        content = json.loads(text)["data"]["content"]
        parts = [content] if isinstance(content, str) else [
            str(p.get("text") or p.get("output") or p.get("result") or p) for p in content]
        out.extend(parts)
    return out


def _count(url: str, key: str, marker: str) -> int:
    return sum(text.count(marker) for text in _texts(url, key))


def _turn_started(url: str, key: str) -> bool:
    return bool(_query(url, "SELECT 1 FROM goondan_turn_records r JOIN goondan_instances i "
                       "ON i.id = r.instance_id WHERE i.instance_key = %s AND r.record "
                       "LIKE '%%toolCall.started%%'", key))


def _turn_spans(url: str, key: str) -> list[tuple[str, str]]:
    """(trace id, status) of the turn spans of instance ``key`` in the store's span table."""
    return _query(url, "SELECT trace_id, status FROM goondan_spans WHERE instance_key = %s AND "
                  "span LIKE '%%\"kind\":\"turn\"%%' ORDER BY start_nanos", key)


def _start(bundle: Path, root: Path, url: str) -> subprocess.Popen[bytes]:
    """``goondan run --foreground`` as a node: its own process group, stderr kept beside its
    state root (node-a.err) for a failing test's reader."""
    root.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.err").open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "goondan", "--state-root", str(root), "run", "--bundle",
             str(bundle), "--foreground"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True, env={**os.environ, FAKE_KEY_ENV: FAKE_KEY,
                                         "GOONDAN_STORE": url})


def _active_here(state_root: Path, proc: subprocess.Popen[bytes]) -> bool:
    active = read_active(state_root)
    return active is not None and active.pid == proc.pid


def _kill_node(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


@pytest.fixture
def store_url(postgres_url: str) -> str:
    apply_schema(postgres_url)
    return postgres_url


def _start_pair(tmp_path: Path, url: str, bundle: Path) -> tuple[list[Any], list[Path]]:
    roots = [tmp_path / "node-a", tmp_path / "node-b"]
    first = _start(bundle, roots[0], url)
    wait_for(lambda: _active_here(roots[0], first) or first.poll() is not None, 60, "node a")
    assert first.poll() is None, "node a exited at start"
    second = _start(bundle, roots[1], url)
    wait_for(lambda: second.pid in _standby_pids(url) or second.poll() is not None, 60,
             "node b standing by")
    assert second.poll() is None, "node b exited instead of standing by"
    return [first, second], roots


def test_status_names_the_active_node_and_its_standby(tmp_path: Path, store_url: str) -> None:
    bundle = _bundle(tmp_path / "bundle", tmp_path / "gate", tmp_path / "calls.log")
    procs, roots = _start_pair(tmp_path, store_url, bundle)
    try:
        assert read_active(roots[1]) is None  # the standby started nothing
        shown = _goondan(roots[1], store_url, "status", "--json")
        assert shown.returncode == 0, shown.stderr
        doc = json.loads(shown.stdout)
        assert doc["active"]["pid"] == procs[0].pid
        assert doc["active"]["stateRoot"] == str(roots[0])
        assert doc["active"]["host"] and doc["active"]["swarm"] == "default"
        assert [s["pid"] for s in doc["standbys"]] == [procs[1].pid]
        assert doc["standbys"][0]["stateRoot"] == str(roots[1])
        # a clean stop releases the lease: the standby takes over at once, not after the TTL
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(timeout=60) == 0
        wait_for(lambda: _active_here(roots[1], procs[1]), 30, "node b active")
    finally:
        for proc in procs:
            _kill_node(proc)
            proc.wait(timeout=30)


@pytest.mark.soak
@pytest.mark.timeout(soak.trials(240, 3600))
def test_sigkill_of_the_active_node_mid_turn_the_standby_resumes_the_turn_once(
    tmp_path: Path, store_url: str,
) -> None:
    """Each trial kills the active node (its whole process group) while its turn's tool waits
    on the gate; the standby holds the lease within TAKEOVER_LIMIT, resumes the turn, and its
    answer is stored once; the killed node is started again as the next standby."""
    gate, log = tmp_path / "gate", tmp_path / "calls.log"
    bundle = _bundle(tmp_path / "bundle", gate, log)
    procs, roots = _start_pair(tmp_path, store_url, bundle)
    trials = soak.trials(2, 50)
    took: list[float] = []
    try:
        for i in range(trials):
            gate.unlink(missing_ok=True)
            active, standby = (0, 1) if i % 2 == 0 else (1, 0)
            key = f"turn-{i}"
            sent = _goondan(roots[active], store_url, "send", "--bundle", str(bundle), "-k", key,
                            "--no-wait", "go")
            assert sent.returncode == 0, sent.stderr
            wait_for(lambda: _turn_started(store_url, key), 60, "the tool call")  # noqa: B023
            wait_for(lambda: _turn_spans(store_url, key), 10,  # noqa: B023
                     "the running turn's span, written by the active node's agent process")
            killed_at = time.monotonic()
            _kill_node(procs[active])
            procs[active].wait(timeout=30)
            wait_for(lambda: _holder_pid(store_url) == procs[standby].pid, 30,  # noqa: B023
                     "the standby's lease")
            took.append(time.monotonic() - killed_at)
            gate.touch()
            wait_for(lambda: _count(store_url, key, "<<answer>>") >= 1, 60,  # noqa: B023
                     "the resumed turn's answer")
            procs[active] = _start(bundle, roots[active], store_url)
            wait_for(lambda: procs[active].pid in _standby_pids(store_url), 60,  # noqa: B023
                     "the next standby")
            assert _count(store_url, key, "<<answer>>") == 1
            assert _count(store_url, key, "gate passed") == 1
            # one trace, two nodes: the killed node's turn cut short, the standby's resumed one
            turns = _turn_spans(store_url, key)
            assert [status for _, status in turns] == ["running", "ok"], turns
            assert turns[0][0] == turns[1][0]
        # ... and one command shows that trace, from either node's state root
        shown = _goondan(roots[standby], store_url, "inspect", "trace", "--last", "--json",
                         "--flat")
        assert shown.returncode == 0, shown.stderr
        spans = json.loads(shown.stdout)["spans"]
        assert [s["status"] for s in spans if s["kind"] == "turn"] == ["running", "ok"]
    finally:
        for proc in procs:
            _kill_node(proc)
            proc.wait(timeout=30)
    assert _query(store_url, "SELECT count(*) FROM goondan_turn_records") == [(0,)]
    print(f"{trials} SIGKILLs of the active node: lease taken over in "
          f"{min(took):.2f}-{max(took):.2f} s; each answer stored once")
    assert max(took) <= TAKEOVER_LIMIT, took


def test_a_stale_leader_stopped_past_its_lease_writes_nothing_after_the_takeover(
    tmp_path: Path, store_url: str,
) -> None:
    """SIGSTOP of the active node's whole process group mid-turn: the standby takes the lease
    and the instance (the stopped agent's session still holds its lock), answers the turn;
    SIGCONT: the stale node's tool returns too, but nothing it writes is stored, and it stops."""
    gate, log = tmp_path / "gate", tmp_path / "calls.log"
    bundle = _bundle(tmp_path / "bundle", gate, log)
    procs, roots = _start_pair(tmp_path, store_url, bundle)
    try:
        sent = _goondan(roots[0], store_url, "send", "--bundle", str(bundle), "-k", "stale",
                        "--no-wait", "go")
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: _turn_started(store_url, "stale"), 60, "the tool call")
        _kill_node(procs[0], signal.SIGSTOP)
        wait_for(lambda: _holder_pid(store_url) == procs[1].pid, 30, "the takeover")
        wait_for(lambda: len(log.read_text().splitlines()) == 2, 60, "the tool again on b")
        gate.touch()
        wait_for(lambda: _count(store_url, "stale", "<<answer>>") >= 1, 60, "b's answer")
        wait_for(lambda: _query(store_url, "SELECT state FROM goondan_inbox") == [("started",)]
                 and not _query(store_url, "SELECT 1 FROM goondan_turn_records"), 30,
                 "b's turn to end (its start confirmed after the answer)")
        rows = ("SELECT (SELECT count(*) FROM goondan_messages), (SELECT count(*) FROM "
                "goondan_events), (SELECT count(*) FROM goondan_turn_records), (SELECT "
                "string_agg(id || state, ',') FROM goondan_inbox)")
        before = _query(store_url, rows)
        _kill_node(procs[0], signal.SIGCONT)  # its tool sees the gate and returns now
        assert procs[0].wait(timeout=60) != 0  # it stepped down: E_STORE_LEASE_LOST
        assert "[E_STORE_LEASE_LOST]" in (tmp_path / "node-a.err").read_text()
        assert _query(store_url, rows) == before  # no row written by the stale node
        assert _count(store_url, "stale", "<<answer>>") == 1
        assert _count(store_url, "stale", "gate passed") == 1
        assert _holder_pid(store_url) == procs[1].pid
        assert procs[1].poll() is None
    finally:
        for proc in procs:
            _kill_node(proc, signal.SIGCONT)
            _kill_node(proc)
            proc.wait(timeout=30)


def _post_with_retries(roots: list[Path], event_id: str, text: str,
                       timeout: float = 90) -> dict[str, Any]:
    """POST one signed webhook event to whichever node answers: each attempt tries every node's
    listening port (its address.json) until one answers 200 — a client that fails over."""
    from tests.e2e.test_connector_delivery import post_webhook
    from tests.support.connector_e2e import address_file

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for root in roots:
            path = address_file(root, "http-in")
            try:
                port = int(json.loads(path.read_text())["port"]) if path else 0
                if port:
                    return post_webhook(port, event_id, text)
            except (OSError, ValueError, KeyError, AssertionError):
                continue  # not listening (a dead node's stale address), refused, reset
        time.sleep(0.05)  # a retry's back-off while no node listens yet
    raise AssertionError(f"no node answered event {event_id}")


@pytest.mark.soak
@pytest.mark.timeout(soak.trials(240, 3600))
def test_webhook_events_sent_with_retries_during_a_failover_each_run_once(
    tmp_path: Path, store_url: str,
) -> None:
    """A client posts events one after another, retrying against the other node's port; the
    active node is SIGKILLed in the middle: every event's turn is stored exactly once. One
    trial under ``make test``, 50 under ``make soak`` (each with two new nodes, one store)."""
    for trial in range(soak.trials(1, 50)):
        _webhook_failover_trial(tmp_path / f"trial-{trial}", store_url, f"t{trial}-")


def _webhook_failover_trial(where: Path, store_url: str, tag: str) -> None:
    from tests.e2e.test_connector_delivery import WEBHOOK_CONNECTION
    from tests.support.connector_e2e import base_bundle

    bundle = base_bundle(where / "bundle", None, {"assistant": ""}, WEBHOOK_CONNECTION)
    procs, roots = _start_pair(where, store_url, bundle)
    events = 12
    answers: list[dict[str, Any]] = []
    try:
        for i in range(events):
            if i == events // 3:
                _kill_node(procs[0])  # the active node dies between two events' sends
            answers.append(_post_with_retries(roots, f"{tag}evt-{i}", f"<<{tag}p-{i}>>"))
        wait_for(lambda: all(_count(store_url, "durable", f"<<{tag}p-{i}>>") >= 1
                             for i in range(events)), 90, "every event's turn")
        assert _holder_pid(store_url) == procs[1].pid
    finally:
        for proc in procs:
            _kill_node(proc)
            proc.wait(timeout=30)
    assert [a["id"] for a in answers] == [f"{tag}evt-{i}" for i in range(events)]
    assert [_count(store_url, "durable", f"<<{tag}p-{i}>>") for i in range(events)] == [1] * events
    rows = _query(store_url, "SELECT id, state FROM goondan_inbox ORDER BY id")
    assert sorted(r for r in rows if str(r[0]).startswith(tag)) == sorted(
        (f"{tag}evt-{i}", "started") for i in range(events))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"


def _serving(state_root: Path, pid: int) -> bool:
    active = read_active(state_root)
    return active is not None and active.pid == pid and active.control_socket is not None


def test_run_detach_as_a_standby_returns_at_once_and_takes_over_after_a_sigkill(
    tmp_path: Path, store_url: str,
) -> None:
    """``run --detach`` on a node that finds the lease held returns success saying it stands
    by; its background orchestrator takes over once the active node is SIGKILLed, answers a
    ``send``, and ``goondan stop`` ends it."""
    bundle = _bundle(tmp_path / "bundle", tmp_path / "gate", tmp_path / "calls.log")
    roots = [tmp_path / "node-a", tmp_path / "node-b"]
    first = _start(bundle, roots[0], store_url)
    standby_pid = 0
    try:
        wait_for(lambda: _active_here(roots[0], first) or first.poll() is not None, 60, "node a")
        assert first.poll() is None, "node a exited at start"
        roots[1].mkdir()
        started = time.monotonic()
        detached = _goondan(roots[1], store_url, "--json", "run", "--bundle", str(bundle),
                            "--detach", "--ready-timeout", "30")
        assert detached.returncode == 0, detached.stdout + detached.stderr
        assert time.monotonic() - started < 20  # it did not wait out --ready-timeout
        doc = json.loads(detached.stdout)
        standby_pid = doc["pid"]
        assert doc["standby"] is True and doc["active"]["pid"] == first.pid
        assert doc["active"]["stateRoot"] == str(roots[0])
        assert _pid_alive(standby_pid) and standby_pid in _standby_pids(store_url)
        shown = _goondan(roots[1], store_url, "status", "--bundle", str(bundle), "--json")
        assert shown.returncode == 0, shown.stderr
        (local,) = json.loads(shown.stdout)["swarms"]
        assert local["pid"] == standby_pid and local["standby"]["pid"] == first.pid
        _kill_node(first)
        first.wait(timeout=30)
        wait_for(lambda: _holder_pid(store_url) == standby_pid, 30, "node b holds the lease")
        wait_for(lambda: _serving(roots[1], standby_pid), 30, "node b's swarm runs")
        shown = _goondan(roots[1], store_url, "status", "--json")
        assert json.loads(shown.stdout)["active"]["pid"] == standby_pid
        sent = _goondan(roots[1], store_url, "send", "--bundle", str(bundle), "hello")
        assert sent.returncode == 0 and "unused" in sent.stdout, sent.stdout + sent.stderr
        stopped = _goondan(roots[1], store_url, "stop", "--bundle", str(bundle))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        wait_for(lambda: not _pid_alive(standby_pid), 30, "node b gone")
    finally:
        _kill_node(first)
        first.wait(timeout=30)
        if standby_pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(standby_pid, signal.SIGKILL)


def test_goondan_stop_ends_a_detached_standby(tmp_path: Path, store_url: str) -> None:
    bundle = _bundle(tmp_path / "bundle", tmp_path / "gate", tmp_path / "calls.log")
    roots = [tmp_path / "node-a", tmp_path / "node-b"]
    first = _start(bundle, roots[0], store_url)
    standby_pid = 0
    try:
        wait_for(lambda: _active_here(roots[0], first) or first.poll() is not None, 60, "node a")
        roots[1].mkdir()
        detached = _goondan(roots[1], store_url, "run", "--bundle", str(bundle), "--detach",
                            "--ready-timeout", "30")
        assert detached.returncode == 0, detached.stdout + detached.stderr
        assert "standing by" in detached.stdout and str(roots[0]) in detached.stdout
        active = read_active(roots[1])
        assert active is not None and active.standby is not None
        standby_pid = active.pid
        shown = _goondan(roots[1], store_url, "status", "--bundle", str(bundle))
        assert "standing by" in shown.stdout, shown.stdout + shown.stderr
        stopped = _goondan(roots[1], store_url, "stop", "--bundle", str(bundle))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert not _pid_alive(standby_pid)
        assert _holder_pid(store_url) == first.pid  # the active node was left alone
    finally:
        _kill_node(first)
        first.wait(timeout=30)
        if standby_pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(standby_pid, signal.SIGKILL)
