"""The connector kind of supervised worker: one process per Connection.

:class:`ConnectorSupervisor` is the one supervision loop of agent processes
(:class:`~goondan.swarm.supervisor.WorkerSupervisor`: spawn, watch, crash count and backoff,
graceful stop; docs/orchestrator.md "Supervision"), through the same
:class:`~goondan.swarm.spawner.Spawner`, on the same record base
(:class:`~goondan.swarm.supervision.WorkerRecord`: one status moved only by the one
:data:`~goondan.swarm.supervision.TRANSITIONS` table, one crash count and backoff). What is the
connector's own:

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
* :meth:`ConnectorSupervisor.shutdown` sends ``shutdown`` to every process (``draining``),
  waits up to the grace period and SIGKILLs what is left;
* ``goondan run --watch`` changes the set while it runs: :meth:`~ConnectorSupervisor.add`
  starts a new Connection's process, :meth:`~ConnectorSupervisor.replace` stops one the same
  way (reason ``config_change``) and starts it again with the new spec and a fresh crash count,
  :meth:`~ConnectorSupervisor.remove` stops one for good.

Messages from a connector process are never taken for an agent's: ``runtime.emit`` goes to
:meth:`Ingress.accept` and is answered with ``runtime.answer``; one with ``answer: true``
(``ctx.ask``) is answered when its Turn ended, its progress sent as ``runtime.delta`` and a
``runtime.cancel`` of its event id cancels it (:mod:`goondan.connectors.asking`);
``runtime.approvalDecided`` goes to :attr:`ConnectorSupervisor.approvals` (an
:class:`~goondan.swarm.approval_relay.ApprovalRelay`), which also announces approvals through
:meth:`ConnectorSupervisor.send_approval`; other reports update the status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from goondan.connectors.asking import TurnAnswer
from goondan.connectors.event import ConnectorEvent
from goondan.connectors.spec import ConnectionSpec
from goondan.errors import ConnectorEventError, GoondanError, IpcError
from goondan.ipc.control import (
    Answer,
    ApprovalDecided,
    ApprovalRequested,
    Cancel,
    Completed,
    ConnectorError,
    Delta,
    Emit,
    Ready,
    StartError,
    decode_control,
)
from goondan.ipc.protocol import ORCHESTRATOR, IpcMessage
from goondan.swarm.asking import ask_ingress
from goondan.swarm.ingress import Ingress
from goondan.swarm.spawner import AgentHandle, Spawner, SpawnRequest, WorkerExit
from goondan.swarm.supervision import ProcessStatus, WorkerRecord
from goondan.swarm.supervisor import WorkerSupervisor
from goondan.types import AgentEvent, JsonObject

__all__ = ["STABLE_AFTER_S", "ConnectorRecord", "ConnectorSupervisor"]

_log = logging.getLogger("goondan.connectors")

# A connector that ran this long before crashing starts a new crash count.
STABLE_AFTER_S = 60.0


@dataclass
class ConnectorRecord(WorkerRecord):
    """Supervision state of one Connection's connector process: pending → spawning → running
    (→ completed) or crashed / crashLoopBackOff, draining → terminated (:data:`TRANSITIONS`)."""

    spec: ConnectionSpec
    status: ProcessStatus = field(default="pending", kw_only=True)
    emitted: int = 0
    reported_error: str | None = None  # what this process reported (startError / connectorError)

    @property
    def name(self) -> str:
        return self.spec.name

    # -- what the supervisor tells the record (its fields change only here) -----------------------
    def begin_spawn(self) -> None:
        super().begin_spawn()
        self.reported_error = None  # a new process: what the last one reported is history

    def report_error(self, message: str) -> None:
        """The process reported why it fails (``runtime.startError`` / ``connectorError``)."""
        self.reported_error = message

    def crash_cause(self, ended: WorkerExit | None) -> str:
        if ended is None:
            return super().crash_cause(ended)
        return self.reported_error or ended.describe()

    def count_emit(self, *, new: bool) -> None:
        """An emitted event was accepted (``new``: neither a duplicate nor dropped)."""
        self.emitted += 1 if new else 0

    def respec(self, spec: ConnectionSpec) -> None:
        """A reloaded bundle changed the Connection: a fresh start with ``spec``."""
        self.spec = spec
        self.reset_crashes()
        self.reported_error = None

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


class ConnectorSupervisor(WorkerSupervisor[str, ConnectorRecord]):
    """Starts and supervises the connector process of each Connection (module docstring)."""

    stable_after_s = STABLE_AFTER_S

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
        super().__init__(spawner, grace_period_ms=grace_period_ms,
                         crash_threshold=crash_threshold, logger=logger or _log)
        self.ingress = ingress
        self.records = {c.name: ConnectorRecord(c) for c in connections}
        # (connection, event id) -> its Turn
        self._asks: dict[tuple[str, str], asyncio.Task[Any]] = {}
        # stores a connector's approval decisions (goondan.swarm.approval_relay), when set
        self.approvals: Any = None

    def __repr__(self) -> str:
        live = sum(1 for r in self.records.values() if r.handle is not None)
        return (
            f"<ConnectorSupervisor connections={len(self.records)} "
            f"live={live} stopping={self._stopping}>"
        )

    def start(self) -> None:
        """Start every Connection's process."""
        for rec in self.records.values():
            self._ensure_running(rec)

    def snapshot(self) -> list[JsonObject]:
        """One status row per Connection."""
        return [rec.to_dict() for rec in self.records.values()]

    # -- the connector kind in the supervision loop ------------------------------------------------
    def _spawn_request(self, rec: ConnectorRecord) -> SpawnRequest:
        return SpawnRequest.connector(rec.spec.name, rec.spec.connector)

    def _address(self, rec: ConnectorRecord) -> str:
        return rec.name

    def _label(self, rec: ConnectorRecord) -> str:
        return f"connection {rec.name}"

    def _on_spawned(self, rec: ConnectorRecord, handle: AgentHandle) -> None:
        self.logger.info(
            "started connector %s of Connection %s (pid %s)",
            rec.spec.connector,
            rec.name,
            handle.pid,
            extra={"event": "connector.spawned", "connection": rec.name, "childPid": handle.pid},
        )

    def _on_finished(self, rec: ConnectorRecord) -> None:
        rec.transition("done")
        self.logger.info(
            "connector of Connection %s finished (run returned); not restarted",
            rec.name,
            extra={"event": "connector.completed", "connection": rec.name},
        )

    def _on_crash(self, rec: ConnectorRecord, code: int | None, cause: str, delay_ms: int) -> None:
        self.logger.error(
            "[E_CONNECTOR] Connection %s (connector %s) "
            "failed: %s; restarting in %d ms (%d in a row)",
            rec.name,
            rec.spec.connector,
            cause,
            delay_ms,
            rec.consecutive_crashes,
            extra={
                "event": "connector.crashed",
                "code": "E_CONNECTOR",
                "connection": rec.name,
                "connector": rec.spec.connector,
                "exitCode": code,
                "backoffMs": delay_ms,
                "consecutiveCrashes": rec.consecutive_crashes,
            },
        )

    def _unsendable(self, rec: ConnectorRecord, message: IpcMessage, exc: Exception) -> None:
        self.logger.error("cannot send a %s message to connection %s: %s",
                          message.type, rec.name, exc,
                          extra={"event": "connector.sendFailed", "connection": rec.name})

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
        elif isinstance(control, Emit) and event.reply_to is not None:
            await self._answer_emit(rec, handle, event)
        elif isinstance(control, ApprovalDecided) and event.reply_to is not None:
            self._spawn_task(
                self._answer_decision(rec, handle, event.reply_to.correlation_id, control)
            )
        elif isinstance(control, Cancel):
            task = self._asks.get((rec.name, control.event_id))
            if task is not None:
                task.cancel()
        elif isinstance(control, Ready):
            rec.transition("run")
        elif isinstance(control, (StartError, ConnectorError)):
            rec.report_error(str(control.message))
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
            rec.count_emit(new=not (receipt.duplicate or receipt.dropped))
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
        self._spawn_task(self._send_answer(rec, handle, answer))

    def _start_ask(self, rec: ConnectorRecord, handle: AgentHandle, correlation: str, raw: Any,
                   agent: str | None, wait_for_approval: bool = False) -> None:
        try:
            event = ConnectorEvent.from_dict(raw)
        except ConnectorEventError as err:
            self._spawn_task(self._send_answer(rec, handle, Answer(
                correlation, error={"code": err.code, "message": err.message})))
            return
        key = (rec.name, event.id)
        task = self._spawn_task(
            self._answer_ask(rec, handle, correlation, event, agent, wait_for_approval))
        self._asks[key] = task
        task.add_done_callback(
            lambda done: self._asks.pop(key, None) if self._asks.get(key) is done else None
        )

    async def _answer_ask(self, rec: ConnectorRecord, handle: AgentHandle, correlation: str,
                          event: ConnectorEvent, agent: str | None,
                          wait_for_approval: bool = False) -> None:
        def progress(payload: JsonObject) -> None:
            self._spawn_task(self._send_answer(rec, handle, Delta(event.id, payload)))

        answer: Answer
        try:
            result: TurnAnswer = await ask_ingress(self.ingress, rec.name, event, agent=agent,
                                                   on_progress=progress,
                                                   wait_for_approval=wait_for_approval)
            receipt = result.receipt
            rec.count_emit(new=not (receipt.duplicate or receipt.dropped))
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
        self._spawn_task(self._send_answer(rec, handle, answer))

    async def _answer_decision(self, rec: ConnectorRecord, handle: AgentHandle,
                               correlation: str, decision: ApprovalDecided) -> None:
        answer: Answer
        if self.approvals is None:
            answer = Answer(correlation, error={"code": "E_APPROVAL_FORBIDDEN",
                                                "message": "this swarm takes no decisions here"})
        else:
            try:
                answer = Answer(correlation, result=await self.approvals.decide(rec.name, decision))
            except GoondanError as err:
                self.logger.warning("connection %s: approval decision refused: %s", rec.name,
                                    err.message, extra={"event": "connector.approvalRefused",
                                                        "connection": rec.name})
                answer = Answer(correlation, error={"code": err.code, "message": err.message})
        await self._send_answer(rec, handle, answer)

    async def send_approval(self, connection: str, message: ApprovalRequested) -> bool:
        """Tell ``connection``'s connector process to announce an approval; False when it has
        no live process."""
        rec = self.records.get(connection)
        handle = rec.handle if rec is not None else None
        if rec is None or handle is None:
            return False
        try:
            await handle.transport.send(
                message.ipc_message(sender=ORCHESTRATOR, to=rec.name, instance_key=rec.name))
        except IpcError:
            return False
        return True

    async def _send_answer(
        self, rec: ConnectorRecord, handle: AgentHandle, answer: Answer | Delta
    ) -> None:
        await self._send(rec, handle, answer.ipc_message(
            sender=ORCHESTRATOR, to=rec.name, instance_key=rec.name))

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
        rec.respec(spec)
        self._ensure_running(rec)

    async def remove(self, name: str) -> None:
        """Stop the Connection's process for good (it left the bundle)."""
        rec = self.records.get(name)
        if rec is not None:
            await self._stop_for_change(rec)
            del self.records[name]

    async def _stop_for_change(self, rec: ConnectorRecord) -> None:
        rec.hold_dispatch("config_change")  # stopped for a change: neither a crash nor completed
        try:
            await self._stop_record(rec, "config_change", None)
        finally:
            rec.resume_dispatch()

    async def shutdown(self) -> None:
        """Stop every connector: ``shutdown`` → cancel ``run`` → exit; SIGKILL after the grace."""
        await self._stop_all("orchestrator_shutdown", None)
        await self._close_tasks()
