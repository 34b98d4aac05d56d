"""Run an orchestrator of script agents until SIGTERM/SIGINT (for process-level tests).

Usage: python -m tests.support.orchestrator_script <state_root> <agent>... ; prints one JSON line
``{"orchestrator": pid, "children": [pids]}`` once every agent answered, then waits.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from goondan.runtime.agents import response_text
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner
from tests.support.ipc_agents import script_child_main


async def main(state_root: Path, agents: list[str]) -> int:
    spawner = ProcessSpawner(state_root, state_root=state_root, target=script_child_main)
    orch = Orchestrator(spawner, swarm_name="t", entry_agent=agents[0], agents=agents,
                        grace_period_ms=5000, reconcile_interval_s=1)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with orch:
        for agent in agents:
            assert response_text(await orch.request(agent, "echo:up", timeout_ms=20_000)) == "up"
        pids = [rec.handle.pid for rec in orch.records.values() if rec.handle is not None]
        print(json.dumps({"orchestrator": __import__("os").getpid(), "children": pids}), flush=True)
        await stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1]), sys.argv[2:])))
