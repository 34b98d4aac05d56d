"""The PostgreSQL store is an optional extra: without psycopg, choosing it is a clear
``E_STORE_POSTGRES_MISSING`` naming the extra, and nothing else of goondan needs the driver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_DRIVER = """
import sys
sys.modules["psycopg"] = None  # as if the extra were not installed
sys.modules["psycopg_pool"] = None
from goondan.errors import ConfigError
from goondan.storage.postgres import require_postgres
import goondan.storage.url, goondan.storage.leases, goondan.storage.keeper
try:
    require_postgres()
except ConfigError as err:
    print(err.code, err.suggestion)
"""


def test_choosing_postgres_without_the_extra_names_the_extra() -> None:
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_DRIVER], capture_output=True, text=True, check=True,
        cwd=ROOT, timeout=60,
    ).stdout
    assert out.startswith("E_STORE_POSTGRES_MISSING ")
    assert "pip install 'pygoondan[postgres]'" in out


def test_status_with_a_postgres_store_without_the_extra_exits_3() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None\n"
        "from goondan.cli import main\n"
        "main(['status', '--all', '--store', 'postgresql://u:pw-secret-1@127.0.0.1/db'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60,
        check=False,
    )
    assert done.returncode == 3
    assert "[E_STORE_POSTGRES_MISSING]" in done.stderr
    assert "pw-secret-1" not in done.stdout + done.stderr
