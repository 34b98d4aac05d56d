"""The studio's JSON API (docs/studio.md "API") over a state root made by a real run: the
delegation example under ``goondan run --input`` (coordinator → worker, scripted models).
The server runs in this process (``StudioServer.start``); requests go over real HTTP."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.studio.record import clear_studio_record, trace_hint, write_studio_record
from goondan.studio.server import StudioServer
from tests.support.studio_client import EventStream, request

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "delegation"


@pytest.fixture(scope="module")
def delegated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("studio-state")
    result = subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(root), "run", "--bundle",
         str(EXAMPLE), "--input", "What is 17 * 23?"],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert result.returncode == 0, result.stderr
    return root


@pytest.fixture(scope="module")
def studio(delegated: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StudioServer]:
    static = tmp_path_factory.mktemp("static")
    (static / "index.html").write_text("<!doctype html><title>shell</title>")
    (static / "app.js").write_text("console.log('app')")
    with StudioServer(delegated, port=0, static_dir=static).start() as server:
        yield server


def get(server: StudioServer, path: str, **kwargs: Any) -> tuple[int, Any]:
    status, _, body = request(server.url, path, **kwargs)
    return status, body


def _instances(server: StudioServer) -> dict[str, dict[str, Any]]:
    status, doc = get(server, "/api/overview")
    assert status == 200
    [workspace] = doc["workspaces"]
    return {i["agent"]: i for i in workspace["instances"]}


def test_overview_lists_workspaces_and_instances_by_agent_when_nothing_runs(
    studio: StudioServer, delegated: Path
) -> None:
    status, doc = get(studio, "/api/overview")
    assert status == 200
    assert doc["stateRoot"] == str(delegated) and doc["swarms"] == []
    [workspace] = doc["workspaces"]
    assert Path(workspace["bundleDir"]) == EXAMPLE
    rows = {i["agent"]: i for i in workspace["instances"]}
    assert set(rows) == {"coordinator", "worker"}
    coordinator = rows["coordinator"]
    assert coordinator["instanceKey"] == "delegation" and coordinator["messageCount"] == 4
    assert coordinator["href"] == (
        f"/conversations/{workspace['workspaceId']}/coordinator/delegation")


def test_conversation_pairs_tool_calls_with_their_results(studio: StudioServer) -> None:
    href = _instances(studio)["coordinator"]["href"]
    status, doc = get(studio, "/api" + href)
    assert status == 200 and doc["total"] == 4 and doc["offset"] == 0
    roles = [m["role"] for m in doc["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    user, call, result, answer = doc["messages"]
    assert user["text"] == "What is 17 * 23?" and user["pending"] is False
    [tool_call] = call["toolCalls"]
    assert tool_call["name"] == "agents__request"
    assert tool_call["arguments"] == {"target": "worker", "input": "Compute 17 * 23."}
    assert result["toolCallId"] == tool_call["id"] and result["toolName"] == "agents__request"
    assert result["isError"] is False and "17 * 23 = 391" in result["text"]
    assert result["source"]["type"] == "tool"
    assert answer["text"] == "The worker says: 17 * 23 = 391"


def test_conversation_search_and_paging(studio: StudioServer) -> None:
    href = _instances(studio)["coordinator"]["href"]
    status, found = get(studio, f"/api{href}?q=WORKER%20SAYS")
    assert status == 200 and found["total"] == 1
    assert found["messages"][0]["text"] == "The worker says: 17 * 23 = 391"
    status, by_args = get(studio, f"/api{href}?q=compute%2017")  # a tool call's arguments
    assert [m["role"] for m in by_args["messages"]] == ["assistant"]
    status, page = get(studio, f"/api{href}?offset=1&limit=2")
    assert page["total"] == 4 and page["offset"] == 1
    assert [m["role"] for m in page["messages"]] == ["assistant", "tool"]
    status, bad = get(studio, f"/api{href}?limit=-3")
    assert status == 400 and bad["error"]["code"] == "E_STUDIO_BAD_REQUEST"
    status, bad = get(studio, f"/api{href}/stream?cursor=1:2:3")
    assert status == 400 and bad["error"]["code"] == "E_STUDIO_BAD_REQUEST"
    with EventStream(studio.url, f"/api{href}/stream?cursor={page['cursor']}") as stream:
        assert stream.status == 200


def test_unknown_paths_instances_traces_and_files_are_404(studio: StudioServer) -> None:
    for path in ("/api/nothing", "/api/conversations/ws/agent/key",
                 "/api/conversations/ws/agent/key/stream", "/api/traces/ffffffffffff",
                 "/static/missing.js", "/static/../server.py", "/static/%2e%2e/server.py"):
        status, doc = get(studio, path)
        assert status == 404, path
        assert doc["error"]["code"] == "E_STUDIO_NOT_FOUND", path
    status, doc = get(studio, "/api/approvals/apr_0123456789abcdef01234567", method="POST",
                      body={"decision": "approve"})
    assert status == 404 and doc["error"]["code"] == "E_STUDIO_NOT_FOUND"


def test_page_paths_answer_the_shell_and_static_files_are_served(studio: StudioServer) -> None:
    for path in ("/", "/traces/abc", "/conversations/a/b/c", "/approvals"):
        status, headers, body = request(studio.url, path)
        assert status == 200 and body == "<!doctype html><title>shell</title>", path
        assert headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in headers["content-security-policy"]
    status, headers, body = request(studio.url, "/static/app.js")
    assert status == 200 and body == "console.log('app')"
    assert headers["content-type"].startswith("text/javascript")


def test_traces_list_and_waterfall_of_the_delegation(studio: StudioServer) -> None:
    status, listed = get(studio, "/api/traces")
    assert status == 200
    [row] = listed["traces"]
    assert row["rootName"] == "turn coordinator" and row["spanCount"] == 10
    assert row["error"] is False and row["durationMs"] > 0
    status, doc = get(studio, f"/api/traces/{row['traceId'][:12]}")  # a prefix is enough
    assert status == 200 and doc["traceId"] == row["traceId"]
    spans = doc["spans"]
    assert len(spans) == 10
    assert [s["startMs"] for s in spans] == sorted(s["startMs"] for s in spans)
    by_id = {s["spanId"]: s for s in spans}
    [root] = [s for s in spans if s["parentSpanId"] is None]
    assert root["kind"] == "turn" and root["agent"] == "coordinator"
    worker_turn = next(s for s in spans if s["kind"] == "turn" and s["agent"] == "worker")
    chain = []
    span = worker_turn
    while span["parentSpanId"] is not None:
        span = by_id[span["parentSpanId"]]
        chain.append(span["kind"])
    assert chain == ["request", "tool", "step", "turn"]
    tool = next(s for s in spans if s["kind"] == "tool")
    assert tool["name"] == "agents__request" and tool["attributes"]["toolName"] == "agents__request"
    assert all(s["status"] == "ok" and s["durationMs"] is not None for s in spans)
    llm = next(s for s in spans if s["kind"] == "llm")
    assert {"inputTokens", "outputTokens"} <= set(llm["attributes"])


def test_no_approvals_is_an_empty_list(studio: StudioServer) -> None:
    assert get(studio, "/api/approvals") == (200, {"approvals": []})


def test_a_decision_must_be_same_origin_json(studio: StudioServer) -> None:
    path = "/api/approvals/apr_0123456789abcdef01234567"
    status, doc = get(studio, path, method="POST", body=b'{"decision": "approve"}',
                      headers={"Content-Type": "text/plain"})
    assert status == 415 and doc["error"]["code"] == "E_STUDIO_BAD_REQUEST"
    status, doc = get(studio, path, method="POST", body={"decision": "approve"},
                      headers={"Origin": "http://evil.example"})
    assert status == 403 and doc["error"]["code"] == "E_STUDIO_FORBIDDEN"
    status, doc = get(studio, path, method="POST", body={"decision": "maybe"})
    assert status == 400 and doc["error"]["code"] == "E_STUDIO_BAD_REQUEST"


def test_a_loopback_studio_refuses_a_foreign_host_name(studio: StudioServer) -> None:
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1."""
    status, doc = get(studio, "/api/overview", headers={"Host": f"evil.example:{studio.port}"})
    assert status == 403 and doc["error"]["code"] == "E_STUDIO_FORBIDDEN"
    assert get(studio, "/api/overview", headers={"Host": f"localhost:{studio.port}"})[0] == 200


def test_with_a_token_every_api_request_needs_it(delegated: Path) -> None:
    token = "t0ken-for-the-studio-test"
    with StudioServer(delegated, port=0, token=token).start() as server:
        for path in ("/api/overview", "/api/traces", "/api/approvals"):
            status, doc = get(server, path)
            assert status == 401 and doc["error"]["code"] == "E_STUDIO_UNAUTHORIZED"
            assert get(server, path, headers={"Authorization": "Bearer wrong"})[0] == 401
            assert get(server, f"{path}?token=wrong")[0] == 401
            assert get(server, path, headers={"Authorization": f"Bearer {token}"})[0] == 200
            assert get(server, f"{path}?token={token}")[0] == 200
        status, doc = get(server, f"/api/nothing?token={token}")  # never echoed back
        assert status == 404 and token not in doc["error"]["message"]
        with EventStream(server.url, "/api/stream") as stream:
            assert stream.status == 401
        with EventStream(server.url, f"/api/stream?token={token}") as stream:
            assert stream.status == 200
        assert get(server, "/")[0] == 200  # the page itself reads ?token= and sends it


def test_a_public_address_without_a_token_is_refused(delegated: Path) -> None:
    from goondan.errors import UsageError

    with pytest.raises(UsageError) as caught:
        StudioServer(delegated, host="0.0.0.0", port=0)
    assert caught.value.code == "E_STUDIO_TOKEN_REQUIRED"


def test_overview_stream_sends_the_overview(studio: StudioServer) -> None:
    with EventStream(studio.url, "/api/stream") as stream:
        assert stream.status == 200 and stream.content_type.startswith("text/event-stream")
        name, doc = next(stream.events(deadline_s=10))
    assert name == "overview" and {w["workspaceId"] for w in doc["workspaces"]}


def test_inspect_trace_prints_the_studio_link(delegated: Path, studio: StudioServer) -> None:
    _, listed = get(studio, "/api/traces")
    trace_id = listed["traces"][0]["traceId"]
    assert trace_hint(delegated, trace_id) == (
        f"open in studio: goondan studio → http://127.0.0.1:PORT/traces/{trace_id}")
    record = write_studio_record(delegated, studio.url)
    try:
        assert trace_hint(delegated, trace_id) == (
            f"open in studio: {studio.url}traces/{trace_id}")
        shown = subprocess.run(
            [sys.executable, "-m", "goondan", "--state-root", str(delegated), "inspect", "trace",
             trace_id], capture_output=True, text=True, timeout=60, check=False)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[-1] == f"open in studio: {studio.url}traces/{trace_id}"
        assert get(studio, f"/traces/{trace_id}")[0] == 200  # the page shell: the link opens
    finally:
        clear_studio_record(record)


def test_a_bug_answers_500_and_the_server_keeps_serving(
    studio: StudioServer, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from goondan.studio import data

    def broken(root: Path) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(data, "overview", broken)
    status, doc = get(studio, "/api/overview")
    assert status == 500 and doc["error"]["code"] == "E_INTERNAL"
    assert "RuntimeError: boom" in capfd.readouterr().err
    monkeypatch.undo()
    assert get(studio, "/api/overview")[0] == 200


def test_a_refused_post_does_not_leave_its_body_as_the_next_request(
    studio: StudioServer,
) -> None:
    """Keep-alive: a body the server did not read (wrong content type) must not be parsed as
    a second request on the same connection."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", studio.port, timeout=10)
    try:
        body = b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        conn.request("POST", "/api/approvals/apr_0123456789abcdef01234567", body=body,
                     headers={"Content-Type": "text/plain"})
        first = conn.getresponse()
        assert first.status == 415
        first.read()
        conn.sock.settimeout(5)
        assert conn.sock.recv(1) == b""  # closed: no answer to the smuggled request
    finally:
        conn.close()
