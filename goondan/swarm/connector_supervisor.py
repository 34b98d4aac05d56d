"""Supervision of connector processes: one per Connection, crash backoff, graceful stop.

The same policy as agent processes (docs/orchestrator.md, "Supervision"), applied by
:class:`ConnectorSupervisor` through the same :class:`~goondan.swarm.spawner.Spawner`, on the
same record base (:class:`~goondan.swarm.supervision.WorkerRecord`: one status moved only by the
one :data:`~goondan.swarm.supervision.TRANSITIONS` table, one crash count and backoff):

* every Connection's process is started when the supervisor starts (connectors are not on
  demand: they listen);
* a start failure (``runtime.startError``) or a later crash (``run`` raised, non-zero exit,
  killed by a signal) is logged once per occurrence as an ``E_CONNECTOR`` error record with the
  Connection's name and cause, and the process is started again after
  :func:`~goondan.swarm.supervision.backoff_ms` of its consecutive crashes (the first five at
  once, then 1 s, 2 s, 4 s … capped at 300 s). A connector that stayed up for
  :data:`STABLE_AFTER_S` starts a new count;
* a connector whose ``run`` *returns* has finished its work (a file was read to its end): it
  is logged and not restarted, which is neither a crash nor a crash loop;
* :meth:`ConnectorSupervisor.shutdown` sends ``shutdown`` to every process, waits up to the
  grace period and SIGKILLs what is left;
* ``goondan run --watch`` changes the set while it runs: :meth:`~ConnectorSupervisor.add`
  starts a new Connection's process, :meth:`~ConnectorSupervisor.replace` stops one the same
  way (reason ``config_change``) and starts it again with the new spec and a fresh crash count,
  :meth:`~ConnectorSupervisor.remove` stops one for good.

Messages from a connector process are never taken for an agent's: ``runtime.emit`` goes to
:meth:`Ingress.accept` and is answered with ``runtime.answer``; one with ``answer: true``
(``ctx.ask``) is answered when its Turn ended, its progress sent as ``runtime.delta`` and a
``runtime.cancel`` of its event id cancels it (:mod:`goondan.connectors.asking`); other
reports update the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from goondan.connectors.asking import TurnAnswer
from goondan.connectors.event import ConnectorEvent
from goondan.connectors.spec import ConnectionSpec
from goondan.errors import ConnectorEventError, GoondanError, IpcError
from goondan.ipc.control import (
    Answer,
    Cancel,
    Completed,
    ConnectorError,
    Decide,
    Delta,
    Emit,
    Ready,
    StartError,
    decode_control,
)
from goondan.ipc.protocol import ORCHESTRATOR, IpcMessage, ShutdownReason
from goondan.swarm.asking import ask_ingress
from goondan.swarm.ingress import Ingress
from goondan.swarm.spawner import AgentHandle, Spawner, SpawnRequest
from goondan.swarm.supervision import ProcessStatus, WorkerRecord
from goondan.swarm.supervisor import pump_messages
from goondan.types import AgentEvent, JsonObject

__all__ = ["STABLE_AFTER_S", "ConnectorRecord", "ConnectorSupervisor"]

_log = logging.getLogger("goondan.connectors")

# A connector that ran this long before crashing starts a new crash count.
STABLE_AFTER_S = 60.0


@dataclass
class ConnectorRecord(WorkerRecord):
    """Supervision state of one Connection's connector process: pending → spawning → running
    (→ completed) or crashed / crashLoopBackOff / terminated (:data:`TRANSITIONS`)."""

    spec: ConnectionSpec
    status: ProcessStatus = field(default="pending", kw_only=True)
    emitted: int = 0
    reported_error: str | None = None  # what this process reported (startError / connectorError)
    timer: asyncio.TimerHandle | None = None
    replacing: bool = False  # stopped for a configuration change: neither a crash nor completed

    @property
    def name(self) -> str:
        return self.spec.name

    def to_dict(self) -> JsonObject:
        """A row of the status document (a crash-looping connector shows ``crashLoopBackOff``
        until it has run for :data:`STABLE_AFTER_S`: its next crash would start a new count)."""
        handle = self.handle
        return {
            "process": SpawnRequest.connector(self.spec.name, self.spec.connector).process_name,
            "kind": "connector",
            "connection": self.spec.name,
            "connector": self.spec.connector,
            "status": self.shown_status(STABLE_AFTER_S),
            "pid": handle.pid if handle is not None else None,
            "startedAt": self.started_at if handle is not None else None,
            "emitted": self.emitted,
            "consecutiveCrashes": self.consecutive_crashes,
            "restarts": max(0, self.spawn_count - 1),
            "lastExitCode": self.last_exit_code,
            "lastError": self.last_error,
        }


class ConnectorSupervisor:
    """Starts and supervises the connector process of each Connection (module docstring)."""

    def __init__(
        self,
        spawner: Spawner,
        ingress: Ingress,
        connections: Sequence[ConnectionSpec],
        *,
        grace_period_ms: int = 5_000,
        crash_threshold: int = 5,
        logger: logging.Logger | None = None,
    ) -> None:
        self.spawner = spawner
        self.ingress = ingress
        self.records = {c.name: ConnectorRecord(c) for c in connections}
        self.grace_period_ms = grace_period_ms
        self.crash_threshold = crash_threshold
        self.logger = logger or _log
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        # (connection, event id) -> its Turn
        self._asks: dict[tuple[str, str], asyncio.Task[Any]] = {}
        # a connector's approval decision (Decide): SwarmService.decide_approval
        self.decide: Callable[..., Awaitable[JsonObject]] | None = None

    def __repr__(self) -> str:
        live = sum(1 for r in self.records.values() if r.handle is not None)
        return (
            f"<ConnectorSupervisor connections={len(self.records)} "
            f"live={live} stopping={self._stopping}>"
        )

    def _task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start(self) -> None:
        """Start every Connection's process."""
        for rec in self.records.values():
            self._ensure_running(rec)

    def snapshot(self) -> list[JsonObject]:
        """One status row per Connection."""
        return [rec.to_dict() for rec in self.records.values()]

    def _ensure_running(self, rec: ConnectorRecord) -> None:
        if self._stopping or rec.handle is not None or rec.status == "spawning":
            return
        rec.begin_spawn()
        self._task(self._start(rec))

    async def _start(self, rec: ConnectorRecord) -> None:
        request = SpawnRequest.connector(rec.spec.name, rec.spec.connector)
        try:
            handle = await self.spawner.spawn(request)
        except Exception as exc:  # cannot even start a process: same policy as a crash
            self._crashed(rec, None, f"spawning failed: {exc}")
            rec.exited.set()
            return
        rec.spawned(handle)
        self.logger.info(
            "started connector %s of Connection %s (pid %s)",
            rec.spec.connector,
            rec.name,
            handle.pid,
            extra={"event": "connector.spawned", "connection": rec.name, "childPid": handle.pid},
        )
        pump = self._task(self._pump(rec, handle))
        self._task(self._watch(rec, handle, pump))

    async def _pump(self, rec: ConnectorRecord, handle: AgentHandle) -> None:
        await pump_messages(handle, lambda message: self._on_message(rec, handle, message),
                            name=f"connection {rec.name}", logger=self.logger)

    async def _on_message(
        self, rec: ConnectorRecord, handle: AgentHandle, message: IpcMessage
    ) -> None:
        if not message.is_control:
            self.logger.warning(
                "connection %s sent a %s message; connectors only emit", rec.name, message.type
            )
            return
        event = message.agent_event()
        control = decode_control(event)
        if isinstance(control, Emit) and event.reply_to is not None and control.answer:
            self._start_ask(rec, handle, event.reply_to.correlation_id, control.event,
                            control.agent, control.wait_for_approval)
        elif isinstance(control, Decide) and event.reply_to is not None:
            self._task(self._answer_decide(rec, handle, event.reply_to.correlation_id, control))
        elif isinstance(control, Emit) and event.reply_to is not None:
            await self._answer_emit(rec, handle, event)
        elif isinstance(control, Cancel):
            task = self._asks.get((rec.name, control.event_id))
            if task is not None:
                task.cancel()
        elif isinstance(control, Ready):
            rec.transition("run")
        elif isinstance(control, (StartError, ConnectorError)):
            rec.reported_error = str(control.message)
        elif isinstance(control, Completed):
            rec.transition("done")

    async def _answer_emit(
        self, rec: ConnectorRecord, handle: AgentHandle, event: AgentEvent
    ) -> None:
        assert event.reply_to is not None
        correlation = event.reply_to.correlation_id
        answer: Answer
        try:
            accepted = await self.ingress.accept(rec.name, event.metadata.get("event"))
            receipt = accepted.receipt
            rec.emitted += 0 if receipt.duplicate or receipt.dropped else 1
            answer = Answer(correlation, result={"id": receipt.id, "duplicate": receipt.duplicate,
                                                 "dropped": receipt.dropped})
        except ConnectorEventError as err:
            self.logger.warning("connection %s: invalid event dropped: %s", rec.name, err.message,
                                extra={"event": "ingress.invalidEvent", "connection": rec.name})
            answer = Answer(correlation, error={"code": err.code, "message": err.message})
        except GoondanError as err:  # the inbox cannot be written: the event is not accepted
            self.logger.error("connection %s: event not accepted: %s", rec.name, err.message)
            answer = Answer(correlation, error={"code": err.code, "message": err.message})
        # The answer goes out without holding up the next message of this connector: on an
        # engine where a send is a round trip (Ray), awaiting it would make a burst of emits
        # pay one round trip each, one after the other. The event is durable already.
        self._task(self._send_answer(rec, handle, answer))

    async def _answer_decide(self, rec: ConnectorRecord, handle: AgentHandle, correlation: str,
                             control: Decide) -> None:
        answer: Answer
        try:
            if self.decide is None:
                raise ConnectorEventError("approval decisions need a running swarm")
            result = await self.decide(control.approval_id, approve=control.approve,
                                       by=control.decided_by, via=control.via,
                                       reason=control.reason)
            answer = Answer(correlation, result=result)
        except GoondanError as err:  # an unknown id, the store cannot be written
            answer = Answer(correlation, error={"code": err.code, "message": err.message})
        self.logger.info("connection %s decided approval %s: %s", rec.name, control.approval_id,
                         answer.result or answer.error,
                         extra={"event": "connector.approvalDecided", "connection": rec.name})
        self._task(self._send_answer(rec, handle, answer))

    def _start_ask(self, rec: ConnectorRecord, handle: AgentHandle, correlation: str, raw: Any,
                   agent: str | None, wait_for_approval: bool = False) -> None:
        try:
            event = ConnectorEvent.from_dict(raw)
        except ConnectorEventError as err:
            self._task(self._send_answer(rec, handle, Answer(
                correlation, error={"code": err.code, "message": err.message})))
            return
        key = (rec.name, event.id)
        task = self._task(
            self._answer_ask(rec, handle, correlation, event, agent, wait_for_approval))
        self._asks[key] = task
        task.add_done_callback(
            lambda done: self._asks.pop(key, None) if self._asks.get(key) is done else None
        )

    async def _answer_ask(self, rec: ConnectorRecord, handle: AgentHandle, correlation: str,
                          event: ConnectorEvent, agent: str | None,
                          wait_for_approval: bool = False) -> None:
        def progress(payload: JsonObject) -> None:
            self._task(self._send_answer(rec, handle, Delta(event.id, payload)))

        answer: Answer
        try:
            result: TurnAnswer = await ask_ingress(self.ingress, rec.name, event, agent=agent,
                                                   on_progress=progress,
                                                   wait_for_approval=wait_for_approval)
            receipt = result.receipt
            rec.emitted += 0 if receipt.duplicate or receipt.dropped else 1
            answer = Answer(correlation, result=result.to_dict())
        except asyncio.CancelledError:  # the connector cancelled it: the Turn is cancelled
            answer = Answer(
                correlation,
                error={"code": "E_TURN_CANCELLED", "message": "cancelled by the connector"},
            )
        except GoondanError as err:  # an invalid event, or the inbox cannot be written
            self.logger.warning(
                "connection %s: event not accepted: %s",
                rec.name,
                err.message,
                extra={"event": "ingress.invalidEvent", "connection": rec.name},
            )
            answer = Answer(correlation, error={"code": err.code, "message": err.message})
        # a task like the progress sends before it: tasks start in order, so it leaves after them
        self._task(self._send_answer(rec, handle, answer))

    async def _send_answer(
        self, rec: ConnectorRecord, handle: AgentHandle, answer: Answer | Delta
    ) -> None:
        with contextlib.suppress(IpcError):
            await handle.transport.send(
                answer.ipc_message(sender=ORCHESTRATOR, to=rec.name, instance_key=rec.name))

    async def _watch(
        self, rec: ConnectorRecord, handle: AgentHandle, pump: asyncio.Task[Any]
    ) -> None:
        ended = await handle.wait()
        try:  # the last reports (connectorError, completed) were written before the exit
            async with asyncio.timeout(2.0):
                await asyncio.shield(pump)
        except (TimeoutError, asyncio.CancelledError):
            pump.cancel()
        with contextlib.suppress(Exception):
            await handle.transport.aclose()
        rec.ended(ended.status_code)
        if self._stopping or rec.replacing:
            rec.transition("exit")
        elif ended.ok:
            rec.transition("done")
            self.logger.info(
                "connector of Connection %s finished (run returned); not restarted",
                rec.name,
                extra={"event": "connector.completed", "connection": rec.name},
            )
        else:
            self._crashed(rec, ended.status_code, rec.reported_error or ended.describe())
        rec.reported_error = None
        rec.exited.set()

    def _crashed(self, rec: ConnectorRecord, code: int | None, cause: str) -> None:
        delay = rec.count_crash(self.crash_threshold, stable_after_s=STABLE_AFTER_S, cause=cause)
        self.logger.error(
            "[E_CONNECTOR] Connection %s (connector %s) "
            "failed: %s; restarting in %d ms (%d in a row)",
            rec.name,
            rec.spec.connector,
            cause,
            delay,
            rec.consecutive_crashes,
            extra={
                "event": "connector.crashed",
                "code": "E_CONNECTOR",
                "connection": rec.name,
                "connector": rec.spec.connector,
                "exitCode": code,
                "backoffMs": delay,
                "consecutiveCrashes": rec.consecutive_crashes,
            },
        )
        if self._stopping or rec.replacing:
            return
        if delay > 0:
            rec.timer = asyncio.get_running_loop().call_later(delay / 1000, self._respawn, rec)
        else:
            self._respawn(rec)

    def _respawn(self, rec: ConnectorRecord) -> None:
        rec.timer = None
        self._ensure_running(rec)

    def add(self, spec: ConnectionSpec) -> None:
        """Start the process of a Connection that was not running (a reloaded bundle)."""
        if spec.name in self.records:
            raise ValueError(f"Connection {spec.name!r} is supervised already")
        rec = self.records[spec.name] = ConnectorRecord(spec)
        self._ensure_running(rec)

    async def replace(self, spec: ConnectionSpec) -> None:
        """Stop the Connection's process (``config_change``) and start it again with ``spec``."""
        rec = self.records[spec.name]
        await self._stop_for_change(rec)
        rec.spec = spec
        rec.reset_crashes()
        rec.reported_error = None
        self._ensure_running(rec)

    async def remove(self, name: str) -> None:
        """Stop the Connection's process for good (it left the bundle)."""
        rec = self.records.get(name)
        if rec is not None:
            await self._stop_for_change(rec)
            del self.records[name]

    async def _stop_for_change(self, rec: ConnectorRecord) -> None:
        if rec.timer is not None:
            rec.timer.cancel()
            rec.timer = None
        rec.replacing = True
        try:
            await self._stop(rec, reason="config_change")
        finally:
            rec.replacing = False

    async def shutdown(self) -> None:
        """Stop every connector: ``shutdown`` → cancel ``run`` → exit; SIGKILL after the grace."""
        self._stopping = True
        for rec in self.records.values():
            if rec.timer is not None:
                rec.timer.cancel()
                rec.timer = None
        await asyncio.gather(
            *(self._stop(rec) for rec in self.records.values()), return_exceptions=True
        )
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _stop(
        self, rec: ConnectorRecord, reason: ShutdownReason = "orchestrator_shutdown"
    ) -> None:
        while rec.status == "spawning" and rec.handle is None:
            await asyncio.sleep(0.005)
        handle = rec.handle
        if handle is None:
            return
        with contextlib.suppress(IpcError):
            await handle.transport.send(IpcMessage.shutdown(
                rec.name, grace_period_ms=self.grace_period_ms, reason=reason))
        try:
            async with asyncio.timeout(self.grace_period_ms / 1000):
                await handle.wait()
        except TimeoutError:
            self.logger.warning("connector of Connection %s did not stop within %d ms; killing it",
                                rec.name, self.grace_period_ms)
            handle.kill()
            await handle.wait()
        while rec.handle is handle:
            rec.exited.clear()
            if rec.handle is not handle:
                break
            await rec.exited.wait()
