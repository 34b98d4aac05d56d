"""Parts of the Ray engine that run without Ray: the host's bundle cache and the environment the
driver forwards to hosted workers (docs/scaling.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

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
