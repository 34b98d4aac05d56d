"""The in-process agent router: every (agent, instanceKey) of a swarm in this process.

:class:`InProcessAgentRouter` is the :class:`~goondan.runtime.agents.AgentRouter` of the
embedding API and ``goondan repl`` (docs/embedding.md): it opens instances on demand and runs
requests and sends as turns of those instances, with the call rules of
``goondan/runtime/agents.py`` already applied by :class:`~goondan.runtime.agents.AgentCallApi`.
Agent processes use ``IpcAgentRouter`` (``goondan/swarm/agent_process.py``) instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from goondan.pipeline.context import TurnResult
from goondan.runtime.agents import (
    DEFAULT_MAX_DEPTH,
    AgentsFactory,
    SwarmCatalog,
    response_event,
    turn_error,
)
from goondan.types import AgentEvent, JsonObject, now_iso

__all__ = ["InProcessAgentRouter", "InstanceFactory", "OnOutgoing"]

OnOutgoing = Callable[[AgentEvent], Awaitable[None]]
# (agent, key, *, agents_factory, on_outgoing, workdir) -> TurnHandler
InstanceFactory = Callable[..., Any]


@dataclass
class _Spawned:
    target: str
    instance_key: str
    owner: tuple[str, str]
    created_at: str
    cwd: str | None

    def to_dict(self) -> JsonObject:
        return {
            "target": self.target, "instanceKey": self.instance_key, "ownerAgent": self.owner[0],
            "ownerInstanceKey": self.owner[1], "createdAt": self.created_at, "cwd": self.cwd,
        }


@dataclass
class InProcessAgentRouter:
    """Runs every (agent, instanceKey) of a swarm in this process; creates instances on demand.

    ``create_instance(agent, key, *, agents_factory, on_outgoing, workdir)`` returns an object
    with ``async run(event) -> TurnResult`` (normally an ``AgentInstance``; may be a coroutine
    function). Answers are taken from ``on_outgoing`` when the instance sends them, else from the
    TurnResult.
    """

    catalog: SwarmCatalog
    create_instance: InstanceFactory
    max_depth: int = DEFAULT_MAX_DEPTH
    # agent name → its spec.requestTimeoutMs (None: the 15 s default)
    request_timeout_for: Callable[[str], int | None] | None = None
    # admit(caller, target, event): raises to refuse an agent event (trace budgets).
    admit: Callable[[str, str, AgentEvent], None] | None = None
    instances: dict[tuple[str, str], Any] = field(default_factory=dict)
    _pending: dict[str, asyncio.Future[AgentEvent]] = field(default_factory=dict)
    _spawned: dict[tuple[str, str], _Spawned] = field(default_factory=dict)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _creating: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)

    async def instance(self, agent: str, key: str, *, workdir: str | None = None) -> Any:
        """The instance for (agent, key), created on first use."""
        ident = (agent, key)
        lock = self._creating.setdefault(ident, asyncio.Lock())
        async with lock:
            if ident not in self.instances:
                spawned = self._spawned.get(ident)
                created = self.create_instance(
                    agent,
                    key,
                    agents_factory=AgentsFactory(
                        self,
                        self.catalog,
                        agent_name=agent,
                        instance_key=key,
                        max_depth=self.max_depth,
                        request_timeout_ms=self.request_timeout_for(agent)
                        if self.request_timeout_for
                        else None,
                    ),
                    on_outgoing=self._on_outgoing,
                    workdir=workdir or (spawned.cwd if spawned else None),
                )
                if inspect.isawaitable(created):
                    created = await created
                self.instances[ident] = created
        return self.instances[ident]

    async def _on_outgoing(self, event: AgentEvent) -> None:
        correlation = event.metadata.get("inReplyTo")
        future = self._pending.get(str(correlation)) if correlation is not None else None
        if future is not None and not future.done():
            future.set_result(event)

    async def request(self, target: str, event: AgentEvent, *, timeout_ms: int) -> AgentEvent:
        """Run ``event`` on the target instance (its own FIFO) and wait for the answer."""
        assert event.reply_to is not None and event.instance_key is not None
        self._admit(target, event)
        correlation = event.reply_to.correlation_id
        instance = await self.instance(target, event.instance_key)  # may fail: nothing to undo
        future: asyncio.Future[AgentEvent] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = future
        task = asyncio.ensure_future(self._run(instance, event, target))
        try:
            # shield: a caller's timeout must not cancel the callee's turn (reference behaviour)
            return await asyncio.shield(future)
        finally:
            self._pending.pop(correlation, None)
            self._keep(task)

    async def _run(self, instance: Any, event: AgentEvent, target: str) -> None:
        assert event.reply_to is not None
        correlation = event.reply_to.correlation_id
        try:
            result: TurnResult = await instance.run(event)
            answer = response_event(
                event, agent_name=target, instance_key=event.instance_key or "",
                text=result.text, error=turn_error(result),
            )
        except Exception as exc:
            answer = response_event(
                event, agent_name=target, instance_key=event.instance_key or "", text=None,
                error={"code": getattr(exc, "code", "E_AGENT_TURN_FAILED"), "message": str(exc)},
            )
        future = self._pending.get(correlation)
        if future is not None and not future.done():
            future.set_result(answer)

    async def send(self, target: str, event: AgentEvent) -> None:
        """Queue ``event`` on the target instance and return at once."""
        assert event.instance_key is not None
        self._admit(target, event)
        instance = await self.instance(target, event.instance_key)
        self._keep(asyncio.ensure_future(self._run_quietly(instance, event)))

    def _admit(self, target: str, event: AgentEvent) -> None:
        if self.admit is not None:
            self.admit(str(event.metadata.get("callerAgent") or ""), target, event)

    @staticmethod
    async def _run_quietly(instance: Any, event: AgentEvent) -> None:
        # send: callee failures are only logged (by the callee)
        with contextlib.suppress(Exception):
            await instance.run(event)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def spawn(
        self, owner: tuple[str, str], target: str, *, instance_key: str, cwd: str | None
    ) -> JsonObject:
        """Record and create the instance; ``spawned`` is False if it already existed."""
        ident = (target, instance_key)
        existed = ident in self.instances or ident in self._spawned
        if ident not in self._spawned:
            self._spawned[ident] = _Spawned(target, instance_key, owner, now_iso(), cwd)
        await self.instance(target, instance_key, workdir=cwd)
        return {"target": target, "instanceKey": instance_key, "spawned": not existed, "cwd": cwd}

    async def list_instances(
        self, owner: tuple[str, str], *, include_all: bool
    ) -> list[JsonObject]:
        """Spawned instances, oldest first."""
        rows = [s for s in self._spawned.values() if include_all or s.owner == owner]
        return [s.to_dict() for s in sorted(rows, key=lambda s: s.created_at)]

    async def deliver(self, owner: tuple[str, str], event: AgentEvent) -> None:
        """Run ``event`` as a new Turn of instance ``owner`` (the answer of an async request)."""
        instance = await self.instance(*owner)
        self._keep(asyncio.ensure_future(self._run_quietly(instance, event)))

    async def drain_tasks(self) -> None:
        """Wait for fire-and-forget turns (``send``) and abandoned requests still running."""
        while self._tasks:  # a finishing turn may start more (send → send)
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Wait for fire-and-forget turns still running, then close every instance."""
        await self.drain_tasks()
        for instance in self.instances.values():
            close = getattr(instance, "close", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result
        self.instances.clear()
