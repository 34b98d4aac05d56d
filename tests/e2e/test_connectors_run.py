"""Connections under ``goondan run``: the cli Connection, ``goondan send``, supervision of
connector processes and the delivery guarantee across an orchestrator SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.swarm.service import send_control
from goondan.swarm.state import pid_alive, read_active
from tests.support.trigger_client import FIXTURE, conversation_texts, send_trigger, wait_port

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]
CLI_SMOKE = REPO / "tests" / "fixtures" / "connectors" / "cli-smoke"


def goondan(
    *args: str, state_root: Path, timeout: float = 60, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO, **kwargs,
    )


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _instances(state_root: Path) -> dict[str, str]:
    """instanceKey → base.jsonl text of every stored conversation."""
    out = {}
    for meta in state_root.glob("workspaces/*/instances/*/metadata.json"):
        base = meta.parent / "messages" / "base.jsonl"
        out[json.loads(meta.read_text())["instanceKey"]] = base.read_text() if base.exists() else ""
    return out


def test_cli_connection_routes_input_to_its_instance_key(state_root: Path) -> None:
    """Acceptance: a cli Connection with route.instanceKey "smoke-test"; `run --input hi`."""
    result = goondan("run", "--bundle", str(CLI_SMOKE), "--input", "hi", state_root=state_root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello from smoke-test"  # the model saw connection_name
    stored = _instances(state_root)
    assert list(stored) == ["smoke-test"]
    assert (
        '"connection_name\\":\\"cli-in\\"' in stored["smoke-test"]
        and "\\nhi" in stored["smoke-test"]
    )


def test_input_file_and_piped_lines_feed_the_cli_connection(
    state_root: Path, tmp_path: Path
) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text('first\n\n{"text": "second", "properties": {"source": "file"}}\n')
    result = goondan(
        "run", "--bundle", str(CLI_SMOKE), "--input-file", str(lines), state_root=state_root
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["hello from smoke-test"] * 2
    piped = goondan("run", "--bundle", str(CLI_SMOKE), "--input-file", "-", state_root=state_root,
                    input="third\n")
    assert piped.returncode == 0 and piped.stdout.strip() == "hello from smoke-test"
    inbox = next(state_root.glob("workspaces/*/connections/default/cli-in/inbox.jsonl"))
    records = [json.loads(line) for line in inbox.read_text().splitlines()]
    # line indexes count the skipped blank line (connectors.md §6); all routed to smoke-test
    assert [r["event"]["instanceKey"] for r in records] == ["cli:0", "cli:2", "cli:0"]
    assert records[1]["event"]["properties"] == {"source": "file"}
    assert {r["instanceKey"] for r in records} == {"smoke-test"}
    both = goondan("run", "--bundle", str(CLI_SMOKE), "--input", "x", "--input-file", str(lines),
                   state_root=state_root)
    assert both.returncode == 2


@contextlib.contextmanager
def foreground(bundle: Path, state_root: Path, env: dict[str, str], *,
               watch: bool = False) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(bundle),
            "--foreground",
            *(["--watch"] if watch else []),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **env},
    )
    try:
        _wait(lambda: (a := read_active(state_root)) is not None and a.pid == proc.pid
              and Path(a.control_socket or "").exists(), 30, "the orchestrator")
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _status(state_root: Path) -> dict[str, Any]:
    active = read_active(state_root)
    assert active is not None and active.control_socket
    return asyncio.run(
        send_control(Path(active.control_socket), {"command": "status"}, timeout_s=30)
    )


def test_send_talks_to_a_running_swarm(state_root: Path, tmp_path: Path) -> None:
    missing = goondan("send", "hello", state_root=state_root)
    assert (
        missing.returncode == 3
        and "E_RUN_NOT_RUNNING" in missing.stderr
        and "goondan run" in missing.stderr
    )
    env = {"TRIGGER_PORT_FILE": str(tmp_path / "port.json"), "TRIGGER_FAIL": ""}
    with foreground(FIXTURE, state_root, env):
        sent = goondan("send", "--bundle", str(FIXTURE), "hi there", state_root=state_root)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.strip() == "ok"
        as_json = goondan("send", "--agent", "other", "--instance-key", "k1", "--json", "hey",
                          state_root=state_root)
        assert as_json.returncode == 0, as_json.stderr
        answer = json.loads(as_json.stdout)
        assert answer == {"ok": True, "agent": "other", "instanceKey": "k1", "response": "ok"}
        unknown = goondan("send", "--agent", "nobody", "x", state_root=state_root)
        assert unknown.returncode != 0 and "E_AGENT_NOT_FOUND" in unknown.stderr
    assert set(_instances(state_root)) == {"default", "k1"}  # send: the Swarm's instanceKey


def _supervision_bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    extra = ""
    for name, mode in (("broken", "start"), ("done", "return"), ("flaky", "later")):
        extra += f"""---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: {name}
spec:
  connectorRef: Connector/trigger
  config:
    PORT_FILE: {{value: "{tmp_path / (name + '.json')}"}}
    FAIL: {{value: "{mode}"}}
"""
    with (bundle / "goondan.yaml").open("a") as handle:
        handle.write(extra)
    return bundle


def _log_records(state_root: Path) -> list[dict[str, Any]]:
    # the log folder is keyed by instanceKey and workspace: default.<workspace id>
    (path,) = (state_root / "runtime" / "logs").glob("default.*/orchestrator.stderr.log")
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


@pytest.mark.slow
def test_connectors_are_supervised_with_backoff_and_stopped_by_sigterm(
    state_root: Path, tmp_path: Path
) -> None:
    bundle = _supervision_bundle(tmp_path)
    env = {"TRIGGER_PORT_FILE": str(tmp_path / "port.json"), "TRIGGER_FAIL": ""}
    with foreground(bundle, state_root, env) as proc:
        port = wait_port(tmp_path / "port.json")
        # the broken connector crash-loops into backoff; the others keep running
        _wait(
            lambda: any(
                r.get("event") == "connector.crashed"
                and r.get("connection") == "broken"
                and r.get("backoffMs", 0) > 0
                for r in _log_records(state_root)
            ),
            60,
            "backoff",
        )
        assert send_trigger(port, "ok-1", "while broken crashes") == {
            "id": "ok-1",
            "duplicate": False,
        }
        crashes = [r for r in _log_records(state_root) if r.get("event") == "connector.crashed"]
        broken = [r for r in crashes if r["connection"] == "broken"]
        assert broken[0]["code"] == "E_CONNECTOR" and "refuses to start" in broken[0]["message"]
        assert [r["backoffMs"] for r in broken[:6]] == [0, 0, 0, 0, 0, 1000]
        # a connector that returns is finished, not crash-looping
        rows = {r["connection"]: r for r in _status(state_root)["connections"]}
        assert rows["done"]["status"] == "completed" and rows["done"]["restarts"] == 0
        # a crash after running: restarted at once, and serves again
        flaky = wait_port(tmp_path / "flaky.json")
        (tmp_path / "flaky.json").unlink()
        send_trigger(flaky, "f-1", "then crash")
        flaky = wait_port(tmp_path / "flaky.json")
        assert send_trigger(flaky, "f-2", "after restart")["duplicate"] is False
        rows = {r["connection"]: r for r in _status(state_root)["connections"]}
        assert rows["flaky"]["restarts"] >= 1 and rows["trig"]["restarts"] == 0
        # the crash after running is logged once, with its cause and the (first: immediate) backoff
        flaky_crashes = [
            r
            for r in _log_records(state_root)
            if r.get("event") == "connector.crashed" and r.get("connection") == "flaky"
        ]
        assert flaky_crashes and "crashes after an event" in flaky_crashes[0]["message"]
        assert flaky_crashes[0]["backoffMs"] == 0
        # the finished connector was logged as completed, never as a crash
        records = _log_records(state_root)
        assert any(
            r.get("event") == "connector.completed" and r.get("connection") == "done"
            for r in records
        )
        assert not any(
            r.get("event") == "connector.crashed" and r.get("connection") == "done" for r in records
        )
        # trig's rule routes to "durable"; flaky has no rules: the event's own key
        _wait(lambda: "while broken crashes" in "\n".join(conversation_texts(state_root, "durable"))
              and all(t in "\n".join(conversation_texts(state_root, "trigger"))
                      for t in ("then crash", "after restart")), 30, "the turns")
        # "broken" and "flaky" crash after each start / event: their pids may be exiting
        pids = [r["pid"] for r in rows.values() if r["pid"]]
        assert pid_alive(rows["trig"]["pid"])
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        _wait(lambda: not any(pid_alive(p) for p in pids), 30, "every connector process to stop")


def test_watch_restarts_a_connection_whose_rules_changed(state_root: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(FIXTURE, bundle)
    port_file = tmp_path / "port.json"
    env = {"TRIGGER_PORT_FILE": str(port_file), "TRIGGER_FAIL": ""}
    with foreground(bundle, state_root, env, watch=True):
        wait_port(port_file)
        first_pid = json.loads(port_file.read_text())["pid"]
        manifest = bundle / "goondan.yaml"
        manifest.write_text(manifest.read_text().replace("route: {instanceKey: durable}",
                                                         "route: {instanceKey: moved}"))
        _wait(lambda: port_file.exists() and json.loads(port_file.read_text())["pid"] != first_pid,
              60, "the connector to restart with the new rules")
        _wait(lambda: not pid_alive(first_pid), 30, "the old connector process to end")
        port = wait_port(port_file)
        assert send_trigger(port, "w-1", "after the edit") == {"id": "w-1", "duplicate": False}
        _wait(
            lambda: "after the edit" in "\n".join(conversation_texts(state_root, "moved")),
            60,
            "the turn",
        )
        row = next(r for r in _status(state_root)["connections"] if r["connection"] == "trig")
        assert row["restarts"] == 1 and row["status"] == "running"
        assert any(r.get("event") == "connector.restarted" and r.get("connections") == ["trig"]
                   for r in _log_records(state_root))


def test_showcase_connection_runs(state_root: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "showcase"
    shutil.copytree(REPO / "examples" / "showcase", bundle)
    with foreground(bundle, state_root, {}):
        _wait(
            lambda: any(
                state_root.glob("workspaces/*/connections/default/terminal/state/inbox.txt")
            ),
            30,
            "the showcase connector",
        )
        inbox = next(state_root.glob("workspaces/*/connections/default/terminal/state/inbox.txt"))
        with inbox.open("a") as handle:
            handle.write("How far is 12 km in miles?\n")
        _wait(
            lambda: "7.46 miles" in _instances(state_root).get("terminal:file", ""),
            30,
            "the answer",
        )
        rows = _status(state_root)["connections"]
        assert [(r["connection"], r["status"], r["emitted"]) for r in rows] == [
            ("terminal", "running", 1)
        ]


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a pty")
def test_terminal_chat_feeds_the_cli_connection(state_root: Path) -> None:
    from tests.e2e.test_repl_pty import Terminal
    from tests.support.runtime_harness import goondan_cmd

    env = {**os.environ, "GOONDAN_STATE_ROOT": str(state_root), "TERM": "xterm", "COLUMNS": "200"}
    term = Terminal(goondan_cmd("run", "--bundle", str(CLI_SMOKE)), env)
    try:
        term.expect("Connection cli-in")
        term.expect("assistant> ")
        term.send("hi from the terminal\r")
        term.expect("hello from smoke-test")
        term.expect("assistant> ")
        term.send("\x04")
        assert term.wait() == 0
    finally:
        term.close()
    assert "hi from the terminal" in _instances(state_root)["smoke-test"]
