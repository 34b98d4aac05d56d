"""Issue 27 item 5 under ``goondan run``: a ``bash__exec`` background job does not survive the
call (or, kept with ``keepBackground``, the swarm), and nothing goondan started is left alive
after the run ends (tests/support/process_tree.py: parent chain and process group)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.connector_e2e import FAKE_KEY, REPO, base_bundle
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.process_tree import ProcessWatch, alive, supported
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180),
              pytest.mark.skipif(not supported(), reason="needs /proc")]

BASH = "  tools:\n    - ref: {kind: Tool, name: bash, package: \"@goondan/base\"}\n"


def test_background_jobs_of_bash_exec_do_not_outlive_the_call_or_the_run(
    tmp_path: Path, state_root: Path
) -> None:
    watch = ProcessWatch()
    with FakeProvider() as fake:
        fake.enqueue(
            FakeReply.calls(
                FakeToolCall("bash__exec", {"command": "sleep 7791 >/dev/null 2>&1 & echo $!"}),
                FakeToolCall("bash__exec", {"command": "sleep 7792 >/dev/null 2>&1 & echo $!",
                                            "keepBackground": True}),
            ),
            "done",
        )
        bundle = base_bundle(tmp_path / "bundle", fake.base_url("openai"), {"assistant": BASH}, "")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "goondan",
                "--state-root",
                str(state_root),
                "run",
                "--bundle",
                str(bundle),
                "--input",
                "start the jobs",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=150,
            check=False,
            env={**os.environ, FAKE_KEY_ENV: FAKE_KEY},
        )
        assert result.returncode == 0, result.stderr
        second = fake.requests[1].json
    outputs = [json.loads(m["content"]) for m in second["messages"] if m["role"] == "tool"]
    pids = [int(o["stdout"].strip()) for o in outputs]
    assert len(pids) == 2
    leftovers = watch.leftovers()
    assert [p for p in pids if alive(p)] == [] and leftovers == []
