"""A pooled host's instances on a PostgreSQL store share one store (docs/scaling.md).

Everything of the host's instances goes through ONE store per host (``StoreCache`` in
goondan/swarm/hosting.py): its pool for their reads and writes, and its one lock session for
all their locks (docs/storage.md "Instance locks"). Opening a store per instance left one idle
pooled connection per instance ever opened on the host; a lock connection per open instance
bounded a host's open instances by the server's ``max_connections``.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.pool import PooledSpawner
from tests.support.backends import apply_schema

pytestmark = [pytest.mark.e2e]
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"
KEYS = 8


def _connections(url: str) -> int:
    """Client connections to the test database other than this one."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()").fetchone()
    return int(row[0]) if row else 0


def test_a_pooled_hosts_instances_share_one_store(tmp_path: Path, postgres_url: str) -> None:
    apply_schema(postgres_url)
    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle)

    async def main() -> int:
        spawner = PooledSpawner(bundle, state_root=tmp_path / "state", hosts=1,
                                store_url=postgres_url)
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=bundle, reconcile_interval_s=0,
                            grace_period_ms=10_000)
        try:
            async with orch:
                for key in range(KEYS):  # one after the other: the host's pool stays small
                    answer = await orch.request("worker", "What is 17 * 23?",
                                                instance_key=f"k{key}", timeout_ms=60_000)
                    assert "391" in response_text(answer)
                return await asyncio.to_thread(_connections, postgres_url)
        finally:
            await spawner.aclose()

    used = asyncio.run(asyncio.wait_for(main(), 120))
    # the host's one lock session (all KEYS instances' locks) + its one pool (1 to 4); a lock
    # connection per instance: KEYS + the pool; a store per instance: 2 * KEYS
    assert 2 <= used <= 1 + 4, used
    assert not list((tmp_path / "state").glob("workspaces/*/instances"))
