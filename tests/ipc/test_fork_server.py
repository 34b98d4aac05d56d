"""The fork server of process mode (goondan/swarm/forkserver.py, forktemplate.py).

An agent process forked from the template must behave like one started with ``spawn`` at that
moment: same environment, working directory, ``sys.path``, signal set-up and name, its own pipe
and nothing else of another instance, its exit code and signal seen by the orchestrator, and
the bundle as it is on disk now. The template's death is survived."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from goondan.ipc.protocol import IpcMessage, control_event, encode
from goondan.runtime.agents import response_text
from goondan.swarm import forktemplate
from goondan.swarm.forkserver import ForkServer
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import ProcessSpawner, SpawnRequest, WorkerExit
from tests.support.ipc_agents import AGENTS_ENV, script_child_main

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not forktemplate.fork_server_enabled({}), reason="needs Linux pidfd_open"),
]

PROBE_ENV = "GOONDAN_TEST_FORK_PROBE"
BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: m, options: {loop: true, script: [{text: TEXT}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec: {modelConfig: {modelRef: Model/m}, prompts: {systemPrompt: Answer.}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/worker, agents: [{ref: Agent/worker}]}
"""


def report_child(conn: Connection, argv: list[str]) -> None:
    """Child target: report what a child inherits, then wait until the parent closes the pipe."""
    import multiprocessing

    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    sigint = "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "handled"
    event = control_event(
        "probe", agent="probe", instance_key="k",
        pid=os.getpid(), ppid=os.getppid(), cwd=os.getcwd(), env=dict(os.environ),
        path=list(sys.path), argv=argv, sigint=sigint,
        blocked=sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set())),
        name=multiprocessing.current_process().name, random=random.getrandbits(64),
        sockets=sorted(link for link in fds.values() if link.startswith("socket:")),
    )
    conn.send_bytes(encode(IpcMessage.event("probe", "orchestrator", event)))
    with contextlib.suppress(EOFError, OSError):
        conn.recv_bytes()


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[1])


async def _probe(spawner: ProcessSpawner, key: str) -> tuple[Any, dict[str, Any]]:
    handle = await spawner.spawn(SpawnRequest("probe", key))
    message = await asyncio.wait_for(handle.transport.recv(), 60)
    assert message is not None
    return handle, dict(message.agent_event().metadata)


@pytest.fixture
def no_early_template() -> Iterator[None]:
    forktemplate.discard_early()
    yield
    forktemplate.discard_early()


def test_a_forked_child_inherits_what_a_spawned_child_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_early_template: None
) -> None:
    forked = ProcessSpawner(tmp_path, state_root=tmp_path / "s", target=report_child)
    spawned = ProcessSpawner(tmp_path, state_root=tmp_path / "s", target=report_child,
                             fork_server=False)
    assert spawned.fork_server is None and forked.fork_server is not None

    async def main() -> tuple[dict[str, Any], ...]:
        first, warm = await _probe(forked, "warm")  # the template exists from here on
        # set after the template started, like the variables `goondan run` loads from .env
        monkeypatch.setenv(PROBE_ENV, "late")
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "late")])
        handles = []
        reports = []
        for spawner, key in ((forked, "a"), (forked, "b"), (spawned, "c")):
            handle, report = await _probe(spawner, key)
            handles.append(handle)
            reports.append(report)
        for handle in [first, *handles]:
            await handle.transport.aclose()
        for handle in [first, *handles]:
            assert (await handle.wait()).ok
        return (warm, *reports)

    try:
        warm, a, b, c = asyncio.run(main())
    finally:
        forked.close()
    template = warm["ppid"]
    assert a["ppid"] == b["ppid"] == template != os.getpid() and c["ppid"] == os.getpid()
    # readline sets LINES/COLUMNS in the C environment only (not os.environ); spawn copies that
    for name in ("LINES", "COLUMNS"):
        if name not in a["env"]:
            c["env"].pop(name, None)
    for key in ("env", "cwd", "path", "sigint", "blocked"):
        assert a[key] == c[key], key
    assert a["env"][PROBE_ENV] == "late" and a["cwd"] == str(tmp_path)
    assert a["argv"][a["argv"].index("--instance-key") + 1] == "a"
    assert a["name"] == "goondan-agent:probe.a" and c["name"] == "goondan-agent:probe.c"
    assert a["random"] != b["random"]  # re-seeded per fork
    # Each holds its own pipe and nothing else: not the template's socket, not the other's pipe.
    assert len(a["sockets"]) == len(b["sockets"]) == len(c["sockets"]) == 1
    assert a["sockets"] != b["sockets"]


def _write_bundle(root: Path, text: str) -> Path:
    root.mkdir(exist_ok=True)
    (root / "goondan.yaml").write_text(BUNDLE.replace("TEXT", text))
    return root


def test_forked_agents_answer_and_a_new_instance_sees_the_edited_bundle(
    tmp_path: Path, no_early_template: None
) -> None:
    bundle = _write_bundle(tmp_path / "b", "first")
    spawner = ProcessSpawner(bundle, state_root=tmp_path / "s", swarm="default")
    template_pids = []

    async def main() -> list[str]:
        orch = Orchestrator(spawner, swarm_name="default", entry_agent="worker",
                            agents=["worker"], project_root=bundle, reconcile_interval_s=0)
        answers = []
        async with orch:
            for key, edit in (("k1", None), ("k2", None), ("k3", "edited")):
                if edit is not None:
                    time.sleep(0.01)  # a new mtime even on coarse clocks
                    _write_bundle(bundle, edit)
                answer = await orch.request("worker", "hi", instance_key=key, timeout_ms=60_000)
                answers.append(response_text(answer))
                handle = orch.records[("worker", key)].handle
                assert handle is not None and handle.pid is not None
                template_pids.append(_ppid(handle.pid))
        return answers

    try:
        answers = asyncio.run(main())
    finally:
        spawner.close()
    assert answers == ["first", "first", "edited"]
    assert len(set(template_pids)) == 1 and template_pids[0] != os.getpid()


def test_sigkill_of_a_forked_agent_is_a_crash_by_signal_9_and_it_is_respawned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_early_template: None
) -> None:
    monkeypatch.setenv(AGENTS_ENV, "a")
    spawner = ProcessSpawner(tmp_path, state_root=tmp_path, target=script_child_main)

    async def main() -> None:
        orch = Orchestrator(spawner, swarm_name="t", entry_agent="a", agents=["a"],
                            grace_period_ms=5000, reconcile_interval_s=0)
        async with orch:
            answer = await orch.request("a", "echo:up", timeout_ms=30_000)
            assert response_text(answer) == "up"
            rec = orch.records[("a", "default")]
            victim = rec.handle
            assert victim is not None and victim.pid is not None
            assert _ppid(victim.pid) == spawner.fork_server.template_pid  # type: ignore[union-attr]
            os.kill(victim.pid, signal.SIGKILL)
            assert await asyncio.wait_for(victim.wait(), 30) == WorkerExit(
                "signalled", None, int(signal.SIGKILL)
            )
            answer = await orch.request("a", "echo:again", timeout_ms=30_000)
            assert response_text(answer) == "again"
            assert rec.spawn_count == 2 and rec.handle is not victim
            assert rec.last_exit_code == -signal.SIGKILL  # a crash by signal 9

    try:
        asyncio.run(asyncio.wait_for(main(), 90))
    finally:
        spawner.close()


def test_the_template_dying_is_survived(tmp_path: Path, no_early_template: None) -> None:
    spawner = ProcessSpawner(tmp_path, state_root=tmp_path / "s", target=report_child)
    server = spawner.fork_server
    assert isinstance(server, ForkServer)

    async def main() -> WorkerExit:
        first, before = await _probe(spawner, "a")
        template = server.template_pid
        assert template is not None and before["ppid"] == template
        os.kill(template, signal.SIGKILL)
        second, after = await _probe(spawner, "b")  # a new template forks it
        assert after["ppid"] == server.template_pid and server.template_pid != template
        first.kill()  # the orphan's end is still seen (through its pidfd)
        ended = await asyncio.wait_for(first.wait(), 30)
        await second.transport.aclose()
        assert (await asyncio.wait_for(second.wait(), 30)).ok
        return ended

    try:
        ended = asyncio.run(main())
    finally:
        spawner.close()
    assert ended.reason == "killed" and not server.broken


def test_fork_server_switch_and_fallback_to_spawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_early_template: None
) -> None:
    monkeypatch.setenv(forktemplate.FORK_SERVER_ENV, "0")
    assert ProcessSpawner(tmp_path, state_root=tmp_path).fork_server is None
    monkeypatch.delenv(forktemplate.FORK_SERVER_ENV)
    spawner = ProcessSpawner(tmp_path, state_root=tmp_path / "s", target=report_child)

    def cannot_start() -> Any:
        raise OSError("no template today")

    monkeypatch.setattr("goondan.swarm.forkserver.start_template", cannot_start)

    async def main() -> dict[str, Any]:
        handle, report = await _probe(spawner, "a")
        await handle.transport.aclose()
        assert (await handle.wait()).ok
        return report

    report = asyncio.run(main())
    assert report["ppid"] == os.getpid()  # spawned
    assert spawner.fork_server is not None and spawner.fork_server.broken


def test_the_template_started_early_is_the_one_that_forks(
    tmp_path: Path, no_early_template: None
) -> None:
    forktemplate.start_early()  # what `goondan run` does before it loads the bundle
    early = forktemplate._early
    assert early is not None
    spawner = ProcessSpawner(tmp_path, state_root=tmp_path / "s", target=report_child)

    async def main() -> dict[str, Any]:
        handle, report = await _probe(spawner, "a")
        await handle.transport.aclose()
        assert (await handle.wait()).ok
        return report

    try:
        report = asyncio.run(main())
    finally:
        spawner.close()
    assert report["ppid"] == early[0].pid and forktemplate._early is None
