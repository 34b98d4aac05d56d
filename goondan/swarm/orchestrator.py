"""The orchestrator: one supervised process per (agent, instanceKey), and the event broker.

Responsibilities (docs/orchestrator.md):

* **Routing.** Every event (:meth:`Orchestrator.submit`/:meth:`request`, or an agent's ``event``
  IPC message) is stored durably (``store_input``: :mod:`goondan.swarm.durable_inputs`), queued on
  the target (agent, instanceKey) — spawned on demand — and dispatched **one at a time**, the
  next after ``runtime.turnFinished``: per-instance order is the order of arrival, and a crash
  of any process loses no input.
* **Requests.** An event with ``replyTo`` is remembered by correlation id (one
  :class:`~goondan.ipc.matcher.RequestMatcher`); the callee's answer
  (``metadata.inReplyTo``) is forwarded to the process that asked (or resolves a local future
  for :meth:`request`). If the callee dies during that Turn, the respawned process resumes it
  and the caller gets its answer (:mod:`goondan.swarm.resumes`).
* **Supervision** (the base class :class:`~goondan.swarm.supervisor.ProcessSupervisor`): a
  non-zero exit is a crash: ``consecutiveCrashes += 1``; the first ``crash_threshold`` (5)
  respawn at once, then ``min(1 s · 2^(n-6), 300 s)`` in status ``crashLoopBackOff``; a finished
  Turn resets the count. A reconciliation loop (default every 5 s) respawns what is due and
  stops processes whose agent left the configuration.
* **Graceful stop.** ``shutdown {gracePeriodMs, reason}`` → the process drains (finishes and folds
  its running Turn) → ``shutdown_ack`` → exit 0; SIGKILL after the grace period. Restart (per
  agent, optionally ``fresh``) is a graceful stop followed by a respawn with history kept.
* **Cancellation.** :meth:`Orchestrator.cancel` (and cancelling the task of
  :meth:`Orchestrator.request`) drops a queued event or sends ``runtime.cancel {eventId}`` to the
  process running it; the agent aborts that Turn (repaired and folded) and reports
  ``turnFinished``, so the events behind it go on. The requests that Turn made to other agents
  and that are still unanswered are cancelled the same way, recursively (their callers, being
  cancelled themselves, drop the ``E_TURN_CANCELLED`` answers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from goondan.errors import AgentError, IpcError
from goondan.ipc.control import (
    Answer,
    Cancel,
    Delta,
    ListQuery,
    Ready,
    ShutdownAck,
    SpawnQuery,
    StartError,
    TurnFinished,
    TurnStarted,
    decode_control,
    decode_shutdown,
)
from goondan.ipc.matcher import RequestMatcher, new_correlation_id
from goondan.ipc.protocol import (
    ORCHESTRATOR,
    STREAMED_EVENT_TYPES,
    IpcMessage,
    ShutdownReason,
)
from goondan.runtime.events import RuntimeEvent, event_from_dict
from goondan.runtime.observe import EventSink
from goondan.swarm.resumes import settle_on_ready
from goondan.swarm.spawner import AgentHandle, Spawner, WorkerExit
from goondan.swarm.state import pid_stopped
from goondan.swarm.supervision import (
    InstanceRecord,
    ProcessStatus,
    ReconcilePlan,
    backoff_ms,
    plan_reconcile,
)
from goondan.swarm.supervisor import ProcessSupervisor
from goondan.types import AgentEvent, JsonObject, ReplyChannel, new_trace_id

__all__ = [
    "InstanceRecord",
    "Orchestrator",
    "ProcessStatus",
    "ReconcilePlan",
    "backoff_ms",
    "plan_reconcile",
]

_log = logging.getLogger("goondan.swarm.orchestrator")
# Liveness of a request's target: how often it is checked, and how long it may stay stopped.
LIVENESS_POLL_S = 1.0
UNRESPONSIVE_AFTER_S = 10.0


@dataclass(frozen=True)
class _Route:
    """Where the answer to one request goes."""

    caller: tuple[str, str] | None  # None: a local request (the matcher's future)
    callee: tuple[str, str]
    event_id: str | None = None  # the request event (on the callee)
    caller_event: str | None = None  # the event whose Turn made the request (on the caller)


ClearHistory = Callable[[str], Awaitable[None] | None]
StreamListener = Callable[[JsonObject], None]


class Orchestrator(ProcessSupervisor):
    """Routes events to supervised agent processes; see the module docstring."""

    def __init__(
        self,
        spawner: Spawner,
        *,
        swarm_name: str,
        entry_agent: str,
        agents: Sequence[str],
        project_root: Path | None = None,
        grace_period_ms: int = 30_000,
        reconcile_interval_s: float = 5.0,
        crash_threshold: int = 5,
        ready_timeout_s: float = 60.0,
        status_path: Path | None = None,
        clear_history: ClearHistory | None = None,
        logger: logging.Logger | None = None, idle_timeout_ms: int | None = None,
    ) -> None:
        super().__init__(
            spawner,
            swarm_name=swarm_name,
            agents=agents,
            grace_period_ms=grace_period_ms,
            reconcile_interval_s=reconcile_interval_s,
            crash_threshold=crash_threshold,
            idle_timeout_ms=idle_timeout_ms,
            ready_timeout_s=ready_timeout_s,
            status_path=status_path,
            logger=logger or _log,
        )
        self.entry_agent = entry_agent
        self.project_root = project_root
        self.clear_history = clear_history
        self._pending: RequestMatcher[AgentEvent, _Route] = RequestMatcher()
        self._stream_listeners: dict[str, StreamListener] = {}
        self._event_sinks: tuple[EventSink, ...] = ()
        # admit(caller, target, event) raises AgentError to refuse an agent-to-agent event
        # (trace budgets, docs/observability.md "Budgets").
        self.admit: Callable[[str, str, AgentEvent], None] | None = None
        self.store_input: Callable[[str, AgentEvent], None] | None = None  # SwarmInbox.record

    def __repr__(self) -> str:
        live = sum(1 for r in self.records.values() if r.alive)
        return (
            f"<Orchestrator swarm={self.swarm_name!r} "
            f"processes={live}/{len(self.records)} stopping={self._stopping}>"
        )

    async def __aenter__(self) -> Orchestrator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def shutdown(
        self,
        reason: ShutdownReason = "orchestrator_shutdown",
        *,
        grace_period_ms: int | None = None,
    ) -> None:
        """Stop every process gracefully (SIGKILL after the grace period) and fail local waits."""
        if self._stopping:  # a stop is under way (or was cancelled): its processes end
            await self._wait_all_exited(grace_period_ms)
            return
        await self._stop_all(reason, grace_period_ms)
        self._pending.close(IpcError("the orchestrator is shutting down", code="E_IPC_SHUTDOWN"),
                             refuse_new=False)
        await self._close_tasks()
        self.spawner.release()  # its helpers (the fork server's template) until the next spawn

    # -- public API --------------------------------------------------------------------------------
    def _check_agent(self, agent: str) -> None:
        if agent not in self.agents:
            raise AgentError(
                f"agent {agent!r} is not part of swarm {self.swarm_name!r}",
                code="E_AGENT_NOT_FOUND",
                suggestion="agents of this swarm: " + ", ".join(sorted(self.agents)),
            )

    async def submit(self, agent: str, event: AgentEvent) -> None:
        """Queue ``event`` on (agent, event.instanceKey or "default"); spawns on demand."""
        self._check_agent(agent)
        if self._stopping:
            raise IpcError("the orchestrator is shutting down", code="E_IPC_SHUTDOWN")
        if event.trace_id is None:
            event.trace_id = new_trace_id()
        self._enqueue(agent, event)

    async def request(
        self, agent: str, event: AgentEvent | str, *, instance_key: str = "default",
        timeout_ms: int | None = None, on_event: StreamListener | None = None,
    ) -> AgentEvent:
        """Send ``event`` to ``agent`` and wait for the answer event (``response_text`` reads it).

        With ``on_event`` the agent process streams the Turn's runtime events (``llm.delta``,
        ``step.*``, ``tool.*`` payloads) to it, in order and before the answer arrives."""
        if isinstance(event, str):
            event = AgentEvent(type="message", input=event, instance_key=instance_key)
        event.instance_key = event.instance_key or instance_key
        correlation = new_correlation_id()
        event.reply_to = ReplyChannel(target=ORCHESTRATOR, correlation_id=correlation)
        future = self._pending.expect(
            correlation, _Route(None, (agent, event.instance_key), event_id=event.id)
        )
        if on_event is not None:
            event.stream = True
            self._stream_listeners[event.id] = on_event
        try:
            await self.submit(agent, event)
            if timeout_ms is None:
                return await self._await_answer(future, agent, event.instance_key)
            async with asyncio.timeout(timeout_ms / 1000):
                return await self._await_answer(future, agent, event.instance_key)
        except TimeoutError:
            raise AgentError(
                f"agent request timeout ({timeout_ms}ms) waiting for {agent}@{event.instance_key}",
                code="E_AGENT_TIMEOUT",
            ) from None
        except asyncio.CancelledError:
            # The requester gave up (Ctrl-C in the chat): the Turn is cancelled too, not orphaned.
            rec = self.records.get((agent, event.instance_key))
            if rec is not None:
                self._cancel_event(rec, event.id)
            raise
        finally:
            self._pending.forget(correlation)
            self._stream_listeners.pop(event.id, None)

    async def _await_answer(
        self, future: asyncio.Future[AgentEvent], agent: str, key: str
    ) -> AgentEvent:
        """The answer, with a liveness check: a target process that stays *stopped* (SIGSTOP,
        Ctrl-Z, a debugger) for :data:`UNRESPONSIVE_AFTER_S` fails the request with
        ``E_AGENT_UNRESPONSIVE`` instead of leaving the caller (the chat, a control request)
        waiting forever. A slow but running Turn is never cut short (docs/orchestrator.md)."""
        stopped_since: float | None = None
        while True:
            done, _ = await asyncio.wait({future}, timeout=LIVENESS_POLL_S)
            if done:
                return future.result()
            rec = self.records.get((agent, key))
            pid = rec.handle.pid if rec is not None and rec.handle is not None else None
            if not pid_stopped(pid):
                stopped_since = None
                continue
            now = time.monotonic()
            stopped_since = stopped_since if stopped_since is not None else now
            if now - stopped_since >= UNRESPONSIVE_AFTER_S:
                raise AgentError(
                    f"agent {agent}@{key} (pid {pid}) is stopped and cannot answer "
                    f"(stopped for {now - stopped_since:.0f} s)",
                    code="E_AGENT_UNRESPONSIVE",
                    suggestion=f"resume it with `kill -CONT {pid}`, or restart it with "
                    f"`goondan restart --agent {agent}`",
                )

    def expect_answer(self, callee: tuple[str, str]) -> tuple[str, asyncio.Future[AgentEvent]]:
        """A correlation id whose answer resolves the future (:mod:`goondan.ipc.queries`);
        cancelling the future forgets it."""
        correlation = new_correlation_id()
        future = self._pending.expect(correlation, _Route(None, callee))
        future.add_done_callback(lambda _: self._pending.forget(correlation))
        return correlation, future

    async def cancel(
        self,
        agent: str,
        event_id: str,
        *,
        instance_key: str = "default",
        timeout_s: float | None = 10.0,
    ) -> bool:
        """Cancel the Turn of ``event_id`` on (agent, instance_key) and wait (up to ``timeout_s``)
        until the process reported it finished; False if that event is neither queued nor
        running there (already answered). The events queued behind it are not affected."""
        rec = self.records.get((agent, instance_key))
        if rec is None or not self._cancel_event(rec, event_id):
            return False

        def gone() -> bool:
            return not rec.inbox.holds(event_id)

        if timeout_s is not None:
            with contextlib.suppress(TimeoutError):
                await self.wait_until(gone, timeout_s)
        return True

    def _cancel_event(self, rec: InstanceRecord, event_id: str) -> bool:
        queued = rec.inbox.remove_waiting(event_id)
        if queued is not None:
            self._fail_request(
                queued, rec, "E_TURN_CANCELLED", "the request was cancelled before it started"
            )
            self._mark_changed()
            return True
        current = rec.inbox.current
        if current is None or current.event.id != event_id:
            return False
        if current.cancel_requested:
            return True
        current.cancel_requested = True
        self.logger.info("cancelling event %s on %s", event_id, rec.name,
                         extra={"event": "orchestrator.cancel", "agentName": rec.agent_name,
                                "instanceKey": rec.instance_key, "eventId": event_id})
        if rec.handle is not None:
            message = Cancel(event_id, "cancelled").ipc_message(
                sender=ORCHESTRATOR, to=rec.agent_name, instance_key=rec.instance_key)
            self._spawn_task(self._send(rec, rec.handle, message))
        # The Turn's own unanswered requests would only produce work nobody waits for.
        for pending in self._pending:
            route = pending.route
            if route.caller == rec.key and route.caller_event == event_id and route.event_id:
                callee = self.records.get(route.callee)
                if callee is not None:
                    self._cancel_event(callee, route.event_id)
        return True

    async def spawn_instance(
        self, agent: str, instance_key: str, *, cwd: str | None = None,
        owner: tuple[str, str] | None = None,
    ) -> JsonObject:
        """``agents__spawn``: create and start (agent, key) with an optional tool workdir."""
        self._check_agent(agent)
        workdir = None
        if cwd:
            path = Path(cwd)
            if not path.is_absolute() and self.project_root is not None:
                path = self.project_root / path
            workdir = str(path.resolve())
        existed = (agent, instance_key) in self.records
        rec = self.record(agent, instance_key, owner=owner, workdir=workdir)
        self._ensure_running(rec)
        return {
            "target": agent,
            "instanceKey": instance_key,
            "spawned": not existed,
            "cwd": rec.workdir,
        }

    def list_spawned(self, owner: tuple[str, str] | None, *, include_all: bool) -> list[JsonObject]:
        """``agents__list``: instances created through ``spawn``, oldest first."""
        rows = [
            r
            for r in self.records.values()
            if r.owner is not None and (include_all or r.owner == owner)
        ]
        rows.sort(key=lambda r: r.created_at)
        return [
            {"target": r.agent_name, "instanceKey": r.instance_key, "ownerAgent": r.owner[0],
             "ownerInstanceKey": r.owner[1], "createdAt": r.created_at, "cwd": r.workdir}
            for r in rows if r.owner is not None
        ]

    async def restart(
        self, agent: str | None = None, *, fresh: bool = False, reason: ShutdownReason = "restart",
        instance_key: str | None = None,
    ) -> list[str]:
        """Gracefully replace the processes of ``agent`` (all agents if None; only conversation
        ``instance_key`` if given); history kept unless ``fresh``. Returns the process names."""
        if agent is not None:
            self._check_agent(agent)
        agents = [agent] if agent is not None else list(self.agents)
        restarted: list[str] = []
        for name in agents:
            recs = [r for r in self.records.values()
                    if r.agent_name == name and instance_key in (None, r.instance_key)]
            running = [r for r in recs if r.alive or r.starting]
            for rec in recs:
                rec.hold_dispatch(reason)  # until the replacement is up
            await asyncio.gather(*(self._stop_record(r, reason, None) for r in running))
            if fresh and self.clear_history is not None:
                outcome = self.clear_history(name)
                if outcome is not None:
                    await outcome
            for rec in recs:
                rec.resume_dispatch()
                rec.reset_crashes()
                if rec in running or rec.queue:
                    restarted.append(rec.name)
                    self._ensure_running(rec)
        return restarted

    async def update_agents(self, agents: Sequence[str], *, entry_agent: str | None = None) -> None:
        """New configuration: processes of removed agents stop (``config_change``)."""
        self.agents = list(agents)
        if entry_agent is not None:
            self.entry_agent = entry_agent
        await self.reconcile()

    # -- routing -----------------------------------------------------------------------------------
    def _enqueue(self, agent: str, event: AgentEvent) -> None:
        key = event.instance_key or "default"
        event.instance_key = key
        if self.store_input is not None:  # durable before it is queued (docs/orchestrator.md)
            self.store_input(agent, event)
        rec = self.record(agent, key)
        rec.inbox.push(event)
        self._mark_changed()
        if rec.alive:
            self._dispatch(rec)
        else:
            self._ensure_running(rec)

    def _dispatch(self, rec: InstanceRecord) -> None:
        handle = rec.handle
        if handle is None or not rec.ready or rec.stop_mode is not None or self._stopping:
            return
        event = rec.inbox.take_next()
        if event is None:  # one in flight already, or nothing waits (idle: docs/scaling.md)
            self._arm_idle(rec)
            return
        self._spawn_task(
            self._send(rec, handle, IpcMessage.event(ORCHESTRATOR, rec.agent_name, event))
        )

    def _unsendable(self, rec: InstanceRecord, message: IpcMessage, exc: Exception) -> None:
        """``message`` can never be sent: log it, fail its request and free the instance."""
        self.logger.error("cannot send a %s message to %s: %s", message.type, rec.name, exc,
                          extra={"event": "orchestrator.sendFailed", "agentName": rec.agent_name})
        if message.type != "event":
            return
        event = message.agent_event()
        if rec.inbox.is_current(event.id):
            rec.inbox.finish()
            self._fail_request(event, rec, "E_IPC_BAD_MESSAGE",
                               f"the event could not be delivered to {rec.name}: {exc}")
            self._mark_changed()
            self._dispatch(rec)

    async def _route_agent_event(
        self, sender: InstanceRecord, target: str, event: AgentEvent
    ) -> None:
        if target not in self.agents:
            self.logger.warning(
                "%s sent an event to unknown agent %r", sender.name, target,
                extra={"event": "orchestrator.unknownTarget", "agentName": sender.agent_name},
            )
            if event.reply_to is not None:
                await self._answer_error(
                    sender,
                    event,
                    "E_AGENT_NOT_FOUND",
                    f"agent {target!r} is not part of swarm {self.swarm_name!r}",
                )
            return
        if self.admit is not None:
            try:
                self.admit(sender.agent_name, target, event)
            except AgentError as err:
                self.logger.warning(
                    "%s → %s refused: %s",
                    sender.name,
                    target,
                    err.message,
                    extra={"event": "orchestrator.budgetExceeded", "agentName": sender.agent_name},
                )
                if event.reply_to is not None:
                    await self._answer_error(sender, event, err.code, err.message)
                return
        key = event.instance_key or "default"
        event.instance_key = key
        if event.reply_to is not None:
            self._pending.track(event.reply_to.correlation_id, _Route(
                sender.key, (target, key), event_id=event.id,
                caller_event=sender.in_flight.id if sender.in_flight is not None else None,
            ))
        self._enqueue(target, event)

    async def _answer_error(
        self, to: InstanceRecord, request: AgentEvent, code: str, message: str
    ) -> None:
        assert request.reply_to is not None
        answer = AgentEvent(
            type="agent.response",
            instance_key=to.instance_key,
            source={"kind": "agent", "name": ORCHESTRATOR},
            trace_id=request.trace_id,
            metadata={
                "inReplyTo": request.reply_to.correlation_id,
                "error": {"code": code, "message": message},
            },
            auth=request.auth,
        )
        if to.handle is not None:
            await self._send(to, to.handle, IpcMessage.event(ORCHESTRATOR, to.agent_name, answer))

    def _fail_request(
        self, request: AgentEvent, callee: InstanceRecord, code: str, message: str
    ) -> None:
        """The callee cannot answer ``request``: answer its caller with an error."""
        if request.reply_to is None:
            return
        pending = self._pending.take(request.reply_to.correlation_id)
        error = {
            "code": code,
            "message": message,
            "target": f"{callee.agent_name}@{callee.instance_key}",
        }
        answer = AgentEvent(
            type="agent.response",
            source={"kind": "agent", "name": ORCHESTRATOR},
            trace_id=request.trace_id,
            metadata={"inReplyTo": request.reply_to.correlation_id, "error": error},
            auth=request.auth,
        )
        if pending is None:
            return
        if pending.future is not None:
            if not pending.future.done():
                pending.future.set_result(answer)
            return
        caller = self.records.get(pending.route.caller) if pending.route.caller else None
        if caller is not None and caller.handle is not None:
            answer.instance_key = caller.instance_key
            self._spawn_task(
                self._send(
                    caller, caller.handle, IpcMessage.event(ORCHESTRATOR, caller.agent_name, answer)
                )
            )

    async def _route_response(self, sender: InstanceRecord, event: AgentEvent) -> None:
        correlation = str(event.metadata.get("inReplyTo"))
        pending = self._pending.take(correlation)
        if pending is None:
            self.logger.debug("dropping answer %s nobody waits for", correlation)
            return
        if pending.future is not None:
            if not pending.future.done():
                pending.future.set_result(event)
            return
        caller = self.records.get(pending.route.caller) if pending.route.caller else None
        if caller is None or caller.handle is None:
            self.logger.info("caller of %s is gone; answer dropped", correlation)
            return
        await self._send(
            caller, caller.handle, IpcMessage.event(sender.agent_name, caller.agent_name, event)
        )

    # -- messages from a process -------------------------------------------------------------------
    async def _on_message(
        self, rec: InstanceRecord, handle: AgentHandle, message: IpcMessage
    ) -> None:
        if message.is_control:
            await self._on_control(rec, handle, message.agent_event())
        elif message.type == "shutdown_ack":
            ack = decode_shutdown(message)
            if isinstance(ack, ShutdownAck) and ack.pending:
                rec.inbox.push_front(ack.pending)  # never started: the next process runs them
            self.logger.info(
                "%s acknowledged shutdown", rec.name, extra={"event": "orchestrator.shutdownAck"}
            )
        elif message.type == "event":
            event = message.agent_event()
            if "inReplyTo" in event.metadata:
                await self._route_response(rec, event)
            else:
                await self._route_agent_event(rec, message.to, event)
        else:
            self.logger.warning("unexpected %s message from %s", message.type, rec.name)

    def add_event_sink(self, sink: EventSink) -> Callable[[], None]:
        """Deliver every agent process's runtime events (every Turn) to ``sink``; returns remove."""
        self._event_sinks = (*self._event_sinks, sink)

        def remove() -> None:
            self._event_sinks = tuple(s for s in self._event_sinks if s is not sink)

        return remove

    def publish_event(self, event: RuntimeEvent) -> None:
        """Deliver an event raised outside the agent processes (an ingress) to the event sinks."""
        for sink in self._event_sinks:
            try:
                sink.handle(event)
            except Exception:
                self.logger.exception("runtime event sink failed")

    def _deliver_runtime_event(self, event_id: str, payload: JsonObject) -> None:
        listener = self._stream_listeners.get(event_id)
        if listener is not None and payload.get("type") in STREAMED_EVENT_TYPES:
            try:
                listener(payload)
            except Exception:  # a front-end bug must not break routing
                self.logger.exception("stream listener failed")
        if not self._event_sinks:
            return
        try:
            event = event_from_dict(payload)
        except (TypeError, ValueError) as exc:
            self.logger.debug("undecodable runtime event %r: %s", payload.get("type"), exc)
            return
        for sink in self._event_sinks:
            try:
                sink.handle(event)
            except Exception:
                self.logger.exception("runtime event sink failed")

    async def _on_control(
        self, rec: InstanceRecord, handle: AgentHandle, event: AgentEvent
    ) -> None:
        control = decode_control(event)
        if isinstance(control, Delta):  # hot path: no status change
            self._deliver_runtime_event(control.event_id, control.payload)
            return
        if isinstance(control, Ready):
            rec.transition("ready")
            rec.ready_signal.set()
            self.logger.info(
                "%s ready (pid %s)",
                rec.name,
                handle.pid,
                extra={"event": "orchestrator.agentReady"},
            )
            settle_on_ready(rec, control, self._pending, self._fail_request, self.logger)
            self._dispatch(rec)
        elif isinstance(control, TurnStarted):
            if rec.inbox.current is not None:
                rec.inbox.current.started = True
            rec.transition("turnStarted")
        elif isinstance(control, TurnFinished):
            rec.turn_finished(control.steered)  # a completed Turn also resets the crash count
            if control.restart_requested and rec.stop_mode is None:
                # A tool asked for it (base `self-restart`): the Turn is folded, so replace this
                # process like `goondan restart` would, keeping its queue (docs/orchestrator.md).
                self._spawn_task(self._restart_record(rec, control.restart_reason or ""))
            else:
                self._dispatch(rec)
        elif isinstance(control, StartError):
            self.logger.error(
                "%s failed to start: [%s] %s", rec.name, control.code, control.message,
                extra={"event": "orchestrator.agentStartError", "agentName": rec.agent_name,
                       "instanceKey": rec.instance_key},
            )
            # Requests would wait for their timeout on an agent that cannot start.
            for queued in rec.inbox.remove_requests():
                self._fail_request(queued, rec, "E_AGENT_START_FAILED",
                                   f"agent {rec.agent_name} failed to start: {control.message}")
        elif isinstance(control, (SpawnQuery, ListQuery)) and event.reply_to is not None:
            await self._answer_query(rec, handle, control)
        self._mark_changed()

    async def _answer_query(
        self, rec: InstanceRecord, handle: AgentHandle, query: SpawnQuery | ListQuery
    ) -> None:
        answer: Answer
        try:
            if isinstance(query, SpawnQuery):
                result = await self.spawn_instance(
                    query.target, query.target_instance_key,
                    cwd=query.cwd if isinstance(query.cwd, str) else None, owner=rec.key,
                )
            else:
                result = {"agents": self.list_spawned(rec.key, include_all=bool(query.include_all))}
            answer = Answer(query.correlation_id, result=result)
        except AgentError as err:
            answer = Answer(query.correlation_id, error={"code": err.code, "message": err.message})
        message = answer.ipc_message(
            sender=ORCHESTRATOR, to=rec.agent_name, instance_key=rec.instance_key
        )
        await self._send(rec, handle, message)

    def _release_in_flight(self, rec: InstanceRecord, ended: WorkerExit) -> None:
        """The process of ``rec`` ended with an event in flight: a cancelled one is answered
        ``E_TURN_CANCELLED``, a started request is held until the respawned process is ready (it
        resumes the Turn, :mod:`goondan.swarm.resumes`); one that never started, or a stored
        event nobody waits for (its claim tells if it started), goes back to the front."""
        current = rec.inbox.finish()
        if current is None:
            return
        interrupted = current.event
        if current.cancel_requested:
            self._fail_request(interrupted, rec, "E_TURN_CANCELLED", "the request was cancelled")
        elif current.started and (interrupted.reply_to or interrupted.start_marker is None):
            what = ended.describe()
            self.logger.warning(
                "%s exited (%s) during a turn; event %s was interrupted",
                rec.name,
                what,
                interrupted.id,
                extra={
                    "event": "orchestrator.turnInterrupted",
                    "agentName": rec.agent_name,
                    "instanceKey": rec.instance_key,
                    "eventId": interrupted.id,
                },
            )
            rec.hold_interrupted(interrupted, what)
        else:
            rec.inbox.push_front([interrupted])
