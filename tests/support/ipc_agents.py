"""Cheap agents for orchestrator tests: the event input is a small command, no model involved.

Commands (``event.input``):

* ``echo:<text>``            → answers ``<text>``
* ``ask:<agent>:<text>``     → ``ctx.agents.request(agent, text)``; answers ``asked:<answer>``
                               or ``error:<code>:<message>``
* ``send:<agent>:<text>``    → ``send``; answers ``sent``
* ``sleep:<ms>:<text>``      → waits, then answers ``<text>``
* ``block:<path>:<text>``    → writes ``<path>.started``, waits until ``<path>`` exists, answers
* ``job:<path>``             → starts ``sleep 7799`` the way a tool starts a child (own process
                               group, the owner markers of goondan.tools.processes), writes its
                               pid to ``<path>``, answers ``job``
* ``fail``                   → raises (a failed Turn, the process stays up)
* ``exit:<code>``            → ``os._exit(code)`` (process mode only: a crash)

Every processed event is recorded as ``"<agent>@<key> <input>"``: in memory (in-process mode)
and, when ``GOONDAN_TEST_RECORD_DIR`` is set, appended to ``<dir>/<agent>.<key>.log``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message
from goondan.errors import AgentError
from goondan.ipc.channel import Transport
from goondan.ipc.logs import process_name
from goondan.pipeline.context import TurnResult
from goondan.runtime.agents import AgentsFactory, SwarmCatalog
from goondan.swarm.agent_process import AgentWorker, run_child
from goondan.swarm.spawner import SpawnRequest
from goondan.types import AgentEvent, new_id

RECORD_DIR_ENV = "GOONDAN_TEST_RECORD_DIR"
AGENTS_ENV = "GOONDAN_TEST_AGENTS"


class ScriptHandler:
    """A TurnHandler driven by the command in each event's input."""

    def __init__(
        self, agent: str, key: str, agents: AgentsFactory, record: list[str] | None = None
    ) -> None:
        self.agent, self.key, self.agents, self.record = agent, key, agents, record
        directory = os.environ.get(RECORD_DIR_ENV)
        self.record_file = (
            Path(directory) / f"{process_name(agent, key)}.log" if directory else None
        )
        self.closed = False
        if directory and record is None:  # a real process: its pid, for the agent SIGKILL trials
            (Path(directory) / f"{process_name(agent, key)}.pid").write_text(str(os.getpid()))

    def input_written(self, event: AgentEvent) -> bool:
        """Whether this event's record line was written (by this or an earlier process): the
        claim check of :class:`AgentWorker`, as ``AgentInstance`` checks its conversation."""
        if self.record_file is None or not self.record_file.exists():
            return False
        line = f"{self.agent}@{self.key} {event.input or ''}"
        return line in self.record_file.read_text(encoding="utf-8").splitlines()

    async def run(self, event: AgentEvent) -> TurnResult:
        text = event.input or ""
        line = f"{self.agent}@{self.key} {text}"
        if self.record is not None:
            self.record.append(line)
        if self.record_file is not None:
            with self.record_file.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        answer = await self._answer(event, text)
        result = TurnResult(
            new_id("turn"), "text_response", response_message=Message.assistant(answer)
        )
        if text.startswith("restart:"):  # what a turn that called base `self-restart` returns
            result.metadata.update(
                {"restartRequested": True, "restartReason": text[len("restart:") :]}
            )
        return result

    async def _answer(self, event: AgentEvent, text: str) -> str:
        command, _, rest = text.partition(":")
        api = self.agents(
            event, turn_id=new_id("turn"), trace_id=event.trace_id or "0" * 32, span_id="1" * 16
        )
        if command == "echo":
            return rest
        if command in ("ask", "send"):
            target, _, body = rest.partition(":")
            try:
                if command == "send":
                    await api.send(target, body)
                    return "sent"
                result = await api.request(target, body, timeout_ms=30_000)
                return f"asked:{result['response']}"
            except AgentError as err:
                return f"error:{err.code}:{err.message}"
        if command == "sleep":
            ms, _, body = rest.partition(":")
            await asyncio.sleep(int(ms) / 1000)
            return body
        if command == "block":
            path, _, body = rest.partition(":")
            Path(path + ".started").write_text("1")
            while not Path(path).exists():
                await asyncio.sleep(0.01)
            return body
        if command == "job":
            from goondan.tools.processes import owner_env

            job = subprocess.Popen(
                ["sleep", "7799"],
                start_new_session=True,
                env={**os.environ, **owner_env()},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            Path(rest).write_text(str(job.pid))
            return "job"
        if command == "fail":
            raise RuntimeError("scripted failure")
        if command == "exit":
            os._exit(int(rest or 1))
        return text

    async def close(self) -> None:
        self.closed = True


def catalog_of(agents: list[str], entry: str | None = None) -> SwarmCatalog:
    return SwarmCatalog("test", entry or agents[0], tuple(agents))


def in_process_worker(
    agents: list[str], record: list[str] | None = None, *, max_depth: int = 8
) -> Any:
    """A WorkerFactory for :class:`InProcessSpawner` running :class:`ScriptHandler`s."""
    catalog = catalog_of(agents)

    async def worker(request: SpawnRequest, transport: Transport) -> int:
        w = AgentWorker(transport, agent_name=request.agent_name, instance_key=request.instance_key)
        factory = AgentsFactory(
            w.router, catalog, agent_name=request.agent_name, instance_key=request.instance_key,
            max_depth=max_depth,
        )
        return await w.serve(
            ScriptHandler(request.agent_name, request.instance_key, factory, record)
        )

    return worker


async def _build(args: argparse.Namespace, worker: AgentWorker) -> ScriptHandler:
    agents = os.environ.get(AGENTS_ENV, args.agent_name).split(",")
    factory = AgentsFactory(worker.router, catalog_of(agents), agent_name=args.agent_name,
                            instance_key=args.instance_key)
    return ScriptHandler(args.agent_name, args.instance_key, factory)


def script_child_main(conn: Connection, argv: list[str]) -> None:
    """Child target for :class:`ProcessSpawner` running a :class:`ScriptHandler`."""
    run_child(conn, argv, _build)
