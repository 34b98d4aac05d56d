"""The one local Ray cluster of the engine tests (``cluster``), shared by the whole session.

``ray.cluster_utils.Cluster``: a head and one more node, no dashboard, 100 MiB object store,
one CPU per node, every address on 127.0.0.1. Tests that need Ray ask for ``cluster``; without
the extra they are skipped (``pytest.importorskip`` in their module).

Health checks (``HEALTH``): a node whose raylet is killed is declared dead within about 1.5 s
(its port refuses at once: three failed checks 0.5 s apart), so the crash tests stay short; a
raylet that is alive but starved of CPU (a loaded 2-core machine) has 10 s to answer each check,
so it is not declared dead (which would stop it and move its hosts, e.g. all onto the head).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

HEALTH = {
    "health_check_period_ms": 500, "health_check_failure_threshold": 3,
    "health_check_timeout_ms": 10_000, "health_check_initial_delay_ms": 0,
}
# Every node, driver and worker on loopback: tests never talk to the machine's other addresses.
NODE = {"num_cpus": 1, "object_store_memory": 100 * 1024 * 1024, "include_dashboard": False,
        "node_ip_address": "127.0.0.1"}


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "HOME", "RAY_AUTH_MODE",
                                          "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    tmp = tempfile.mkdtemp(prefix="gr", dir="/tmp")  # Ray's socket paths must stay short
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray (here and in the `goondan run` children) take
    # 127.0.0.1 as this node's address instead of the interface address.
    os.environ.update(RAY_TMPDIR=tmp, HOME=tmp, RAY_AUTH_MODE="disabled",
                      RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    # This process imported Ray already: its constant was read at import, so set it too.
    from ray._private import ray_constants
    saved_cluster_flag = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    c = Cluster(initialize_head=True, head_node_args={**NODE, "_system_config": HEALTH})
    c.add_node(**NODE)
    c.wait_for_nodes()
    ray.init(address=c.address, namespace="goondan", log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = saved_cluster_flag
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(tmp, ignore_errors=True)


def settle_nodes(cluster: Any, *, off_head: int = 1) -> None:
    """Give ``cluster`` at least ``off_head`` nodes besides the head (a crash test of this
    session may have removed one), then wait until Ray lists exactly its nodes as alive: a node
    removed a moment ago is still listed alive until its health checks fail, and a host placed
    on it would land on the head instead (soft affinity)."""
    while len(cluster.list_all_nodes()) - 1 < off_head:
        cluster.add_node(**NODE)
    cluster.wait_for_nodes(timeout=60)


async def start_with_a_host_off_head(make: Callable[[int], Any], head: str,
                                     attempts: int = 10) -> tuple[Any, list[Any], int]:
    """``(spawner, host infos, index of a host not on the head)`` for a crash test, which must
    crash a node that holds a host. The spawner places its hosts over the nodes with *soft*
    node affinity, a preference Ray does not always honour (measured here: a soft-affine actor
    landed off its alive target node in 2 of 5 creations on an idle two-node cluster), so
    every host may land on the head; then a fresh spawner (``make(attempt)``: its own state
    root, so its own host names) is started, up to ``attempts`` times. What is tested — the
    crash and the resume — starts after this."""
    for attempt in range(attempts):
        spawner = make(attempt)
        await spawner.start()
        infos = await spawner.host_info()
        off_head = [i for i, h in enumerate(infos) if h["nodeId"] != head]
        if off_head:
            return spawner, infos, off_head[0]
        await spawner.aclose()
    raise AssertionError(f"every host landed on the head node in {attempts} spawners: {infos}")


def stall_node(node: Any, seconds: float) -> None:
    """Stop ``node``'s raylet (SIGSTOP) for ``seconds``, then let it go on: a raylet starved of
    CPU on a loaded machine, answering nothing meanwhile. The pause is the fault itself, not a
    wait for a condition."""
    from ray._private import ray_constants

    (raylet,) = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET]
    os.kill(raylet.process.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(raylet.process.pid, signal.SIGCONT)
