"""Pooled isolation under ``goondan run`` (issue 33, docs/scaling.md "Pooled hosts").

The Swarm runs every instance in one host process (``policy: {isolation: pooled, pool: {hosts:
1}}``); the agent of tests/fixtures/runtime/ledger answers "go N" with one step of three slow tool
calls, then "done". Each trial starts a turn on three instances at once and SIGKILLs their host
at a random moment of the turns: the supervisor respawns the host, each instance resumes its
interrupted turn from its journal, and every ``goondan send`` gets its "done". Then no committed
state is lost: every instance has each of its inputs once and one "done" per input, and every
tool call has exactly one result. ``goondan status`` shows the host, its restarts and the
instances on it.
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
from pathlib import Path
from typing import Any

import pytest

from tests.support import soak
from tests.support.connector_e2e import goondan_run

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.isolation("pooled")]
LEDGER = Path(__file__).resolve().parents[1] / "fixtures" / "runtime" / "ledger"
REPO = Path(__file__).resolve().parents[2]
KEYS = ("alpha", "beta", "gamma")


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
    return value


def _goondan(state_root: Path, *args: str, timeout: float = 60) -> str:
    done = subprocess.run([sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, check=True)
    return done.stdout


def _send(state_root: Path, bundle: Path, key: str, text: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), "send", "--bundle",
         str(bundle), "--instance-key", key, "--timeout", "120", text],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _records(state_root: Path, key: str, name: str) -> list[dict[str, Any]]:
    found = list((state_root / "workspaces").glob(f"*/instances/worker:{key}/{name}"))
    if not found:
        return []
    out = []
    for line in found[0].read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _turn_started(state_root: Path, key: str, text: str) -> bool:
    """The turn of input ``text`` runs (its journal) or already ended (its committed message):
    under load one instance's turn may end while the test waits for another's."""
    return any(r.get("type") == "turn.started" and r["input"].get("input") == text
               for r in _records(state_root, key, "turn.jsonl")) or any(
        r["data"]["role"] == "user" and r["data"]["content"] == text
        for r in _records(state_root, key, "messages/base.jsonl"))


def _hosts(state_root: Path, bundle: Path) -> list[dict[str, Any]]:
    doc = json.loads(_goondan(state_root, "status", "--bundle", str(bundle), "--json"))
    return list(doc["swarms"][0]["hosts"])


def _check_conversation(state_root: Path, key: str, trials: int) -> None:
    records = _records(state_root, key, "messages/base.jsonl")
    data = [r["data"] for r in records]
    assert [d["content"] for d in data if d["role"] == "user"] == [f"go {i}" for i in range(trials)]
    answers = [d["content"] for d in data if d["role"] == "assistant"
               and (isinstance(d["content"], str)
                    or not any(p["type"] == "tool-call" for p in d["content"]))]
    texts = [a if isinstance(a, str) else "".join(p.get("text", "") for p in a) for a in answers]
    assert texts == ["done"] * trials
    calls: set[str] = set()
    results: list[str] = []
    for d in data:
        for part in d["content"] if isinstance(d["content"], list) else ():
            if part["type"] == "tool-call":
                calls.add(part["toolCallId"])
            elif part["type"] == "tool-result":
                results.append(part["toolCallId"])
    assert len(calls) == 3 * trials and sorted(results) == sorted(calls), "tool pairs intact"


@pytest.mark.soak
@pytest.mark.timeout(soak.trials(180, 3600))
def test_sigkill_of_a_host_resumes_all_its_instances_and_every_sender_gets_its_answer(
        state_root: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(LEDGER, bundle, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = bundle / "goondan.yaml"
    manifest.write_text(manifest.read_text() + "  policy: {isolation: pooled, pool: {hosts: 1}}\n")
    trials = soak.trials(2, 40)
    rng = random.Random(33)
    with goondan_run(bundle, state_root, {}):
        for i in range(trials):
            senders = {key: _send(state_root, bundle, key, f"go {i}") for key in KEYS}
            try:
                for key in KEYS:
                    _wait(lambda k=key, i=i: _turn_started(state_root, k, f"go {i}"), 60,
                          f"turn {i} of {key}")
                hosts = _hosts(state_root, bundle)
                assert len(hosts) == 1 and hosts[0]["restarts"] == i, hosts
                assert hosts[0]["instances"] == [f"worker.{key}" for key in KEYS]
                time.sleep(rng.uniform(0, 0.5))  # the kill point: anywhere in the turns
                os.kill(hosts[0]["pid"], signal.SIGKILL)
                outputs = {key: sender.communicate(timeout=120)
                           for key, sender in senders.items()}
            finally:
                for sender in senders.values():
                    if sender.poll() is None:
                        sender.kill()
            for key, (out, err) in outputs.items():
                assert senders[key].returncode == 0 and out.strip() == "done", (key, out, err)
        hosts = _hosts(state_root, bundle)
        assert hosts[0]["restarts"] == trials and hosts[0]["status"] == "running"
        text = _goondan(state_root, "status", "--bundle", str(bundle))
        assert "host pool-0:" in text and "worker.alpha, worker.beta, worker.gamma" in text
    for key in KEYS:
        _check_conversation(state_root, key, trials)
