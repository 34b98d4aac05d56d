"""One phase of an approvals crash trial (tests/runtime/test_approvals_crash.py), in its own
process so the test can SIGKILL it anywhere.

    python -m tests.support.approval_crash_child BUNDLE STATE_ROOT PHASE

``park``: send the message (the model calls three tools in one step: two ``notes/`` writes
that run at once and one delete that needs approval) — the turn parks; ``decide``: resume
what was cut short, approve what is pending and let the turn finish; ``finish``: the same, run
to the final answer without a kill (sending the message again if it was never accepted).
Each phase prints ``ready`` once the runtime is open and ``done`` at its end.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from goondan.llm.base import ModelRequest
from goondan.llm.testing import FunctionModel
from goondan.runtime import Runtime

FINAL = "all done"


def reply(request: ModelRequest) -> Any:
    if any(m.get("role") == "tool" for m in request.messages):
        return FINAL
    return {"toolCalls": [
        {"name": "files__write", "args": {"path": "notes/a.txt", "text": "a"}},
        {"name": "files__delete", "args": {"path": "old.txt"}},
        {"name": "files__write", "args": {"path": "notes/b.txt", "text": "b"}},
    ]}


async def main(bundle: Path, state_root: Path, phase: str) -> None:
    model = FunctionModel(reply)
    async with Runtime.from_bundle(bundle, state_root=state_root, models={"assistant": model},
                                   stream=False) as rt:
        print("ready", flush=True)
        if phase == "park":
            await rt.run_turn(None, "tidy up", instance_key="k")
        else:
            instance = await rt.instance(None, "k")
            await instance.resume()  # a turn cut short by the kill goes on (it may park)
            if phase == "finish" and not instance.messages:
                # killed before the message was accepted at all: the sender sends it again
                await rt.run_turn(None, "tidy up", instance_key="k")
            while pending := rt.approvals.list():
                await rt.approvals.approve(pending[0].id)
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
