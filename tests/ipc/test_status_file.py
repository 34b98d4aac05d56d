"""The supervisor's status file (``processes.json``) under concurrent writers.

At shutdown ``_close_tasks`` cancels the status loop and writes the file a last time; cancelling
the loop does not stop a write already running in a worker thread, so two writes could overlap.
Both used the same temporary name: one renamed it away and the other's ``os.replace`` failed
with ``FileNotFoundError``, which ended ``goondan run`` with ``E_INTERNAL`` (seen under
``scripts/bench_cold.py --instructions``, where everything runs ten times slower).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from goondan.swarm.supervisor import ProcessSupervisor


class _Supervisor(ProcessSupervisor):
    async def _on_message(self, rec: Any, handle: Any, message: Any) -> None: ...

    def _release_in_flight(self, rec: Any, ended: Any) -> None: ...

    def _fail_request(self, request: Any, callee: Any, code: str, message: str) -> None: ...

    def _unsendable(self, rec: Any, message: Any, exc: Exception) -> None: ...


def test_overlapping_status_writes_neither_fail_nor_leave_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "status" / "swarm.json"
    supervisor = _Supervisor(object(), swarm_name="s", agents=["a"], status_path=path)  # type: ignore[arg-type]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer() -> None:
        start.wait()
        try:
            for _ in range(300):
                supervisor._write_status()
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert json.loads(path.read_text(encoding="utf-8"))["orchestrator"]["swarm"] == "s"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
