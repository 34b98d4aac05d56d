"""Parts of the Ray engine that run without Ray: the host's bundle cache and the environment the
driver forwards to hosted workers (docs/scaling.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from goondan.engines.ray.host import BundleCache
from goondan.engines.ray.spawner import forwarded_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def test_a_host_loads_the_bundle_once_until_one_of_its_files_changes(tmp_path: Path) -> None:
    bundle = tmp_path / "delegation"
    shutil.copytree(EXAMPLE, bundle)
    cache = BundleCache()

    async def main() -> None:
        first = await asyncio.gather(
            *(cache.get(str(bundle), str(tmp_path / "state")) for _ in range(20))
        )
        assert cache.loads == 1 and all(b is first[0] for b in first)  # a burst shares one load
        manifest = bundle / "goondan.yaml"
        text = manifest.read_text()
        stat = manifest.stat()
        manifest.write_text(text + "\n# edited\n")
        os.utime(manifest, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        edited = await cache.get(str(bundle), str(tmp_path / "state"))
        assert cache.loads == 2 and edited is not first[0]  # an edit is seen by the next instance
        assert await cache.get(str(bundle), str(tmp_path / "state")) is edited and cache.loads == 2

    asyncio.run(main())


def test_the_driver_forwards_its_environment_but_not_its_machine() -> None:
    env = {
        "OPENAI_API_KEY": "k",
        "WEBHOOK_SIGNING_SECRET": "s",
        "GOONDAN_STATE_ROOT": "/shared/state",
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "PWD": "/here",
        "RAY_ADDRESS": "auto",
        "LD_LIBRARY_PATH": "/opt",
        "VIRTUAL_ENV": "/venv",
        "PATHS_OF_MINE": "kept",
    }
    assert forwarded_env(env) == {"OPENAI_API_KEY": "k", "WEBHOOK_SIGNING_SECRET": "s",
                                  "GOONDAN_STATE_ROOT": "/shared/state", "PATHS_OF_MINE": "kept"}


def test_a_host_takes_the_forwarded_environment_and_gives_the_node_its_own_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from goondan.swarm.hosting import InstanceHost

    monkeypatch.setenv("NODE_OWN", "node")
    monkeypatch.delenv("FORWARDED_ONLY", raising=False)
    host = InstanceHost(lambda *_: None)  # only the environment is tested
    host.apply_env({"NODE_OWN": "driver", "FORWARDED_ONLY": "x"})
    assert (os.environ["NODE_OWN"], os.environ["FORWARDED_ONLY"]) == ("driver", "x")
    host.apply_env({})  # e.g. removed from the .env file before `goondan restart`
    assert os.environ["NODE_OWN"] == "node" and "FORWARDED_ONLY" not in os.environ


class _Method:
    """A Ray actor method as the driver calls it: ``.options(...).remote(*args)``."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def options(self, **_: Any) -> _Method:
        return self

    def remote(self, *args: Any) -> Any:
        return self.fn(*args)


def test_a_cancelled_host_poll_ends_that_hosts_workers(tmp_path: Path) -> None:
    """``asyncio.run`` cancels every task at its end, the poll of a host too: its workers are
    killed on the host and end, so a stop waiting for them ends (the host actor stands in for
    Ray's: nothing else of Ray runs)."""
    pytest.importorskip("ray")
    from goondan.engines.ray.spawner import RaySpawner, _RayHandle, _RayTransport
    from goondan.swarm.spawner import SpawnRequest

    killed: list[str] = []

    async def poll() -> Any:
        await asyncio.Event().wait()

    actor = SimpleNamespace(poll=_Method(poll), kill=_Method(killed.append))

    async def main() -> None:
        spawner = RaySpawner(tmp_path, state_root=tmp_path)
        spawner._actors, spawner._by_host, spawner._epochs = [actor], [{"a.k#1"}], ["e1"]
        handle = _RayHandle(SpawnRequest("a", "k"), _RayTransport(spawner, 0, "a.k#1"))
        spawner._handles["a.k#1"] = handle
        pump = asyncio.get_running_loop().create_task(spawner._pump(0))
        await asyncio.sleep(0)
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
        assert pump.cancelled()
        async with asyncio.timeout(5):
            ended = await handle.wait()
        assert ended.signal == 9 and killed == ["a.k#1"] and not spawner._handles

    asyncio.run(main())
