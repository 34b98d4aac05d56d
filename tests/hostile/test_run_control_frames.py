"""Issue 27 item 10: ``goondan send`` of a large message, and ``run --detach`` in a directory
holding a ``goondan.py``.

The control socket carried one JSON line read with asyncio's default 64 KiB limit: a longer
message failed with "Separator is not found, and chunk exceed the limit". A line may now be up
to 16 MiB; above that the client refuses with ``E_RUN_MESSAGE_TOO_LARGE`` before sending, and the
orchestrator answers an oversized line with the same code. The orchestrator that ``run --detach``
starts ran ``python -m goondan`` with the current directory first on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.swarm.state import read_active
from tests.support.hostile_bundles import write_bundle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
MAX_CONTROL_BYTES = 16 * 1024 * 1024  # the documented bound (goondan.ipc.controlwire)


def goondan(state_root: Path, *args: str, input: str | None = None, cwd: Path = REPO,
            python_flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, *python_flags, "-m", "goondan", "--state-root", str(state_root), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        input=input,
        check=False,
        env=env,
    )


def test_the_documented_bound_is_the_one_in_force() -> None:
    from goondan.ipc.controlwire import MAX_CONTROL_BYTES as in_force

    assert in_force == MAX_CONTROL_BYTES


def _stored_text(state_root: Path) -> str:
    return "".join(
        p.read_text(encoding="utf-8") for p in (state_root / "workspaces").rglob("*.jsonl")
    )


def test_send_carries_messages_of_100_kib_and_1_mib_and_refuses_above_the_bound(
    tmp_path: Path, state_root: Path,
) -> None:
    bundle = write_bundle(tmp_path / "bundle", script=[{"text": "ok"}], loop=True)
    started = goondan(state_root, "run", str(bundle), "--detach")
    assert started.returncode == 0, started.stderr
    try:
        medium = "m" * (100 * 1024)  # over the old 64 KiB, under the 128 KiB argv limit
        answer = goondan(state_root, "send", "--bundle", str(bundle), medium)
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip() == "ok"

        large = "".join(f"{i:07d} " for i in range(1024 * 1024 // 8))  # 1 MiB, through stdin
        answer = goondan(state_root, "send", "--bundle", str(bundle), "--json", "-", input=large)
        assert answer.returncode == 0, answer.stderr
        assert json.loads(answer.stdout)["response"] == "ok"
        assert large in _stored_text(state_root)  # the agent got all of it

        huge = "x" * (MAX_CONTROL_BYTES + 1)
        refused = goondan(state_root, "send", "--bundle", str(bundle), "-", input=huge)
        assert refused.returncode == 2
        assert "E_RUN_MESSAGE_TOO_LARGE" in refused.stderr and "16 MiB" in refused.stderr
        assert "Traceback" not in refused.stderr

        # a client that ignores the bound gets a clear answer, and the orchestrator goes on
        active = read_active(state_root)
        assert active is not None and active.control_socket
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(active.control_socket)
            raw.sendall(
                b'{"command": "request", "input": "' + b"y" * (MAX_CONTROL_BYTES + 10) + b'"}\n'
            )
            reply = raw.makefile("rb").readline()
        assert json.loads(reply)["code"] == "E_RUN_MESSAGE_TOO_LARGE"
        again = goondan(state_root, "send", "--bundle", str(bundle), "still there?")
        assert again.returncode == 0 and again.stdout.strip() == "ok", again.stderr
    finally:
        assert goondan(state_root, "stop", "--bundle", str(bundle)).returncode == 0


def test_detach_in_a_directory_with_a_goondan_py_does_not_import_it(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = write_bundle(tmp_path / "bundle", script=[{"text": "ok"}], loop=True)
    here = tmp_path / "here"
    here.mkdir()
    marker = tmp_path / "imported"
    (here / "goondan.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise SystemExit('shadowed')\n"
    )
    # -P: this process itself must not import ./goondan.py (as the `goondan` console script would
    # not)
    started = goondan(state_root, "run", str(bundle), "--detach", cwd=here, python_flags=("-P",))
    try:
        assert started.returncode == 0, started.stderr
        answer = goondan(
            state_root, "send", "--bundle", str(bundle), "hi", cwd=here, python_flags=("-P",)
        )
        # an agent process ran
        assert answer.returncode == 0 and answer.stdout.strip() == "ok", answer.stderr
        assert not marker.exists(), "a goondan.py of the current directory was imported"
    finally:
        goondan(state_root, "stop", "--bundle", str(bundle))
