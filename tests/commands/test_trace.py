"""``goondan inspect trace`` on the delegation example run under ``goondan run --input``: one
tree across both agent processes, with consistent parent links — from the state root's event
logs, and from a PostgreSQL store's span table (``--store``) after that run's state root is
gone, as when the agents ran on other machines."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan import cli
from tests.support.postgres import PostgresCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "delegation"


def goondan(*args: str, state_root: Path, store: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "GOONDAN_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), *args],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**env, "GOONDAN_STORE": store} if store else env,
    )


@pytest.fixture(scope="module")
def delegated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("trace-state")
    result = goondan(
        "run", "--bundle", str(EXAMPLE), "--input", "What is 17 * 23?", state_root=root
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The worker says: 17 * 23 = 391"
    return root


def _path(node: dict[str, Any], names: list[str]) -> list[str]:
    """Follow the first child whose name starts with each of ``names``; the names met."""
    met = [node["name"]]
    for name in names:
        node = next(c for c in node["children"] if c["name"].startswith(name))
        met.append(node["name"])
    return met


def test_inspect_trace_last_is_one_tree_across_agents(delegated: Path) -> None:
    result = goondan("inspect", "trace", "--last", "--json", state_root=delegated)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    [root] = data["spans"]
    assert root["parentSpanId"] is None and root["name"] == "turn coordinator"
    assert _path(
        root, ["step 0", "agents__request", "request worker", "turn worker", "step 0", "llm"]
    ) == [
        "turn coordinator",
        "step 0",
        "agents__request",
        "request worker",
        "turn worker",
        "step 0",
        "llm delegation-worker",
    ]

    def check(node: dict[str, Any], parent: dict[str, Any] | None) -> int:
        assert node["traceId"] == data["traceId"]
        assert node["parentSpanId"] == (parent["spanId"] if parent else None)
        assert node["durationMs"] is not None and node["status"] == "ok"
        return 1 + sum(check(c, node) for c in node["children"])

    assert check(root, None) == 10
    agents = {root["agentName"], _path(root, [])[0]}
    assert "coordinator" in agents


def test_inspect_trace_flat_json_and_text(delegated: Path) -> None:
    flat = json.loads(
        goondan("inspect", "trace", "--last", "--json", "--flat", state_root=delegated).stdout
    )
    spans = flat["spans"]
    ids = {s["spanId"] for s in spans}
    assert [s for s in spans if s["parentSpanId"] is None] == [spans[0]]
    assert all(s["parentSpanId"] in ids for s in spans[1:])
    assert {s["kind"] for s in spans} == {"turn", "step", "llm", "toolCall", "agentCall"}
    assert {s["agentName"] for s in spans} == {"coordinator", "worker"}
    for span in spans:
        assert set(span) >= {"traceId", "spanId", "parentSpanId", "name", "kind", "startTime",
                             "durationMs", "attributes"}
    text = goondan("inspect", "trace", flat["traceId"][:12], state_root=delegated)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith(f"trace {flat['traceId']}")
    indent = {line.strip().split("  ")[0]: len(line) - len(line.lstrip()) for line in lines[1:]}
    assert (
        indent["turn coordinator"]
        < indent["agents__request"]
        < indent["request worker"]
        < indent["turn worker"]
    )


def test_inspect_instance_traces_lists_the_trace(delegated: Path) -> None:
    flat = json.loads(
        goondan("inspect", "trace", "--last", "--json", "--flat", state_root=delegated).stdout
    )
    listed = goondan(
        "inspect",
        "instance",
        "delegation",
        "--agent",
        "worker",
        "--traces",
        "--json",
        state_root=delegated,
    )
    assert listed.returncode == 0, listed.stderr
    traces = json.loads(listed.stdout)["traces"]
    assert [t["traceId"] for t in traces] == [flat["traceId"]]
    assert traces[0]["agents"] == ["coordinator", "worker"] and traces[0]["spanCount"] == 10
    text = goondan(
        "inspect",
        "instance",
        "delegation",
        "--agent",
        "coordinator",
        "--traces",
        state_root=delegated,
    )
    assert flat["traceId"] in text.stdout


def test_unknown_trace_is_a_clear_error(delegated: Path) -> None:
    result = goondan("inspect", "trace", "ffffffffffff", state_root=delegated)
    assert result.returncode != 0 and "E_TRACE_NOT_FOUND" in result.stderr


@pytest.fixture(scope="module")
def delegated_on_postgres(tmp_path_factory: pytest.TempPathFactory,
                          postgres_cluster: PostgresCluster) -> Iterator[str]:
    """The same run with ``GOONDAN_STORE`` on PostgreSQL; its state root is deleted after it."""
    name = postgres_cluster.create_database()
    url = postgres_cluster.url(name)
    root = tmp_path_factory.mktemp("ran-here")
    result = goondan("run", "--bundle", str(EXAMPLE), "--input", "What is 17 * 23?",
                     state_root=root, store=url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The worker says: 17 * 23 = 391"
    shutil.rmtree(root)
    try:
        yield url
    finally:
        postgres_cluster.drop_database(name)


def _shape(node: dict[str, Any]) -> tuple[Any, ...]:
    """A tree without ids and times (siblings sorted: two may start in the same millisecond)."""
    return (node["name"], node["kind"], node["agentName"], node["instanceKey"], node["status"],
            sorted(node["attributes"]), sorted(_shape(c) for c in node["children"]))


def test_inspect_trace_store_shows_the_whole_tree_without_the_runs_state_root(
    delegated: Path, delegated_on_postgres: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Both agent processes wrote their spans into the store: another state root (another
    machine) reads the same tree the event logs give, parent links and all."""
    monkeypatch.delenv("GOONDAN_STORE", raising=False)

    def inspect(*args: str, state_root: Path = tmp_path / "elsewhere") -> Any:
        with pytest.raises(SystemExit) as info:  # in this process: no interpreter to start
            cli.main(["--state-root", str(state_root), "inspect", *args, "--json"])
        out, err = capsys.readouterr()
        assert info.value.code in (0, None) and err == "", err
        return json.loads(out)

    data = inspect("trace", "--last", "--store", delegated_on_postgres)
    files = inspect("trace", "--last", state_root=delegated)
    assert [_shape(r) for r in data["spans"]] == [_shape(r) for r in files["spans"]]
    [root] = data["spans"]

    def check(node: dict[str, Any], parent: dict[str, Any] | None) -> int:
        assert node["traceId"] == data["traceId"]
        assert node["parentSpanId"] == (parent["spanId"] if parent else None)
        assert node["durationMs"] is not None and node["status"] == "ok"
        return 1 + sum(check(c, node) for c in node["children"])

    assert check(root, None) == 10
    assert {s["agentName"] for s in _flat(root)} == {"coordinator", "worker"}
    [trace] = inspect("instance", "delegation", "--agent", "worker", "--traces", "--store",
                      delegated_on_postgres)["traces"]
    assert (trace["traceId"], trace["spanCount"]) == (data["traceId"], 10)


def _flat(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(s for c in node["children"] for s in _flat(c))]
