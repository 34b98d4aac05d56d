"""Issue 31 item 3: every input the orchestrator queues is in the Swarm's durable inbox first.

``Orchestrator.request``/``submit`` (``goondan send``, ``run --input`` lines, the chat) and an
agent's request or send are appended to ``inputs/<swarm>/inbox.jsonl`` before they are queued;
a new orchestrator delivers again, in order, exactly the ones whose Turn did not start.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from goondan.runtime import inputs
from goondan.storage.jsonl import JsonlQueue, marker_name
from goondan.swarm.durable_inputs import SwarmInbox
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner
from goondan.types import AgentEvent
from goondan.workspace.claims import started_ids
from tests.support.ipc_agents import in_process_worker

AGENTS = ["a", "b"]


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(60):
            return await fn()

    return asyncio.run(main())


def orchestrator(record: list[str]) -> Orchestrator:
    return Orchestrator(
        InProcessSpawner(in_process_worker(AGENTS, record)),
        swarm_name="s",
        entry_agent="a",
        agents=AGENTS,
        reconcile_interval_s=0,
    )


def swarm_inbox(directory: Path) -> SwarmInbox:
    """The Swarm's inbox in the JSONL queue of ``directory`` (``inputs/<swarm>``)."""
    return SwarmInbox(JsonlQueue(directory, marker_name), "inputs/s")


def stored(directory: Path) -> list[tuple[str, str, str]]:
    lines = (directory / "inbox.jsonl").read_text().splitlines()
    return [(r["agent"], r["instanceKey"], r["event"]["input"]) for r in map(json.loads, lines)]


def test_requests_and_agent_to_agent_events_are_stored_before_they_run(tmp_path: Path) -> None:
    directory = tmp_path / "inputs"
    record: list[str] = []

    async def main() -> None:
        inbox = swarm_inbox(directory)
        orch = orchestrator(record)
        async with orch:
            assert await inbox.open(orch) == 0
            orch.store_input = inbox.record
            answer = await orch.request("a", "ask:b:echo:inner", instance_key="k")
            assert answer.input == "asked:inner"
            await orch.request("a", "send:b:echo:sent", instance_key="k")
            await orch.wait_until(lambda: len(record) == 4, 30)
        inbox.close()

    run(main)
    assert stored(directory) == [("a", "k", "ask:b:echo:inner"), ("b", "k", "echo:inner"),
                                 ("a", "k", "send:b:echo:sent"), ("b", "k", "echo:sent")]
    started = {p.name: len(started_ids(p)) for p in (directory / "started").iterdir()}
    assert started == {"a.k.jsonl": 2, "b.k.jsonl": 2}  # each Turn's start is final
    # the stream flag of a live request is not stored: nobody streams a redelivered input
    assert all(
        "__goondanStream" not in line
        for line in (directory / "inbox.jsonl").read_text().splitlines()
    )


def test_a_new_orchestrator_runs_exactly_the_inputs_that_had_not_started_in_order(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "inputs"
    first: list[str] = []

    async def accept_then_die() -> None:
        """The first orchestrator runs echo:0, then stores three more and dies before they start."""
        inbox = swarm_inbox(directory)
        orch = orchestrator(first)
        async with orch:
            await inbox.open(orch)
            orch.store_input = inbox.record
            await orch.request("a", "echo:0", instance_key="k")
        for i in (1, 2, 3):  # stored (acknowledged), never queued: the SIGKILL window
            inbox.record("a", AgentEvent(type="message", input=f"echo:{i}", instance_key="k"))
        with (directory / "inbox.jsonl").open("ab") as handle:
            handle.write(b'{"event": {"id": "torn"')  # a crash in the middle of an append
        inbox.close()

    second: list[str] = []

    async def restart() -> None:
        inbox = swarm_inbox(directory)
        orch = orchestrator(second)
        async with orch:
            assert await inbox.open(orch) == 3
            await orch.wait_until(lambda: len(second) == 3, 30)
        inbox.close()
        assert await asyncio.to_thread(lambda: swarm_inbox(directory).queue.open_entries()) == []

    run(accept_then_die)
    run(restart)
    assert first == ["a@k echo:0"]
    assert second == ["a@k echo:1", "a@k echo:2", "a@k echo:3"]


def test_a_stored_input_tags_its_turn_with_the_start_marker_id() -> None:
    """The Turn's user message is tied to its stored input by the start marker's id."""
    event = AgentEvent(type="message", input="x", start_marker={"path": "p", "id": "evt-1"})
    assert inputs.input_tag(event) == {"inputId": "evt-1"}


def test_storing_an_input_leaves_the_live_event_streamed(tmp_path: Path) -> None:
    """The stored copy drops the stream flag (nobody streams a redelivery); the event being
    queued keeps it, or the chat would show no streamed text (tests/e2e/test_run_pty.py)."""
    inbox = swarm_inbox(tmp_path / "inputs")
    inbox.queue.open_entries()
    event = AgentEvent(type="message", input="hi", instance_key="k", stream=True)
    inbox.record("a", event)
    inbox.close()
    assert event.stream is True and event.start_marker is not None
    (line,) = (tmp_path / "inputs" / "inbox.jsonl").read_text().splitlines()
    stored = json.loads(line)["event"]
    assert "stream" not in stored and stored.get("metadata", {}) == {}
