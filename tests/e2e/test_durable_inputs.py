"""Issue 31 item 3: whatever the orchestrator acknowledged runs exactly once across its SIGKILL.

``goondan send`` is acknowledged (``{"accepted": {"id"}}``, ``--no-wait`` exits there) once the
message is in the Swarm's durable inbox; ``goondan run --input`` lines are stored the same way.
Each trial SIGKILLs the orchestrator process alone the moment the acknowledgement arrived (its
agent processes see their channel close and finish a Turn they had started); the next start
must deliver what was pending, and no input may run twice.

The fast tests run ``goondan run --foreground`` and ``goondan send`` themselves; the 200-trial
soak runs the same ``SwarmService`` (orchestrator, durable inbox, control socket, real agent
processes running the scripted agents of tests/support/ipc_agents.py) in a forked process, and
acknowledges through the client code of ``goondan send`` (``stream_control``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from goondan.config import load_bundle
from goondan.ipc.controlwire import stream_control
from goondan.swarm.service import SwarmService
from goondan.swarm.spawner import ProcessSpawner, Spawner
from goondan.swarm.state import read_active
from goondan.workspace.claims import started_ids
from goondan.workspace.paths import workspace_id_for
from tests.support import soak
from tests.support.connector_e2e import FAKE_KEY, base_bundle, start_run, wait_for
from tests.support.ipc_agents import AGENTS_ENV, RECORD_DIR_ENV, script_child_main
from tests.support.runtime_harness import FAKE_KEY_ENV
from tests.support.trigger_client import conversation_texts

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]


def _goondan(state_root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY},
    )


def _count(texts: list[str], marker: str) -> int:
    return sum(line.count(marker) for line in texts)


def _inbox_text(state_root: Path) -> str:
    return "".join(p.read_text() for p in state_root.glob("workspaces/*/inputs/*/inbox.jsonl"))


def _running(state_root: Path, proc: subprocess.Popen[bytes]) -> bool:
    active = read_active(state_root)
    return (active is not None and active.pid == proc.pid) or proc.poll() is not None


@pytest.mark.slow
def test_sigkill_of_goondan_run_after_send_is_acknowledged_runs_each_input_once(
    state_root: Path, tmp_path: Path,
) -> None:
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, "")
    trials = 3
    for i in range(trials):
        proc = start_run(bundle, state_root, {})
        try:
            wait_for(lambda: _running(state_root, proc), 60, "the orchestrator")  # noqa: B023
            sent = _goondan(
                state_root,
                "send",
                "--bundle",
                str(bundle),
                "-k",
                "durable",
                "--no-wait",
                f"<<p-{i}>>",
            )
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.strip().startswith("evt")  # the message's id, once it is durable
        finally:
            # the orchestrator alone, the moment send was acknowledged
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    proc = start_run(bundle, state_root, {})
    try:
        # running first: orphaned agent processes may have finished the turns already, and a
        # SIGTERM before the new orchestrator's handlers are installed would kill it uncleanly
        wait_for(lambda: _running(state_root, proc), 60, "the orchestrator")
        wait_for(lambda: all(_count(conversation_texts(state_root, "durable"), f"<<p-{i}>>") >= 1
                             for i in range(trials)), 60, "every input's turn")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    texts = conversation_texts(state_root, "durable")
    assert [_count(texts, f"<<p-{i}>>") for i in range(trials)] == [1] * trials


@pytest.mark.slow
def test_a_run_input_line_survives_a_sigkill_of_goondan_run(
    state_root: Path, tmp_path: Path
) -> None:
    """``goondan run --input`` killed once its line is stored: the next ``goondan run`` runs it
    first (same conversation, in order), then its own line; each exactly once."""
    bundle = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, "")
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(bundle),
            "--input",
            "<<first>>",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY},
    )
    try:
        wait_for(lambda: "<<first>>" in _inbox_text(state_root) or first.poll() is not None, 60,
                 "the --input line to be stored")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert "<<first>>" in _inbox_text(state_root)
    second = _goondan(state_root, "run", "--bundle", str(bundle), "--input", "<<second>>")
    assert second.returncode == 0, second.stderr
    wait_for(
        lambda: _count(conversation_texts(state_root, "default"), "<<first>>") >= 1,
        60,
        "the first line's turn",
    )
    texts = conversation_texts(state_root, "default")
    assert (_count(texts, "<<first>>"), _count(texts, "<<second>>")) == (1, 1)


# -- 200 trials, one cheap process start each ---------------------------------------------------

class _ScriptedService(SwarmService):
    """``goondan run``'s service with the scripted agents as its (real, forked) agent processes."""

    def _make_spawner(self, engine: str, ray_address: str | None) -> Spawner:
        return ProcessSpawner(self.bundle.root, state_root=self.state_root, swarm=self.swarm.name,
                              log_dir=self.log_dir, targets={"agent": script_child_main})


def _harness(bundle: Any, state_root: str, record_dir: str) -> None:
    os.environ[RECORD_DIR_ENV] = record_dir
    os.environ[AGENTS_ENV] = "assistant"

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with _ScriptedService(bundle, state_root=Path(state_root), log_to_file=False):
            await stop.wait()

    asyncio.run(main())
    os._exit(0)


def _send_until_acknowledged(state_root: Path, pid: int, text: str) -> dict[str, Any]:
    wait_for(
        lambda: (a := read_active(state_root)) is not None and a.pid == pid,
        60,
        "the control socket",
    )
    active = read_active(state_root)
    assert active is not None
    request = {"command": "request", "input": text, "instanceKey": "durable", "ack": True}
    return asyncio.run(stream_control(Path(active.control_socket), request, timeout_s=60,
                                      on_accepted=lambda line: True))


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_two_hundred_orchestrator_sigkills_after_send_acks_lose_and_duplicate_nothing(
    state_root: Path, tmp_path: Path,
) -> None:
    """200 trials under `make soak` (10 under `make test`): SIGKILL right after each ack."""
    trials = soak.trials(10, 200)
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    bundle = load_bundle(
        base_bundle(tmp_path / "bundle", None, {"assistant": ""}, ""), state_root=state_root
    )
    context = multiprocessing.get_context("fork")

    def start() -> Any:
        process = context.Process(target=_harness, args=(bundle, str(state_root), str(record_dir)))
        process.start()
        return process

    for i in range(trials):
        process = start()
        try:
            answer = _send_until_acknowledged(state_root, process.pid, f"echo:<<p-{i}>>")
            assert answer["accepted"]["instanceKey"] == "durable"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.join(30)
    process = start()
    try:
        wait_for(
            lambda: all(f"<<p-{i}>>\n" in soak.records(record_dir) for i in range(trials)),
            120,
            "every input's turn",
        )
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.join(60)
    assert soak.lost_and_duplicated(record_dir, trials) == ([], [])


# -- an existing state root: inputs the previous version accepted --------------------------------

CLI_CONNECTION = """\
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: cli-in}
spec:
  connectorRef: {kind: Connector, name: cli, package: "@goondan/base"}
"""


def _line(value: dict[str, Any]) -> bytes:
    """One record as every version wrote it: compact JSON, one line."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _swarm_record(ident: str, text: str) -> bytes:
    event = {"id": ident, "type": "message", "createdAt": "2026-11-20T10:00:00.000Z",
             "source": {"kind": "connector", "name": "cli"}, "input": text,
             "instanceKey": "durable"}
    return _line({"event": event, "agent": "assistant", "instanceKey": "durable",
                  "acceptedAt": "2026-11-20T10:00:00.000Z"})


def _connection_record(ident: str, text: str) -> bytes:
    event = {"id": ident, "name": "stdin_message", "instanceKey": "durable",
             "message": {"type": "text", "text": text}, "properties": {},
             "createdAt": "2026-11-20T10:00:00.000Z"}
    return _line({"event": event, "agent": "assistant", "instanceKey": "durable",
                  "acceptedAt": "2026-11-20T10:00:00.000Z"})


@pytest.mark.slow
@pytest.mark.isolation("process")
def test_inputs_pending_in_a_state_root_of_the_previous_version_run_once_in_order(
    state_root: Path, tmp_path: Path,
) -> None:
    """The files an orchestrator of the previous version left (the Swarm's inbox and a
    Connection's, with their claim files) are delivered by this one: each pending input once, in
    inbox order (the Swarm's first), none whose start was final, none again at the next start;
    what was on disk is only appended to."""
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    bundle = load_bundle(base_bundle(tmp_path / "bundle", None, {"assistant": ""}, CLI_CONNECTION),
                         state_root=state_root)
    workspace = state_root / "workspaces" / workspace_id_for(bundle.root, bundle.package_name)
    dead_owner = f"{os.getpid()}:1"  # a pid with another start time: a process that is gone
    old = {  # directory: (inbox.jsonl, started/assistant.durable.jsonl, ids started after)
        workspace / "inputs" / "default": (
            _line({"consumed": "evt-compacted"})
            + _swarm_record("evt-done", "echo:<<done>>")
            + _swarm_record("evt-1", "echo:<<p-0>>")
            + _swarm_record("evt-2", "echo:<<p-1>>")
            + _swarm_record("evt-3", "echo:<<p-2>>")
            + b'{"event": {"id": "torn"',  # a crash in the middle of an append
            _line({"id": "evt-done"}) + _line({"id": "evt-1", "owner": dead_owner}),
            {"evt-done", "evt-1", "evt-2", "evt-3"},
        ),
        workspace / "connections" / "default" / "cli-in": (
            _connection_record("cev-done", "echo:<<done-c>>")
            + _connection_record("cev-1", "echo:<<p-3>>"),
            _line({"id": "cev-done"}),
            {"cev-done", "cev-1"},
        ),
    }
    for directory, (inbox, claims, _started) in old.items():
        (directory / "started").mkdir(parents=True)
        (directory / "inbox.jsonl").write_bytes(inbox)
        (directory / "started" / "assistant.durable.jsonl").write_bytes(claims)
    context = multiprocessing.get_context("fork")
    for run in ("upgraded", "again"):
        process = context.Process(target=_harness, args=(bundle, str(state_root), str(record_dir)))
        process.start()
        try:
            wait_for(lambda: (a := read_active(state_root)) is not None
                     and a.pid == process.pid, 60, f"the {run} orchestrator")  # noqa: B023
            active = read_active(state_root)
            assert active is not None
            # queued behind whatever this start delivered for the instance: its answer comes after
            request = {"command": "request", "input": f"echo:<<{run}>>", "instanceKey": "durable"}
            asyncio.run(stream_control(Path(active.control_socket), request, timeout_s=60))
        finally:
            os.kill(process.pid, signal.SIGTERM)
            process.join(60)
    assert soak.records(record_dir).splitlines() == [
        *(f"assistant@durable echo:<<p-{i}>>" for i in range(4)),
        "assistant@durable echo:<<upgraded>>", "assistant@durable echo:<<again>>"]
    for directory, (inbox, _claims, started) in old.items():
        # the old bytes stay (the torn tail cut; the requests of this test follow them), and
        # the starts are final in the same claim file
        assert (directory / "inbox.jsonl").read_bytes().startswith(inbox[:inbox.rfind(b"\n") + 1])
        assert started_ids(directory / "started" / "assistant.durable.jsonl") >= started
