"""``goondan studio`` over a swarm running on PostgreSQL (``goondan run`` with
``GOONDAN_STORE``, the approvals example with the fake provider, as in
tests/e2e/test_run_postgres.py): a decision posted to the studio is stored in PostgreSQL and
the running orchestrator is told, so the parked turn resumes; the open conversation stream
delivers its answer."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.storage.postgres.backend import PostgresBackend
from goondan.storage.url import mask_url, parse_store
from goondan.studio.server import StudioServer
from tests.support.backends import apply_schema
from tests.support.connector_e2e import goondan_run
from tests.support.postgres import password_of
from tests.support.runtime_harness import FAKE_KEY_ENV
from tests.support.studio_client import EventStream, request

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def test_a_studio_decision_resumes_a_turn_parked_in_a_swarm_running_on_postgresql(
    state_root: Path, tmp_path: Path, postgres_url: str,
) -> None:
    from tests.e2e.test_approvals_run import _bundle
    from tests.support.fake_provider import FakeProvider, FakeReply

    apply_schema(postgres_url)
    parse_store(postgres_url)  # the password is masked, as the command registers it
    password = password_of(postgres_url)
    with FakeProvider() as fake:
        fake.enqueue(FakeReply.calls(("files__delete", {"path": "old.txt"})),
                     FakeReply.reply("old.txt is gone."))
        bundle = _bundle(tmp_path, fake.base_url("openai"))
        env = {"GOONDAN_STORE": postgres_url, FAKE_KEY_ENV: "sk-approvals-test"}
        backend = PostgresBackend.open(postgres_url)
        stack = contextlib.ExitStack()
        stack.callback(backend.close)
        with stack, goondan_run(bundle, state_root, env) as proc, StudioServer(
                state_root, port=0, backend=backend,
                store=mask_url(postgres_url)).start() as studio:
            sent = subprocess.run(
                [sys.executable, "-m", "goondan", "--state-root", str(state_root), "send",
                 "--bundle", str(bundle), "--json", "delete old.txt"],
                cwd=REPO, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
            assert sent.returncode == 0, sent.stderr
            [row] = json.loads(sent.stdout)["approvals"]
            status, _, overview = request(studio.url, "/api/overview")
            assert status == 200 and [s["pendingApprovals"] for s in overview["swarms"]] == [1]
            [inst] = overview["workspaces"][0]["instances"]
            path = inst["href"].replace("/conversations/", "/api/conversations/")
            status, _, conv = request(studio.url, path)
            assert status == 200
            with EventStream(studio.url, path + "/stream?cursor=" + conv["cursor"]) as events:
                status, _, decided = request(studio.url, "/api/approvals/" + row["id"],
                                             method="POST", body={"decision": "approve"})
                assert status == 200 and decided["notified"] is True, decided
                assert decided["approval"]["decidedBy"].startswith("studio:")
                texts = []
                for name, data in events.events(deadline_s=60):
                    if name == "message":
                        texts.append(data["text"])
                        if data["text"] == "old.txt is gone." and not data["pending"]:
                            break
            assert password not in json.dumps([overview, conv, decided, texts])
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
    assert not (bundle / "work" / "old.txt").exists()
