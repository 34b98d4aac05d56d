"""open_backend: a parsed --store / GOONDAN_STORE to the backend of the storage contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from goondan.storage.backends import open_backend
from goondan.storage.jsonl import JsonlBackend
from goondan.storage.url import parse_store

ROOT = Path(__file__).resolve().parents[2]


def test_no_store_is_the_resolved_state_root_and_a_path_is_that_state_root(
    tmp_path: Path,
) -> None:
    default = open_backend(parse_store(None, env={}), env={"GOONDAN_STATE_ROOT": str(tmp_path)})
    assert isinstance(default, JsonlBackend) and default.state_root == tmp_path
    given = open_backend(parse_store(str(tmp_path / "other"), env={}))
    assert isinstance(given, JsonlBackend) and given.state_root == tmp_path / "other"


def test_a_postgres_url_opens_a_migrated_store(postgres_url: str) -> None:
    backend = open_backend(parse_store(None, env={"GOONDAN_STORE": postgres_url}))
    try:
        assert postgres_url.split(":")[2].split("@")[0] not in repr(backend)  # masked
        store = backend.open_instance("ws", "planner", "k")
        assert store.load().next_messages == []
        store.close()
        assert [i["instanceKey"] for i in backend.instances("ws")] == ["k"]
    finally:
        backend.close()


def test_without_the_driver_a_postgres_store_is_e_store_postgres_missing() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "from goondan.errors import GoondanError\n"
        "from goondan.storage.backends import open_backend\n"
        "from goondan.storage.url import parse_store\n"
        "try:\n"
        "    open_backend(parse_store('postgresql://u:secret@127.0.0.1:1/db'))\n"
        "except GoondanError as err:\n"
        "    print(err.code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert done.stdout.strip() == "E_STORE_POSTGRES_MISSING"
