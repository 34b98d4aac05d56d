"""The Ray engine on a PostgreSQL store (issue 36 item 4, docs/scaling.md "The Ray engine").

The session's local Ray cluster (``cluster``, tests/engines/conftest.py) and a fresh database of
the test PostgreSQL (``postgres_url``, tests/support/postgres.py). The hosts keep their instances
in PostgreSQL: nothing of a conversation is written under the driver's state root, and no
state-root marker is written or checked (no shared filesystem is needed).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from tests.support.backends import apply_schema

pytest.importorskip("ray")

from goondan.engines.ray.host import MARKER_NAME
from goondan.engines.ray.spawner import RaySpawner, host_index
from tests.engines.conftest import settle_nodes, start_with_a_host_off_head
from tests.engines.gate import gate_bundle as _bundle
from tests.engines.gate import log_lines as _log_lines
from tests.engines.gate import until as _until

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _messages(url: str, key: str) -> list[dict[str, Any]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT m.message FROM goondan_messages m JOIN goondan_instances i "
            "ON i.id = m.instance_id WHERE i.agent_name = 'worker' AND i.instance_key = %s "
            "ORDER BY m.position", (key,)).fetchall()
    return [json.loads(str(row[0]))["data"] for row in rows]


def _no_conversation_under(state_root: Path) -> None:
    """The driver's state root holds nothing of the store's, and no engine marker."""
    for pattern in ("workspaces/*/instances", "workspaces/*/inputs", "workspaces/*/approvals",
                    f"runtime/*{MARKER_NAME}"):
        assert not list(state_root.glob(pattern)), pattern


def _assert_password_nowhere_in_ray(password: str, canary: str | None = None) -> None:
    """Not in a file under Ray's temporary directory (its session logs, the workers' stdout and
    stderr, GCS files; ``canary``, which a hosted tool printed on stderr, shows that the search
    reaches what a host writes) nor in GCS's table of the actors (their options, names,
    placement; the state API needs the dashboard, which the test cluster does not run)."""
    from ray._private.state import actors

    root = Path(os.environ["RAY_TMPDIR"])
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any("worker-" in p.name for p in files), "no Ray worker log found to check"
    seen = False
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:  # a socket, a file removed meanwhile
            continue
        assert password.encode() not in data, path
        seen = seen or (canary is not None and canary.encode() in data)
    assert canary is None or seen, f"{canary!r} in no file under {root}"
    dump = json.dumps(actors(), default=str)
    assert "-host-" in dump and password not in dump


def test_a_lost_hosts_turn_resumes_from_postgres_on_its_restarted_host(
    cluster: Any, tmp_path: Path, postgres_url: str,
) -> None:
    apply_schema(postgres_url)
    log, go = tmp_path / "calls.log", tmp_path / "go"
    bundle = _bundle(tmp_path, log, go)
    driver_root = tmp_path / "driver"  # the orchestrator's; the hosts need nothing under it
    settle_nodes(cluster, off_head=2)  # three nodes: the crash removes one that holds a host
    head = cluster.head_node.node_id

    async def main() -> str:
        spawner, infos, index = await start_with_a_host_off_head(
            lambda n: RaySpawner(bundle, state_root=driver_root / str(n), hosts=3,
                                 store_url=postgres_url), head)
        (doomed,) = [n for n in cluster.list_all_nodes() if n.node_id == infos[index]["nodeId"]]
        key = next(k for k in (f"k{i}" for i in range(1000)) if host_index("worker", k, 3) == index)
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=bundle, grace_period_ms=5000)
        try:
            async with orch:
                turn = asyncio.ensure_future(
                    orch.request("worker", "wait please", instance_key=key, timeout_ms=120_000))
                # the tool runs on the doomed host and waits for the go file
                await _until(lambda: len(_log_lines(log)) == 1, 60, "the tool to start")
                assert int(_log_lines(log)[0][0]) == infos[index]["pid"]
                cluster.remove_node(doomed, allow_graceful=False)
                os.kill(infos[index]["pid"], 9)
                # the restarted host re-opens the instance from PostgreSQL and resumes the
                # turn: the idempotent call runs again there, with the same key
                await _until(lambda: len(_log_lines(log)) == 2, 90, "the resumed call")
                go.write_text("go")
                answer = response_text(await turn)
                (after,) = [h for h in await spawner.host_info()
                            if h["name"].endswith(f"-{index}")]
                again, first = _log_lines(log)[1], _log_lines(log)[0]
                assert int(again[0]) == after["pid"] != infos[index]["pid"]
                assert again[1] == first[1]  # the same call resumed, not a new one
                assert after["nodeId"] != doomed.node_id
                assert after["epoch"] != infos[index]["epoch"]
                return answer
        finally:
            await spawner.aclose()

    assert asyncio.run(asyncio.wait_for(main(), 180)) == "done"
    keys = {p.split()[1] for p in log.read_text().splitlines()}
    assert len(keys) == 1
    (stored,) = _all_instances(postgres_url)  # the one instance, in PostgreSQL
    users = [m for m in stored if m.get("role") == "user"]
    answers = [m for m in stored if m.get("role") == "assistant"
               and m.get("content") == [{"type": "text", "text": "done"}]]
    results = [m for m in stored if m.get("role") == "tool"]
    assert len(users) == 1 and len(answers) == 1 and len(results) == 1, stored  # stored once
    # the state roots of the spawners started (start_with_a_host_off_head), if any was made
    for root in [driver_root, *driver_root.glob("*")]:
        _no_conversation_under(root)
    _assert_password_nowhere_in_ray(str(urlsplit(postgres_url).password), "gate-canary")


def _all_instances(url: str) -> list[list[dict[str, Any]]]:
    import psycopg

    with psycopg.connect(url) as conn:
        keys = [str(r[0]) for r in conn.execute(
            "SELECT instance_key FROM goondan_instances WHERE agent_name = 'worker'").fetchall()]
    return [_messages(url, key) for key in keys]


def test_hosts_that_do_not_see_the_state_root_run_on_postgres(
    cluster: Any, tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``E_ENGINE_STATE_ROOT`` is the JSONL backend's: with a PostgreSQL store, hosts whose node
    does not see the driver's state root (as if on another disk) open instances and answer."""
    from goondan.engines.ray import spawner as module

    apply_schema(postgres_url)
    monkeypatch.setattr(module, "_write_marker", lambda path, token: None)  # as if on another disk
    bundle = _bundle(tmp_path, tmp_path / "calls.log", tmp_path / "go")

    async def main() -> str:
        spawner = RaySpawner(bundle, state_root=tmp_path / "driver", hosts=1,
                             store_url=postgres_url)
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=bundle, grace_period_ms=5000)
        try:
            async with orch:
                return response_text(await orch.request("worker", "hi", instance_key="k",
                                                        timeout_ms=60_000))
        finally:
            await spawner.aclose()

    assert asyncio.run(asyncio.wait_for(main(), 120)) == "hello"
    assert [m.get("role") for m in _messages(postgres_url, "k")] == ["user", "assistant"]
    _no_conversation_under(tmp_path / "driver")
    import psycopg

    with psycopg.connect(postgres_url) as conn:  # the host wrote the turn's spans (storage.md)
        turns = conn.execute("SELECT agent_name, instance_key, status FROM goondan_spans "
                             "WHERE span LIKE '%\"kind\":\"turn\"%'").fetchall()
    assert turns == [("worker", "k", "ok")]


def test_goondan_run_engine_ray_with_a_postgres_store(
    cluster: Any, tmp_path: Path, postgres_url: str,
) -> None:
    """``goondan run --engine ray`` with ``GOONDAN_STORE=postgresql://…``: the answer, the
    conversation in PostgreSQL only, the password on no command line (it is not on the
    driver's: it comes from the environment) and in no log of the swarm."""
    import subprocess
    import sys

    apply_schema(postgres_url)
    bundle = _bundle(tmp_path, tmp_path / "calls.log", tmp_path / "go")
    state_root = tmp_path / "state"
    result = subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), "run", "--bundle",
         str(bundle), "--engine", "ray", "--ray-address", cluster.address, "--input", "hi"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "GOONDAN_STORE": postgres_url},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "hello"
    (stored,) = _all_instances(postgres_url)
    assert [m.get("role") for m in stored] == ["user", "assistant"]
    _no_conversation_under(state_root)
    password = str(urlsplit(postgres_url).password)
    assert password not in result.stdout + result.stderr
    for path in state_root.rglob("*.log"):
        assert password not in path.read_text(errors="replace"), path
    _assert_password_nowhere_in_ray(password)
