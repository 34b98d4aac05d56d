"""Issue 32 item 3: no silent choice of swarm.

With two swarms running and neither ``--bundle`` nor a bundle in the current directory,
``send`` and ``stop`` refuse and list the running swarms (``E_RUN_SWARM_AMBIGUOUS``, exit 2);
with one, they act on it and say which.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from goondan.swarm.state import pid_alive, running_records

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: ok, options: {loop: true, script: [answer of NAME]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/m}
  prompts: {systemPrompt: Help.}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/helper, agents: [Agent/helper], instanceKey: NAME}
"""


def goondan(*args: str, cwd: Path, state_root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goondan", *args, "--state-root", str(state_root)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=cwd,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "GOONDAN_STATE_ROOT": str(state_root)},
    )


def test_send_and_stop_refuse_to_guess_between_two_running_swarms(
    tmp_path: Path, state_root: Path
) -> None:
    bundles = {}
    for name in ("alpha", "beta"):
        bundles[name] = tmp_path / name
        bundles[name].mkdir()
        (bundles[name] / "goondan.yaml").write_text(BUNDLE.replace("NAME", name), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"  # no goondan.yaml here
    elsewhere.mkdir()
    pids: list[int] = []
    try:
        for bundle in bundles.values():
            started = goondan("run", "--detach", str(bundle), cwd=elsewhere, state_root=state_root)
            assert started.returncode == 0, started.stderr
        pids = [r.pid for r in running_records(state_root)]
        assert len(pids) == 2

        for args in (("send", "hello"), ("stop",)):
            refused = goondan(*args, cwd=elsewhere, state_root=state_root)
            assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
            assert "E_RUN_SWARM_AMBIGUOUS" in refused.stderr and refused.stdout == ""
            for bundle in bundles.values():
                assert str(bundle) in refused.stderr, refused.stderr
        assert sorted(r.pid for r in running_records(state_root)) == sorted(pids)  # nothing stopped

        # the bundle's directory, or --bundle, still chooses without a word
        chosen = goondan("send", "hello", cwd=bundles["alpha"], state_root=state_root)
        assert chosen.returncode == 0 and chosen.stdout.strip() == "answer of alpha", chosen.stderr
        assert chosen.stderr == ""
        stopped = goondan(
            "stop", "--bundle", str(bundles["alpha"]), cwd=elsewhere, state_root=state_root
        )
        assert stopped.returncode == 0, stopped.stderr

        # one left: send and stop act on it and say which
        only = goondan("send", "hello", cwd=elsewhere, state_root=state_root)
        assert only.returncode == 0 and only.stdout.strip() == "answer of beta", only.stderr
        assert f"Using swarm default of {bundles['beta']}" in only.stderr
        last = goondan("stop", cwd=elsewhere, state_root=state_root)
        assert last.returncode == 0, last.stderr
        assert (
            f"Using swarm default of {bundles['beta']}" in last.stderr
            and "instanceKey=beta" in last.stdout
        )
        assert running_records(state_root) == []
    finally:
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, 9)
