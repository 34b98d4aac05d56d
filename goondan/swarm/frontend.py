"""Front-ends of a running :class:`~goondan.swarm.service.SwarmService`.

* :class:`ServiceThread` runs the service's event loop in a background thread, so the
  orchestrator keeps supervising (pumps, crash detection, reconciliation, the control socket)
  while the main thread blocks on the terminal. That thread blocks SIGINT and SIGTERM (and so
  do the worker threads it starts, which inherit its mask): the kernel then always delivers
  Ctrl-C to the main thread, whose blocking ``input()`` is interrupted at once — delivered to
  another thread, the signal would only be handled after the next Enter. Agent processes
  started from those threads reset the mask first thing (:mod:`goondan.swarm.spawner`).
* :class:`OrchestratorBackend` is the console's ``ReplBackend`` over the orchestrator: each
  line becomes an event for the entry agent (conversation ``cli``), answered through IPC. The
  REPL's renderer and slash commands are reused unchanged. The request asks the agent process
  to stream the Turn (``runtime.delta`` reports): text deltas and tool calls are handed to the
  subscribers on the caller's event loop, in order, before the answer. Cancelling
  :meth:`OrchestratorBackend.run_turn` (Ctrl-C) cancels the agent's Turn through
  ``runtime.cancel`` and returns once the agent reported it finished (repaired and folded).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from goondan.conversation.messages import Message
from goondan.pipeline.context import TurnResult
from goondan.swarm.service import SwarmService
from goondan.types import AgentEvent, JsonObject, TokenUsage, ToolCatalogItem, new_id

__all__ = [
    "BLOCKED_SIGNALS",
    "CANCEL_WAIT_S",
    "EntryAgentView",
    "OrchestratorBackend",
    "ServiceThread",
    "turn_result_of",
]

# Signals only the main thread may take (handled there: Ctrl-C, SIGTERM → KeyboardInterrupt).
BLOCKED_SIGNALS: frozenset[signal.Signals] = frozenset({signal.SIGINT, signal.SIGTERM})
# How long Ctrl-C waits for the agent to confirm the cancelled Turn before the prompt returns.
CANCEL_WAIT_S = 10.0

T = TypeVar("T")


def turn_result_of(answer: AgentEvent) -> TurnResult:
    """A TurnResult for the console from an answer event (``metadata.error`` → failed)."""
    meta = answer.metadata
    error = meta.get("error") if isinstance(meta.get("error"), dict) else None
    finish: Literal["text_response", "max_steps", "error"] = "error" if error else "text_response"
    if meta.get("finishReason") == "max_steps" and error is None:
        finish = "max_steps"
    text = answer.input or ""
    return TurnResult(
        turn_id=str(meta.get("turnId") or new_id("turn")),
        finish_reason=finish,
        response_message=Message.assistant(text) if text and error is None else None,
        error=error,
    )


class ServiceThread:
    """Runs ``service`` (started) on an event loop in a daemon thread."""

    def __init__(self, service: SwarmService) -> None:
        self.service = service
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="goondan-orchestrator", daemon=True)
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()

    def __repr__(self) -> str:
        return f"<ServiceThread {self.service!r} alive={self._thread.is_alive()}>"

    def _run(self) -> None:
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_SIGNALS)
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            await self.service.start()

        try:
            self.loop.run_until_complete(start())
        except BaseException as exc:
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        self.loop.run_forever()

    def start(self) -> None:
        """Start the thread and wait until the service is up (re-raises start errors)."""
        self._thread.start()
        self._ready.result()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the service loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the service loop and wait for its result."""
        return self.submit(coro).result()

    def stop(self) -> None:
        """Graceful service stop, then end the loop and the thread."""
        if not self._thread.is_alive():
            return
        try:
            self.call(self.service.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)


class EntryAgentView:
    """What both ``ReplBackend`` front-ends (:class:`OrchestratorBackend` here,
    :class:`~goondan.swarm.attach.AttachedBackend` over a control socket) share: the subscribers
    of the streamed runtime events, and the entry agent's state asked of its process through
    :meth:`_query` (a :mod:`goondan.ipc.queries` query; None when the process is not running)."""

    agent_name: str
    instance_key: str
    turns: int

    def __init__(self) -> None:
        self.turns = 0
        self._last_usage = TokenUsage()
        self._listeners: list[Callable[[JsonObject], Any]] = []

    def _query(self, what: str) -> JsonObject | None:
        raise NotImplementedError

    def subscribe(self, listener: Callable[[JsonObject], Any]) -> Callable[[], None]:
        """Receive the streamed runtime events of the following turns; returns unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _state(self) -> JsonObject | None:
        state = self._query("state")
        if state is not None and isinstance(state.get("usage"), dict):
            self._last_usage = TokenUsage(**state["usage"])  # kept after the process stops
        return state

    def tools(self) -> list[ToolCatalogItem]:
        """The entry agent's tool catalog (its process is started if needed)."""
        state = self._state()
        if state is None:
            return []
        return [ToolCatalogItem.coerce(item) for item in state.get("tools") or []]

    def mcp_servers(self) -> list[dict[str, Any]]:
        """The entry agent's MCP servers and their states (``/tools``, docs/mcp.md)."""
        state = self._state()
        servers = state.get("mcp") if state is not None else None
        return [s for s in servers if isinstance(s, dict)] if isinstance(servers, list) else []

    def usage(self) -> tuple[int, TokenUsage]:
        """Turns of this chat and the entry agent's token usage (as its process counted it)."""
        self._state()
        return self.turns, self._last_usage


class OrchestratorBackend(EntryAgentView):
    """``ReplBackend`` over the orchestrator (entry agent, conversation ``instance_key``)."""

    def __init__(
        self, runner: ServiceThread, *, instance_key: str = "cli", source_name: str = "cli"
    ) -> None:
        super().__init__()
        self.runner = runner
        self.agent_name = runner.service.swarm.entry_agent
        self.instance_key = instance_key
        self.source_name = source_name
        # With a ``cli`` Connection, lines are accepted and routed by it (docs/connectors.md).
        self.connection = runner.service.connections.cli

    async def _route(self, text: str) -> tuple[str, AgentEvent] | None:
        """``(agent, event)`` for a line: through the ``cli`` Connection, else the entry agent."""
        if self.connection is None:
            return self.agent_name, AgentEvent(
                type="message", input=text, instance_key=self.instance_key,
                source={"kind": "connector", "name": self.source_name},
            )
        connections = self.runner.service.connections

        async def accept() -> tuple[str, AgentEvent] | None:
            return await connections.cli_event(text)  # on the service loop: one writer per inbox

        return await asyncio.wrap_future(self.runner.submit(accept()))

    async def skip_line(self, text: str) -> None:
        """A line sent nowhere (blank): still counted by the ``cli`` Connection's line index."""
        if self.connection is not None:
            await self._route(text)

    async def run_turn(self, text: str) -> TurnResult:
        """Send ``text`` to the entry agent (or where the ``cli`` Connection routes it) and wait
        for its answer (cancellable); the Turn's runtime events reach :meth:`subscribe`
        listeners as they happen."""
        routed = await self._route(text)
        if routed is None:
            return TurnResult(turn_id=new_id("turn"), finish_reason="text_response")
        agent, event = routed
        instance_key = event.instance_key or self.instance_key
        orchestrator = self.runner.service.orchestrator
        loop = asyncio.get_running_loop()
        live = [True]  # events of a cancelled turn still queued on this loop are dropped

        def on_event(payload: JsonObject) -> None:
            # Called on the service thread; call_soon_threadsafe keeps the order, and the
            # answer (wrap_future) is scheduled the same way after the last event.
            loop.call_soon_threadsafe(self._dispatch, live, payload)

        future = self.runner.submit(orchestrator.request(
            agent, event, instance_key=instance_key,
            on_event=on_event if self._listeners else None,
        ))
        try:
            answer = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            live[0] = False
            # Cancelling the request cancels the Turn; wait until the agent has repaired and
            # folded it, so the prompt comes back on a consistent conversation (a second
            # Ctrl-C during this wait leaves at once: asyncio.Runner raises KeyboardInterrupt).
            with contextlib.suppress(Exception):
                await asyncio.wrap_future(self.runner.submit(orchestrator.cancel(
                    agent, event.id, instance_key=instance_key, timeout_s=CANCEL_WAIT_S,
                )))
            raise
        finally:
            live[0] = False
        self.turns += 1
        return turn_result_of(answer)

    def _dispatch(self, live: list[bool], payload: JsonObject) -> None:
        if not live[0]:
            return
        for listener in tuple(self._listeners):
            listener(payload)

    # -- the entry agent's state, asked of its process (goondan.ipc.queries) -----------------------
    def _query(self, what: str) -> JsonObject | None:
        """Run a ``runtime.inspect`` query on the service loop (None: the process is not
        running)."""
        from goondan.ipc.queries import QUERY_TIMEOUT_S, inspect_agent

        orchestrator = self.runner.service.orchestrator
        future = self.runner.submit(
            inspect_agent(orchestrator, self.agent_name, self.instance_key, what)
        )
        return future.result(timeout=QUERY_TIMEOUT_S + 5)

    def messages(self) -> list[Message]:
        """The entry agent's conversation: from its process, else as stored on disk."""
        state = self._state()
        if state is not None:
            return [Message.from_dict(m) for m in state.get("messages") or []]
        return self._stored_messages()

    def _stored_messages(self) -> list[Message]:
        from goondan.workspace.catalog import find_instances, iter_messages
        from goondan.workspace.paths import workspace_id_for

        service = self.runner.service
        workspace = workspace_id_for(service.bundle.root, service.bundle.package_name)
        found = find_instances(service.state_root, self.instance_key, agent=self.agent_name,
                               workspace_id=workspace)
        return [message for _, message in iter_messages(found[0].paths)] if found else []

    def describe(self) -> dict[str, str]:
        service = self.runner.service
        rec = service.orchestrator.records.get((self.agent_name, self.instance_key))
        out = {
            "agent": self.agent_name, "instance": self.instance_key, "swarm": service.swarm.name,
            "orchestrator": service.instance_key, "logs": str(service.log_dir),
        }
        if rec is not None and rec.handle is not None:
            out["pid"] = str(rec.handle.pid)
            out["status"] = rec.status
            state = self._state()
            if state is not None:
                describe = state.get("describe") or {}
                out.update({k: str(v) for k, v in describe.items() if k != "status"})
        return out

    def cost(self) -> float | None:
        """US dollars of the entry agent's instance since ``goondan run`` started (the
        orchestrator's ledger; ``None`` without the Model's ``spec.pricing``)."""
        ledger = getattr(self.runner.service, "ledger", None)
        if ledger is None:
            return None
        cost: float | None = ledger.instance(self.agent_name, self.instance_key)[2]
        return cost

    async def clear(self) -> None:
        """``/clear``: restart the entry agent with ``--fresh`` semantics."""
        await asyncio.wrap_future(
            self.runner.submit(self.runner.service.restart(self.agent_name, fresh=True))
        )

    async def fold(self) -> int:
        """``/fold``: the entry agent folds its pending events (0 when it is not running)."""
        from goondan.ipc.queries import inspect_agent

        orchestrator = self.runner.service.orchestrator
        result = await asyncio.wrap_future(self.runner.submit(
            inspect_agent(orchestrator, self.agent_name, self.instance_key, "fold")))
        if result is None:
            return len(self._stored_messages())
        return int(result.get("messages") or 0)
