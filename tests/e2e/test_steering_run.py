"""Issue 31 item 4: with ``inputPolicy: steer``, input that arrives during a slow tool call joins
the running turn: it is in that turn's next model request, and both callers get its answer.

Real ``goondan run --foreground`` and two ``goondan send`` processes against the fake provider
(OpenAI wire, every request recorded); the slow tool is ``bash__exec`` waiting for a gate file
that the test creates once the second input was taken by the running turn (its start claimed in
the Swarm inbox's claim file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.connector_e2e import FAKE_KEY, base_bundle, goondan_run, wait_for
from tests.support.fake_provider import FakeProvider, FakeReply
from tests.support.runtime_harness import FAKE_KEY_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _send(state_root: Path, bundle: Path, text: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "send",
            "--bundle",
            str(bundle),
            "-k",
            "steer",
            "--json",
            text,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, FAKE_KEY_ENV: FAKE_KEY},
    )


def _claimed(state_root: Path) -> int:
    """Inputs of conversation ``steer`` whose start the agent process claimed."""
    ids: set[str] = set()
    for path in state_root.glob("workspaces/*/inputs/*/started/assistant.steer.jsonl"):
        ids |= {
            json.loads(line)["id"] for line in path.read_text().splitlines() if line.endswith("}")
        }
    return len(ids)


def _user_texts(messages: list[dict[str, object]]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == "user"]


@pytest.mark.parametrize("policy", ["steer", "queue"])
def test_input_sent_during_a_slow_tool_call_joins_the_running_turn(
    state_root: Path, tmp_path: Path, policy: str,
) -> None:
    gate = tmp_path / "gate"
    agent = (f"  inputPolicy: {policy}\n  tools:\n"
             "    - ref: {kind: Tool, name: bash, package: \"@goondan/base\"}\n")
    with FakeProvider() as fake:
        wait_gate = f"while [ ! -f {gate} ]; do sleep 0.02; done; echo gate-open"
        fake.enqueue(
            FakeReply.calls(("bash__exec", {"command": wait_gate})),
            FakeReply.reply("both handled"),
            FakeReply.reply("second, on its own"),
        )
        bundle = base_bundle(tmp_path / "bundle", fake.base_url("openai"), {"assistant": agent}, "")
        with goondan_run(bundle, state_root, {}):
            first = _send(state_root, bundle, "<<first>>")
            fake.wait_for_requests(1, timeout=60)  # the model asked for the slow tool
            second = _send(state_root, bundle, "<<second>>")
            if policy == "steer":  # taken by the running turn: its start is claimed
                wait_for(
                    lambda: _claimed(state_root) == 2 or second.poll() is not None,
                    60,
                    "the steered input",
                )
            else:  # stored and acknowledged, waiting for its own turn
                wait_for(
                    lambda: (
                        "<<second>>"
                        in "".join(
                            p.read_text()
                            for p in state_root.glob("workspaces/*/inputs/*/inbox.jsonl")
                        )
                    ),
                    60,
                    "the input",
                )
            gate.touch()
            out_first, err_first = first.communicate(timeout=60)
            out_second, err_second = second.communicate(timeout=60)
        assert first.returncode == 0 and second.returncode == 0, (err_first, err_second)
        answers = (json.loads(out_first)["response"], json.loads(out_second)["response"])
        requests = [r.json for r in fake.requests]
    if policy == "queue":  # the default: the second input waits for a turn of its own
        assert answers == ("both handled", "second, on its own")
        assert len(requests) == 3
        assert not any("<<second>>" in t for t in _user_texts(requests[1]["messages"]))
        return
    assert answers == ("both handled", "both handled")  # both callers get the running turn's answer
    assert len(requests) == 2  # one turn: the tool step, then the answer
    messages = requests[1]["messages"]
    roles = [m["role"] for m in messages]
    assert roles[-3:] == ["assistant", "tool", "user"]  # the tool's result, then the steered input
    steered = str(messages[-1]["content"])
    assert steered.startswith("[goondan_context]\n") and steered.endswith("\n<<second>>")
    header = json.loads(steered.splitlines()[1])
    assert header["source"] == {"kind": "connector", "name": "control"}  # marked with its source
