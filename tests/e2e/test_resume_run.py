"""Exact resume under ``goondan run`` (docs/conversations.md "Durability", issue 31).

The agent of tests/fixtures/runtime/ledger answers "go N" with one step of three tool calls
(``ledger__mark`` idempotent, ``ledger__charge`` not, ``ledger__mark``), each appending
``<export> <toolCallId> <idempotencyKey>`` to calls.log and then sleeping, then the answer
"done". Each trial SIGKILLs at a random moment of the turn:

* the agent process alone, while ``goondan send`` waits: the respawned process resumes the
  turn and the same ``send`` prints "done";
* every process of the swarm (``goondan send`` loses its connection): the next ``goondan run``
  resumes the turn at start.

Then, over the whole conversation: every turn ended with "done"; every tool call has exactly
one result; a call with a result ran once, or — ``mark`` only — twice with the same key when
the kill came after its handler started and before its result was written; a ``charge``
never ran twice (its lost result is ``E_TOOL_OUTCOME_UNKNOWN``); every line carries its
call's key.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from goondan.ipc.logs import process_name
from goondan.swarm.state import list_live_processes, read_active
from goondan.workspace.journal import idempotency_key
from tests.support import soak
from tests.support.connector_e2e import goondan_run, start_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
LEDGER = Path(__file__).resolve().parents[1] / "fixtures" / "runtime" / "ledger"
REPO = Path(__file__).resolve().parents[2]
AGENT, KEY = "worker", "soak"


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return value


def _instance_file(state_root: Path, name: str) -> Path | None:
    found = list((state_root / "workspaces").glob(f"*/instances/{AGENT}:{KEY}/{name}"))
    return found[0] if found else None


def _rows(url: str, table: str, column: str) -> list[str]:
    """The lines of the instance's ``table`` in the PostgreSQL store ``url``, in order."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f"SELECT t.{column} FROM {table} t JOIN goondan_instances i ON i.id = t.instance_id "
            "WHERE i.agent_name = %s AND i.instance_key = %s ORDER BY 1", (AGENT, KEY),
        ).fetchall()
    return [str(row[0]) for row in rows]


def _lines(state_root: Path, url: str | None, name: str) -> list[str] | None:
    """The lines of the instance's ``turn.jsonl`` or ``messages/base.jsonl``, from the JSONL
    state root or (``url``) the PostgreSQL store; None when there is no such instance yet."""
    if url is not None:
        if name == "turn.jsonl":
            return _rows(url, "goondan_turn_records", "record")
        import psycopg

        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT m.message FROM goondan_messages m JOIN goondan_instances i "
                "ON i.id = m.instance_id WHERE i.agent_name = %s AND i.instance_key = %s "
                "ORDER BY m.position", (AGENT, KEY)).fetchall()
        return [str(row[0]) for row in rows]
    path = _instance_file(state_root, name)
    return None if path is None else path.read_text().splitlines()


def _journal_has(state_root: Path, text: str, url: str | None = None) -> bool:
    """The journal holds the turn.started of the input ``text`` (the turn runs)."""
    for line in _lines(state_root, url, "turn.jsonl") or []:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("type") == "turn.started" and record["input"].get("input") == text:
                return True
    return False


def _agent_pid(state_root: Path, not_in: set[int]) -> int | None:
    for row in list_live_processes(state_root):
        if row.process == process_name(AGENT, KEY) and row.pid and row.pid not in not_in:
            with contextlib.suppress(ProcessLookupError):
                os.kill(row.pid, 0)
                return row.pid
    return None


def _send(state_root: Path, bundle: Path, text: str,
          env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "send",
            "--bundle",
            str(bundle),
            "--instance-key",
            KEY,
            "--timeout",
            "120",
            text,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _bundle(tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(LEDGER, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _check_conversation(state_root: Path, bundle: Path, trials: int,
                        url: str | None = None) -> Counter[str]:
    """The invariants of the module docstring; returns how the interrupted calls ended."""
    lines = _lines(state_root, url, "messages/base.jsonl")
    assert lines is not None
    records = [json.loads(line) for line in lines if line.strip()]
    users = [r["data"]["content"] for r in records if r["data"]["role"] == "user"]
    assert users == [f"go {i}" for i in range(trials)]
    assert [t for t in map(_answer_text, records) if t is not None] == ["done"] * trials
    runs = Counter(
        tuple(line.split()[1:3]) for line in (bundle / "calls.log").read_text().splitlines()
    )
    calls: dict[str, tuple[str, str]] = {}  # toolCallId -> (export, key)
    results: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        for part in (
            record["data"]["content"] if isinstance(record["data"]["content"], list) else ()
        ):
            if part["type"] == "tool-call":
                turn = record["source"]["stepId"].rsplit("-step-", 1)[0]
                calls[part["toolCallId"]] = (
                    part["toolName"],
                    idempotency_key(AGENT, KEY, turn, part["toolCallId"]),
                )
            elif part["type"] == "tool-result":
                results.setdefault(part["toolCallId"], []).append(part["output"])
    assert len(calls) == 3 * trials
    assert set(results) == set(calls) and all(len(r) == 1 for r in results.values()), (
        "tool pairs intact"
    )
    assert {key for _, key in runs} <= {key for _, key in calls.values()}, (
        "every line has its call's key"
    )
    outcomes: Counter[str] = Counter()
    for call_id, (tool, key) in calls.items():
        output, ran = results[call_id][0], runs[(call_id, key)]
        if output["type"] == "text":
            assert ran == 1 or (tool == "ledger__mark" and ran == 2), (call_id, tool, ran)
            outcomes["re-run" if ran == 2 else "once"] += 1
        else:
            assert tool == "ledger__charge", output
            assert output["value"]["code"] == "E_TOOL_OUTCOME_UNKNOWN", output
            assert ran <= 1
            outcomes["unknown"] += 1
    return outcomes


@pytest.mark.soak
@pytest.mark.timeout(soak.trials(120, 3600))
def test_sigkill_of_the_agent_mid_turn_resumes_and_the_sender_gets_the_answer(
        state_root: Path, tmp_path: Path) -> None:
    _agent_kill_trials(state_root, tmp_path, None, soak.trials(3, 200))


@pytest.mark.soak
@pytest.mark.timeout(soak.trials(120, 3600))
def test_sigkill_of_the_agent_mid_turn_resumes_the_turn_on_postgres(
        state_root: Path, tmp_path: Path, postgres_url: str) -> None:
    """The same on PostgreSQL (``goondan run``/``send`` with ``GOONDAN_STORE``: the journal and
    the conversation are rows of the store, nothing of them under the state root)."""
    from tests.support.backends import apply_schema

    apply_schema(postgres_url)
    _agent_kill_trials(state_root, tmp_path, postgres_url, soak.trials(2, 50))


def _agent_kill_trials(state_root: Path, tmp_path: Path, url: str | None, trials: int) -> None:
    bundle = _bundle(tmp_path)
    env = {"GOONDAN_STORE": url} if url is not None else {}
    store = "jsonl" if url is None else "postgres"
    rng = random.Random(31)
    killed: set[int] = set()
    with goondan_run(bundle, state_root, env):
        for i in range(trials):
            sender = _send(state_root, bundle, f"go {i}", env)
            try:
                if rng.random() < 0.8:  # mid-turn, anywhere in it
                    _wait(lambda i=i: _journal_has(state_root, f"go {i}", url), 60,
                          f"turn {i}")
                    pid = _wait(lambda: _agent_pid(state_root, killed), 30, "the agent process")
                    time.sleep(rng.uniform(0, 0.7))  # the kill point
                else:  # early: before, during or just after the event's dispatch
                    pid = _wait(lambda: _agent_pid(state_root, killed), 30, "the agent process")
                    time.sleep(rng.uniform(0, 0.4))
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
                out, err = sender.communicate(timeout=120)
            finally:
                if sender.poll() is None:
                    sender.kill()
            assert sender.returncode == 0, err
            assert out.strip() == "done", (out, err)
    outcomes = _check_conversation(state_root, bundle, trials, url)
    if url is not None:  # nothing of the conversation under the local state root
        assert not list(state_root.glob("workspaces/*/instances"))
    print(f"{trials} SIGKILLs of the agent ({store}): calls {dict(outcomes)}")


@pytest.mark.soak
@pytest.mark.timeout(soak.trials(120, 3600))
def test_every_process_killed_mid_turn_resumes_at_the_next_start(
    state_root: Path, tmp_path: Path
) -> None:
    bundle = _bundle(tmp_path)
    trials = soak.trials(2, 200)
    rng = random.Random(3131)
    for i in range(trials):
        run = start_run(bundle, state_root, {})
        try:
            _wait(lambda run=run: (a := read_active(state_root)) is not None and a.pid == run.pid
                  and Path(a.control_socket or "").exists(), 60, "the orchestrator")
            if i > 0:  # the previous turn resumes at start and ends
                _wait(
                    lambda i=i: _done_count(state_root) == i, 60, f"turn {i - 1} after the restart"
                )
            sender = _send(state_root, bundle, f"go {i}")
            _wait(lambda i=i: _journal_has(state_root, f"go {i}"), 60, f"turn {i}")
            time.sleep(rng.uniform(0, 0.7))  # the kill point: anywhere in the turn
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
        sender.communicate(timeout=60)  # it lost its connection
    with goondan_run(bundle, state_root, {}):
        _wait(lambda: _done_count(state_root) == trials, 60, "the last turn after the restart")
    outcomes = _check_conversation(state_root, bundle, trials)
    print(f"{trials} SIGKILLs of the whole swarm: calls {dict(outcomes)}")


def _answer_text(record: dict[str, Any]) -> str | None:
    """The text of an assistant answer (no tool calls), else None."""
    data = record["data"]
    content = data["content"]
    if data["role"] != "assistant":
        return None
    if isinstance(content, str):
        return content
    if any(part["type"] == "tool-call" for part in content):
        return None
    return "".join(part.get("text", "") for part in content)


def _done_count(state_root: Path) -> int:
    base = _instance_file(state_root, "messages/base.jsonl")
    if base is None:
        return 0
    records = [json.loads(line) for line in base.read_text().splitlines() if line.strip()]
    return sum(1 for record in records if _answer_text(record) == "done")
