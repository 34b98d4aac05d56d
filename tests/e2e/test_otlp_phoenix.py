"""OTLP export end to end against a real backend: Arize Phoenix from PyPI, started locally.

Phoenix lives in its own virtual environment (``make phoenix`` → ``.venv-phoenix``) so its ~150
packages never reach the project's environment; ``make test`` installs it in the background
while the tests run and the fixture waits for that (tests/support/phoenix_install.py). The test
runs the delegation example under ``goondan run`` with ``GOONDAN_OTLP_ENDPOINT`` pointing at
Phoenix, then reads the spans back from Phoenix's REST API and compares them with the trace
``goondan inspect trace`` rebuilt from ``runtime-events.jsonl``: same trace id, same span ids,
same parent links. Ingestion is asynchronous, so the test polls (failure-only deadline).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from tests.support.phoenix_install import wait_for_install

# The timeout covers the wait for make test's background install of Phoenix (a hang guard only).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "delegation"
PHOENIX = Path(os.environ.get("GOONDAN_PHOENIX_BIN") or REPO / ".venv-phoenix" / "bin" / "phoenix")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, Any]:
    response = urllib3.request("GET", url, timeout=5.0, retries=False)
    try:
        return response.status, json.loads(response.data or b"null")
    except ValueError:
        return response.status, None


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    wait_for_install(PHOENIX)
    if not PHOENIX.exists():
        pytest.skip(f"Phoenix is not installed at {PHOENIX} (run 'make phoenix')")
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
        # Phoenix's gRPC receiver binds every address: give it a free port of its own.
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_WORKING_DIR": str(tmp_path_factory.mktemp("phoenix")),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = tmp_path_factory.mktemp("phoenix-log") / "phoenix.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(PHOENIX), "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if _get(base + "/healthz")[0] == 200 or _get(base + "/")[0] == 200:
                    break
            except urllib3.exceptions.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    "Phoenix did not start:\n" + log.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


def _goondan(
    *args: str, state_root: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("protocol", ["http/protobuf"])
def test_delegation_trace_arrives_in_phoenix_with_the_same_ids(
        phoenix: str, state_root: Path, protocol: str) -> None:
    project = f"goondan-{uuid.uuid4().hex[:10]}"  # isolates this run's spans in Phoenix
    result = _goondan(
        "run", "--bundle", str(EXAMPLE), "--input", "What is 17 * 23?", state_root=state_root,
        env={"GOONDAN_OTLP_ENDPOINT": phoenix, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
             "OTEL_EXPORTER_OTLP_HEADERS": f"x-project-name={project}"},
    )
    assert result.returncode == 0, result.stderr
    local = _goondan("inspect", "trace", "--last", "--json", "--flat", state_root=state_root)
    assert local.returncode == 0, local.stderr
    trace = json.loads(local.stdout)
    expected = {s["spanId"]: s["parentSpanId"] for s in trace["spans"]}
    assert len(expected) >= 10

    url = f"{phoenix}/v1/projects/{project}/spans?trace_id={trace['traceId']}&limit=1000"
    deadline = time.monotonic() + 60
    while True:
        status, body = _get(url)
        rows = body.get("data", []) if status == 200 and isinstance(body, dict) else []
        if len(rows) >= len(expected) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert status == 200, body
    received = {r["context"]["span_id"]: r["parent_id"] for r in rows}
    assert {r["context"]["trace_id"] for r in rows} == {trace["traceId"]}
    assert received == expected
    names = {r["name"] for r in rows}
    assert {
        "invoke_agent coordinator",
        "execute_tool agents__request",
        "invoke_agent worker",
    } <= names
    llm = next(r for r in rows if r["name"].startswith("chat "))
    assert llm["attributes"]["gen_ai.operation.name"] == "chat"
    assert llm["attributes"]["gen_ai.provider.name"] == "scripted"
