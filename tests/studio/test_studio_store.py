"""The studio over a PostgreSQL store (``goondan studio --store postgresql://…``, docs/studio.md
"On a PostgreSQL store"): the real test PostgreSQL (tests/support/postgres.py) filled by real
turns of a :class:`Runtime` on that store (the approvals example, scripted model); the studio
serves in this process, requests go over real HTTP. The URL's password is never in an answer."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan import cli
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.runtime.approvals import APPROVAL_DECIDED_EVENT
from goondan.storage.postgres.backend import PostgresBackend
from goondan.storage.url import mask_url, parse_store
from goondan.studio.server import StudioServer
from goondan.types import AgentEvent
from tests.support.aio import run
from tests.support.approvals_example import approvals_bundle
from tests.support.postgres import password_of
from tests.support.studio_client import EventStream, request, studio_url

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def bundle(tmp_path: Path) -> Path:
    return approvals_bundle(tmp_path)


@pytest.fixture()
def store(postgres_url: str) -> Iterator[PostgresBackend]:
    parse_store(postgres_url)  # as the command does: the password is registered for masking
    backend = PostgresBackend.open(postgres_url)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture()
def studio(store: PostgresBackend, postgres_url: str, tmp_path: Path) -> Iterator[StudioServer]:
    static = tmp_path / "static"
    static.mkdir()
    (static / "index.html").write_text("<!doctype html><title>shell</title>")
    with StudioServer(tmp_path / "state", port=0, static_dir=static, backend=store,
                      store=mask_url(postgres_url)).start() as server:
        yield server


def get(server: StudioServer, path: str, **kwargs: Any) -> tuple[int, Any]:
    status, _, body = request(server.url, path, **kwargs)
    return status, body


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def test_the_api_reads_a_postgresql_store_and_a_decision_resumes_the_parked_turn(
    bundle: Path, tmp_path: Path, postgres_url: str, studio: StudioServer,
) -> None:
    password = password_of(postgres_url)
    model = ScriptedModel(["hello there",
                           {"toolCalls": [_call("files__delete", path="old.txt")]}, "deleted it"])
    answers: list[str] = []
    decided: list[str] = []
    stream: list[EventStream] = []

    def fetch(path: str, **kwargs: Any) -> Any:
        status, doc = get(studio, path, **kwargs)
        text = json.dumps(doc)
        answers.append(text)
        assert status == 200, doc
        return doc

    async def main() -> None:
        runtime_store = PostgresBackend.open(postgres_url)  # the swarm's own connection
        try:
            async with Runtime.from_bundle(bundle, storage=runtime_store,
                                           state_root=tmp_path / "rt",
                                           models={"assistant": model}) as rt:
                await rt.run_turn(None, "hi", instance_key="k")
                parked = await rt.run_turn(None, "delete old.txt", instance_key="k")
                assert parked.finish_reason == "approval_pending"
                await asyncio.to_thread(check_and_decide, rt.workspace_id)
                # What the orchestrator holding the instance does when told of a decision:
                resumed = await rt.run_event("assistant", AgentEvent(
                    type=APPROVAL_DECIDED_EVENT, instance_key="k",
                    metadata={"approvalId": decided[0]}))
                assert resumed.text == "deleted it" and resumed.turn_id == parked.turn_id
                await asyncio.to_thread(see_it_live)
        finally:
            runtime_store.close()

    def check_and_decide(workspace: str) -> None:
        doc = fetch("/api/overview")
        assert doc["store"] == mask_url(postgres_url) and "***" in doc["store"]
        [ws] = doc["workspaces"]
        assert ws["workspaceId"] == workspace
        [inst] = ws["instances"]
        assert (inst["agent"], inst["instanceKey"], inst["status"]) == (
            "assistant", "k", "waitingForApproval")
        path = inst["href"].replace("/conversations/", "/api/conversations/")
        conv = fetch(path)
        assert [m["role"] for m in conv["messages"]][:3] == ["user", "assistant", "user"]
        assert conv["messages"][1]["text"] == "hello there"
        calls = [c for m in conv["messages"] for c in m.get("toolCalls") or []]
        assert [c["name"] for c in calls] == ["files__delete"]
        assert conv["instance"]["messageCount"] >= 2
        assert [m["text"] for m in fetch(path + "?q=HELLO")["messages"]] == ["hello there"]
        page = fetch(path + "?offset=1&limit=1")
        assert page["total"] == conv["total"] and page["offset"] == 1
        assert [m["id"] for m in page["messages"]] == [conv["messages"][1]["id"]]
        [approval] = fetch("/api/approvals?status=pending")["approvals"]
        assert (approval["toolName"], approval["arguments"]) == ("files__delete",
                                                                 {"path": "old.txt"})
        assert approval["workspaceId"] == workspace
        # the page follows the conversation from its cursor, then decides
        stream.append(EventStream(studio.url, path + "/stream?cursor=" + conv["cursor"]))
        assert stream[0].status == 200
        doc = fetch("/api/approvals/" + approval["id"], method="POST",
                    body={"decision": "approve"})
        assert doc["approval"]["status"] == "approved"
        assert doc["approval"]["decidedBy"].startswith("studio:")
        assert doc["approval"]["via"] == "studio"
        status, again = get(studio, "/api/approvals/" + approval["id"], method="POST",
                            body={"decision": "deny"})
        assert status == 409 and again["error"]["code"] == "E_STUDIO_ALREADY_DECIDED"
        decided.append(approval["id"])

    def see_it_live() -> None:
        with stream[0] as events:
            got: list[tuple[str, Any]] = []
            for name, data in events.events(deadline_s=20):
                got.append((name, data))
                answers.append(json.dumps(data))
                if name == "message" and data["text"] == "deleted it" and not data["pending"]:
                    break
        texts = [d.get("text") for n, d in got if n == "message"]
        assert "deleted it" in texts
        # the approved call's result, committed while the stream was open, came too
        assert any("deleted old.txt" in (t or "") for t in texts), texts

    run(main())
    assert not (bundle / "work" / "old.txt").exists()  # the approved call ran
    doc = fetch("/api/approvals")
    assert [a["status"] for a in doc["approvals"]] == ["approved"]
    doc = fetch("/api/traces")  # from the store's span table (tmp_path/rt holds no spans)
    # "hi", the parked turn, the decision's (the resumed turn runs in a trace of its own)
    assert "note" not in doc and [t["rootName"] for t in doc["traces"]] == [
        "turn assistant"] * 3
    traces = [fetch("/api/traces/" + t["traceId"][:12]) for t in doc["traces"]]
    [(trace, wait)] = [(t, s) for t in traces for s in t["spans"] if s["kind"] == "approval"]
    assert wait["status"] == "ok" and wait["attributes"]["status"] == "approved"
    answers.append(json.dumps(trace))
    assert all(password not in text for text in answers)


def test_a_bad_store_url_and_an_unreachable_store_are_user_errors_without_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    def studio_cli(url: str) -> tuple[int, str, str]:
        with pytest.raises(SystemExit) as info:
            cli.main(["--state-root", str(tmp_path), "studio", "--port", "0", "--store", url])
        out, err = capsys.readouterr()
        return int(info.value.code or 0), out, err

    code, out, err = studio_cli("mysql://u:Sup3rSecret@h/db")
    assert code == 3 and "[E_STORE_URL]" in err
    assert "Sup3rSecret" not in out + err and "Traceback" not in err
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, err = studio_cli(
        f"postgresql://u:Sup3rSecret@127.0.0.1:{port}/db?connect_timeout=2")
    assert code == 3 and "[E_STORE_UNAVAILABLE]" in err
    assert "Sup3rSecret" not in out + err and "Traceback" not in err


@pytest.mark.e2e
def test_goondan_studio_on_goondan_store_shows_the_store_with_its_password_masked(
    store: PostgresBackend, postgres_url: str, tmp_path: Path,
) -> None:
    """The command itself, the URL from GOONDAN_STORE: its output and answers mask it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "goondan", "--state-root", str(tmp_path), "studio", "--port",
         "0"], env={**os.environ, "GOONDAN_STORE": postgres_url}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert proc.stdout is not None
        url = studio_url(proc.stdout.readline())
        second = proc.stdout.readline()
        assert second.strip() == f"store {mask_url(postgres_url)} (PostgreSQL)"
        status, _, doc = request(url, "/api/overview")
        assert status == 200 and doc["store"] == mask_url(postgres_url)
        assert doc["workspaces"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    password = password_of(postgres_url)
    assert password not in second + out + err and "Traceback" not in err
