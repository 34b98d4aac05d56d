"""The one supervision loop for every worker kind, and the agent-process supervisor.

:class:`WorkerSupervisor` is the loop itself, the same for agent processes and connector
processes (docs/orchestrator.md "Supervision"): spawn → watch (pump the messages, wait for the
exit) → on exit (crash accounting, sweep of a crashed worker's tool processes, backoff respawn)
→ graceful stop (``shutdown`` message, grace period, SIGKILL). Each worker kind plugs into it
by a few hooks: what to spawn (:meth:`~WorkerSupervisor._spawn_request`), its messages
(:meth:`~WorkerSupervisor._on_message`), its log records, what a clean exit means and whether
work waits for a new process. Its policy comes from :mod:`goondan.swarm.supervision` (one
status table, one crash count and backoff on :class:`~goondan.swarm.supervision.WorkerRecord`).

* A non-zero exit (or a failed spawn) is a crash: ``consecutiveCrashes += 1``; the first
  ``crash_threshold`` (5) respawn at once, then ``min(1 s · 2^(n-6), 300 s)`` in status
  ``crashLoopBackOff``.
* Graceful stop: ``shutdown {gracePeriodMs, reason}`` → drain → exit 0; SIGKILL after the grace
  period.
* Every status change goes through :meth:`WorkerRecord.transition`; waiting for one (a
  spawn to finish, an exit) waits on the record's change notification, not a timer.

:class:`ProcessSupervisor` is the agent kind: one worker per :class:`InstanceRecord`, spawned on
demand, with a reconciliation loop (default every 5 s: respawns what is due, stops processes
whose agent left the configuration), idle release, restarts and ``processes.json``; the
:class:`~goondan.swarm.orchestrator.Orchestrator` subclasses it and adds routing through four
hooks: :meth:`_on_message`, :meth:`_release_in_flight` (a process ended during a Turn),
:meth:`_fail_request` (a queued request can never be answered) and :meth:`_unsendable`.
The connector kind is :class:`~goondan.swarm.connector_supervisor.ConnectorSupervisor`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from goondan.errors import IpcError
from goondan.ipc.control import Shutdown
from goondan.ipc.protocol import ORCHESTRATOR, IpcMessage, ShutdownReason
from goondan.swarm.spawner import AgentHandle, Spawner, SpawnRequest, WorkerExit
from goondan.swarm.supervision import (
    InstanceRecord,
    ReconcilePlan,
    WorkerRecord,
    iso_from_epoch,
    plan_reconcile,
)
from goondan.tools.processes import AGENT_PROCESS_ENV, ORCHESTRATOR_ENV, sweep
from goondan.types import AgentEvent, JsonObject, now_iso
from goondan.workspace.claims import owner_token
from goondan.workspace.files import private_dirs, private_opener

__all__ = ["ProcessSupervisor", "WorkerSupervisor", "pump_messages"]

_log = logging.getLogger("goondan.swarm.orchestrator")
# processes.json is rewritten at most this often (changes in between are coalesced).
STATUS_WRITE_INTERVAL_S = 0.2

K = TypeVar("K")
R = TypeVar("R", bound=WorkerRecord)


async def pump_messages(
    handle: AgentHandle,
    on_message: Callable[[IpcMessage], Awaitable[None]],
    *,
    name: str,
    logger: logging.Logger,
) -> None:
    """Hand every message from ``handle`` to ``on_message`` until the channel closes.

    An undecodable message kills the child (its stream can no longer be trusted); an exception
    in ``on_message`` is a bug of ours and is logged without stopping the pump. Used for agent
    and connector children alike.
    """
    while True:
        try:
            message = await handle.transport.recv()
        except IpcError as err:
            logger.error("bad message from %s: %s; killing it", name, err.message)
            handle.kill()
            return
        if message is None:
            return
        try:
            await on_message(message)
        except Exception:  # a routing bug must not kill the pump of this process
            logger.exception("handling a message from %s failed", name)


class WorkerSupervisor(abc.ABC, Generic[K, R]):
    """The one supervision loop, for workers of one kind (records ``R`` by key ``K``); see the
    module docstring. A subclass says what to spawn and how its messages, log records and
    clean exits go; the loop itself (spawn, watch, exit, crash, respawn, stop) is here only."""

    # A worker that ran this long before crashing starts a new crash count (None: never).
    stable_after_s: float | None = None

    def __init__(self, spawner: Spawner, *, grace_period_ms: int, crash_threshold: int,
                 logger: logging.Logger) -> None:
        self.spawner = spawner
        self.grace_period_ms = grace_period_ms
        self.crash_threshold = crash_threshold
        self.logger = logger
        self.records: dict[K, R] = {}
        self._changed = asyncio.Event()
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()
        # handle -> (its watch task, its pump task), until its exit is booked
        self._watches: dict[AgentHandle, tuple[asyncio.Task[Any], asyncio.Task[Any]]] = {}

    # -- what a worker kind says -------------------------------------------------------------------
    @abc.abstractmethod
    def _spawn_request(self, rec: R) -> SpawnRequest:
        """What to spawn for ``rec``."""

    @abc.abstractmethod
    def _address(self, rec: R) -> str:
        """The ``to`` of a message to ``rec``'s process."""

    @abc.abstractmethod
    def _label(self, rec: R) -> str:
        """``rec`` in log messages."""

    @abc.abstractmethod
    async def _on_message(self, rec: R, handle: AgentHandle, message: IpcMessage) -> None:
        """A message from ``rec``'s process."""

    @abc.abstractmethod
    def _on_spawned(self, rec: R, handle: AgentHandle) -> None:
        """``rec``'s process is up (its messages are pumped, its exit watched)."""

    @abc.abstractmethod
    def _on_crash(self, rec: R, code: int | None, cause: str, delay_ms: int) -> None:
        """``rec`` crashed (``code`` None: it could not be spawned), counted already; log it."""

    @abc.abstractmethod
    def _unsendable(self, rec: R, message: IpcMessage, exc: Exception) -> None:
        """``message`` can never be sent to ``rec``'s process."""

    def _may_run(self, rec: R) -> bool:
        """Whether ``rec`` may have a process (still configured)."""
        return True

    def _on_ended(self, rec: R, ended: WorkerExit) -> None:
        """``rec``'s process is gone, before its status moves (release what it held)."""

    def _on_finished(self, rec: R) -> None:
        """``rec``'s process exited cleanly unasked."""
        rec.transition("exit")

    def _has_work(self, rec: R) -> bool:
        """Work waits for ``rec``: a clean exit is followed by a new process."""
        return False

    def _on_stopped(self, rec: R, reason: ShutdownReason) -> None:
        """A graceful stop of ``rec`` for ``reason`` is complete."""

    # -- tasks and waits ---------------------------------------------------------------------------
    def _spawn_task(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        # A background task's exception would otherwise surface only at garbage collection.
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self.logger.error(
                "orchestrator task failed: %r", exc, extra={"event": "orchestrator.taskFailed"}
            )
            self.logger.debug("orchestrator task traceback", exc_info=exc)

    def _mark_changed(self) -> None:
        self._changed.set()

    async def wait_until(
        self, predicate: Callable[[], bool], timeout: float, *, poll_s: float = 0.02
    ) -> None:
        """Wait until ``predicate()`` holds: re-checked on every state change and every
        ``poll_s`` (for conditions outside the supervisor); raises TimeoutError."""
        async with asyncio.timeout(timeout):
            while not predicate():
                self._changed.clear()
                if predicate():
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(poll_s):
                        await self._changed.wait()

    async def _send(self, rec: R, handle: AgentHandle, message: IpcMessage) -> None:
        try:
            await handle.transport.send(message)
        except IpcError as exc:
            if exc.code != "E_IPC_BAD_MESSAGE":
                self.logger.debug("send to %s failed; the exit handler requeues", self._label(rec))
                return
            self._unsendable(rec, message, exc)
        except Exception as exc:  # never unobserved: a spawned task's error would hang the chat
            self._unsendable(rec, message, exc)

    # -- the loop: spawn, watch, exit, crash, respawn ----------------------------------------------
    def _ensure_running(self, rec: R) -> None:
        if self._stopping or rec.alive or rec.starting or rec.stop_mode is not None:
            return
        if not self._may_run(rec):
            return
        delay = rec.next_spawn_at - time.monotonic()
        if delay > 0:
            rec.schedule_spawn(delay, lambda: self._timer_fired(rec))
            return
        rec.begin_spawn()
        self._spawn_task(self._start(rec))

    def _timer_fired(self, rec: R) -> None:
        rec.spawn_timer_fired()
        self._ensure_running(rec)

    async def _start(self, rec: R) -> None:
        self._mark_changed()
        try:
            handle = await self.spawner.spawn(self._spawn_request(rec))
        except asyncio.CancelledError:  # cancelled with every task: a stop waiting goes on
            rec.transition("exit")
            rec.exited.set()
            self._mark_changed()
            raise
        except Exception as exc:  # cannot even start a process: the same policy as a crash
            self._crashed(rec, None, f"spawning failed: {exc}")
            rec.exited.set()
            self._mark_changed()
            self._ensure_running(rec)
            return
        rec.spawned(handle)  # no longer starting: a stop waiting for the spawn goes on
        pump = self._spawn_task(self._pump(rec, handle))
        watch = self._spawn_task(self._watch(rec, handle, pump))
        self._watches[handle] = (watch, pump)
        watch.add_done_callback(lambda _: rec.notify())  # wakes _booked if it was cancelled
        self._on_spawned(rec, handle)

    async def _pump(self, rec: R, handle: AgentHandle) -> None:
        await pump_messages(handle, lambda message: self._on_message(rec, handle, message),
                            name=self._label(rec), logger=self.logger)

    async def _watch(self, rec: R, handle: AgentHandle, pump: asyncio.Task[Any]) -> None:
        await self._book_exit(rec, handle, pump, await handle.wait())

    async def _booked(self, rec: R, handle: AgentHandle) -> None:
        """Wait until the exit of ``handle`` (it exited) is booked: by its ``_watch`` task, or
        here when that task is gone — cancelled, as ``asyncio.run`` cancels every task at its
        end; nobody else would ever book it."""
        def booked(r: R) -> bool:
            watch = self._watches.get(handle)
            return r.handle is not handle or watch is None or watch[0].done()

        await rec.wait_for(booked)
        if rec.handle is handle:
            pump = self._watches[handle][1] if handle in self._watches else None
            await self._book_exit(rec, handle, pump, await handle.wait())

    async def _book_exit(self, rec: R, handle: AgentHandle, pump: asyncio.Task[Any] | None,
                         ended: WorkerExit) -> None:
        """The exit bookkeeping of ``handle``; whoever comes second finds it done."""
        if pump is not None:
            # Messages written just before the exit (the last answer, turnFinished,
            # connectorError) come first.
            await asyncio.wait([pump], timeout=2.0)
            pump.cancel()
        with contextlib.suppress(Exception):
            await handle.transport.aclose()
        if handle.owns_pid and handle.pid is not None and handle.pid != os.getpid():
            # A crashed (e.g. SIGKILLed) worker could not stop its tools' processes, and one
            # that exited on its own swept them before a last job may have started (during its
            # interpreter's shutdown): whatever still carries its marker goes (usually nothing).
            await asyncio.to_thread(
                sweep, {ORCHESTRATOR_ENV: owner_token(), AGENT_PROCESS_ENV: str(handle.pid)}
            )
        if rec.handle is not handle:
            return
        self._watches.pop(handle, None)
        try:
            self._on_exit(rec, ended)
        except Exception:  # bookkeeping bug: keep supervising the other processes
            self.logger.exception("exit handling of %s failed", self._label(rec))
            rec.ended(ended.status_code)
            rec.exited.set()
            rec.transition("exit")

    def _on_exit(self, rec: R, ended: WorkerExit) -> None:
        rec.ended(ended.status_code)
        expected = rec.stop_mode is not None or self._stopping
        self._on_ended(rec, ended)
        if expected:
            rec.transition("exit")
        elif ended.ok:
            self._on_finished(rec)
        else:
            self._crashed(rec, ended.status_code, rec.crash_cause(ended))
        rec.exited.set()
        self._mark_changed()
        if not ended.ok or self._has_work(rec):
            self._ensure_running(rec)  # at once, or at the end of the backoff

    def _crashed(self, rec: R, code: int | None, cause: str) -> None:
        delay = rec.count_crash(self.crash_threshold, stable_after_s=self.stable_after_s,
                                cause=cause)
        self._on_crash(rec, code, cause, delay)

    # -- graceful stop -----------------------------------------------------------------------------
    async def _stop_record(
        self, rec: R, reason: ShutdownReason, grace_period_ms: int | None
    ) -> None:
        """Graceful stop of one process: shutdown → drain → exit; SIGKILL after grace."""
        rec.cancel_spawn_timer()
        await rec.wait_for(lambda r: not r.starting)  # a spawn in progress finishes, then stops
        handle = rec.handle
        if handle is None:
            return
        if rec.stop_mode is None:
            rec.hold_dispatch(reason)
        rec.transition("drain")
        self._mark_changed()
        grace = self.grace_period_ms if grace_period_ms is None else grace_period_ms
        await self._send(rec, handle, Shutdown(grace, reason).ipc_message(self._address(rec)))
        await self._end(rec, handle, grace)
        self._on_stopped(rec, reason)

    async def _end(self, rec: R, handle: AgentHandle, grace: int) -> None:
        """Wait for the exit of ``handle`` (SIGKILL after ``grace`` ms) and its bookkeeping."""
        try:
            async with asyncio.timeout(grace / 1000):
                await handle.wait()
        except TimeoutError:
            self.logger.warning(
                "%s did not finish within %d ms; killing it", self._label(rec), grace,
                extra={"event": "orchestrator.shutdownTimeout", "worker": self._label(rec)},
            )
            handle.kill()
            await handle.wait()
        await self._booked(rec, handle)

    async def _stop_all(self, reason: ShutdownReason, grace_period_ms: int | None) -> None:
        """Stop every process (gracefully, SIGKILL after the grace period); none respawns."""
        self._stopping = True
        for rec in self.records.values():
            rec.cancel_spawn_timer()
        await asyncio.gather(
            *(
                self._stop_record(rec, reason, grace_period_ms)
                for rec in list(self.records.values())
            ),
            return_exceptions=True,
        )
        await self._wait_all_exited(grace_period_ms)

    async def _wait_all_exited(self, grace_period_ms: int | None = None) -> None:
        """Wait until no process is left (SIGKILL after the grace period): the stop already
        under way may have been cancelled."""
        grace = self.grace_period_ms if grace_period_ms is None else grace_period_ms
        for rec in list(self.records.values()):
            await rec.wait_for(lambda r: not r.starting)
            while (handle := rec.handle) is not None:
                await self._end(rec, handle, grace)

    async def _close_tasks(self) -> None:
        """End the background tasks."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


class ProcessSupervisor(WorkerSupervisor[tuple[str, str], InstanceRecord]):
    """The agent kind: one worker per (agent, instanceKey); see the module docstring."""

    def __init__(
        self,
        spawner: Spawner,
        *,
        swarm_name: str,
        agents: Sequence[str],
        grace_period_ms: int = 30_000,
        reconcile_interval_s: float = 5.0,
        crash_threshold: int = 5,
        ready_timeout_s: float = 60.0,
        status_path: Path | None = None,
        logger: logging.Logger | None = None,
        idle_timeout_ms: int | None = None,
    ) -> None:
        super().__init__(spawner, grace_period_ms=grace_period_ms,
                         crash_threshold=crash_threshold, logger=logger or _log)
        self.idle_timeout_ms = idle_timeout_ms  # policy.idleTimeoutMs (docs/scaling.md)
        self.released = 0  # idle workers released so far
        self.steering: set[str] = set()  # agents whose inputPolicy is steer (docs/orchestrator.md)
        self.swarm_name = swarm_name
        self.agents = list(agents)
        self.reconcile_interval_s = reconcile_interval_s
        self.ready_timeout_s = ready_timeout_s
        self.status_path = status_path
        self._started = False
        self._reconciler: asyncio.Task[None] | None = None
        self._status_writer: asyncio.Task[None] | None = None
        self._status_dirty = asyncio.Event()
        # The final write at shutdown may overlap one the cancelled status loop left running in
        # a worker thread: both use the same temporary file.
        self._status_lock = threading.Lock()
        self.started_at = now_iso()

    # -- hooks of the router -----------------------------------------------------------------------
    @abc.abstractmethod
    def _release_in_flight(self, rec: InstanceRecord, ended: WorkerExit) -> None:
        """``rec``'s process ended with an event in flight: requeue or fail it."""

    @abc.abstractmethod
    def _fail_request(
        self, request: AgentEvent, callee: InstanceRecord, code: str, message: str
    ) -> None:
        """``request`` queued on ``callee`` will never be answered: answer its caller."""

    # -- the agent kind in the supervision loop ----------------------------------------------------
    def _spawn_request(self, rec: InstanceRecord) -> SpawnRequest:
        return SpawnRequest(rec.agent_name, rec.instance_key, workdir=rec.workdir)

    def _address(self, rec: InstanceRecord) -> str:
        return rec.agent_name

    def _label(self, rec: InstanceRecord) -> str:
        return rec.name

    def _may_run(self, rec: InstanceRecord) -> bool:
        return rec.agent_name in self.agents

    def _has_work(self, rec: InstanceRecord) -> bool:
        return bool(rec.queue)

    def _on_spawned(self, rec: InstanceRecord, handle: AgentHandle) -> None:
        self.logger.info("spawned %s (pid %s)", rec.name, handle.pid,
                         extra={"event": "orchestrator.agentSpawned", "agentName": rec.agent_name,
                                "instanceKey": rec.instance_key, "childPid": handle.pid})
        self._spawn_task(self._ready_watchdog(rec, handle, rec.ready_signal))

    def _on_ended(self, rec: InstanceRecord, ended: WorkerExit) -> None:
        if rec.inbox.current is not None:
            self._release_in_flight(rec, ended)

    def _on_crash(self, rec: InstanceRecord, code: int | None, cause: str, delay_ms: int) -> None:
        if code is None:
            self.logger.error(
                "%s: %s", rec.name, cause,
                extra={"event": "orchestrator.spawnFailed", "agentName": rec.agent_name},
            )
        self.logger.warning(
            "%s crashed (exit %s, %d in a row)", rec.name, code, rec.consecutive_crashes,
            extra={"event": "orchestrator.agentCrashed", "agentName": rec.agent_name,
                   "instanceKey": rec.instance_key, "exitCode": code,
                   "consecutiveCrashes": rec.consecutive_crashes},
        )
        if delay_ms > 0:
            self.logger.warning(
                "%s is in crashLoopBackOff for %d ms", rec.name, delay_ms,
                extra={
                    "event": "orchestrator.crashLoopBackOff",
                    "swarmName": self.swarm_name,
                    "agentName": rec.agent_name,
                    "instanceKey": rec.instance_key,
                    "consecutiveCrashes": rec.consecutive_crashes,
                    "crashThreshold": self.crash_threshold,
                    "backoffMs": delay_ms,
                    "nextSpawnAllowedAt": iso_from_epoch(time.time() + delay_ms / 1000),
                },
            )

    def _on_stopped(self, rec: InstanceRecord, reason: ShutdownReason) -> None:
        if reason == "config_change" and rec.agent_name not in self.agents and not rec.queue:
            self.records.pop(rec.key, None)

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the reconciliation loop (and the status file writer). Idempotent."""
        if self._started:
            return
        self._started = True
        if self.reconcile_interval_s > 0:
            self._reconciler = asyncio.ensure_future(self._reconcile_loop())
        if self.status_path is not None:
            self._status_writer = asyncio.ensure_future(self._status_loop())
            self._mark_changed()

    async def _stop_all(self, reason: ShutdownReason, grace_period_ms: int | None) -> None:
        """Stop the loops and every process (gracefully, SIGKILL after the grace period)."""
        if self._reconciler is not None:
            self._reconciler.cancel()
        await super()._stop_all(reason, grace_period_ms)
        # Whatever the agents' tools left (kept background jobs of killed processes, say).
        await asyncio.to_thread(sweep, {ORCHESTRATOR_ENV: owner_token()})

    async def _close_tasks(self) -> None:
        """Write the status file a last time and end the background tasks."""
        if self._status_writer is not None:
            self._status_writer.cancel()
            await asyncio.wait([self._status_writer])  # a cancellation of ours propagates
            await asyncio.to_thread(self._write_status)
        await super()._close_tasks()

    def _mark_changed(self) -> None:
        super()._mark_changed()
        self._status_dirty.set()

    def record(
        self, agent: str, instance_key: str, *, owner: tuple[str, str] | None = None,
        workdir: str | None = None,
    ) -> InstanceRecord:
        """The record of (agent, key), created (not started) if needed; ``owner`` and
        ``workdir`` are those of a new record (``agents__spawn``)."""
        key = (agent, instance_key)
        rec = self.records.get(key)
        if rec is None:
            rec = InstanceRecord(agent, instance_key, workdir=workdir, owner=owner)
            rec.inbox.steer = lambda: agent in self.steering
            self.records[key] = rec
        return rec

    def snapshot(self) -> list[JsonObject]:
        """One row per known (agent, instanceKey)."""
        return [rec.to_dict() for rec in sorted(self.records.values(), key=lambda r: r.key)]

    async def deliver_now(self, agent: str, event: AgentEvent, *, timeout_s: float = 60.0) -> bool:
        """Send ``event`` to the process of (agent, ``event.instance_key``) beside its queue,
        starting it if needed (an approval decision: the queue may hold input that waits for
        the parked turn, docs/approvals.md). False when the process did not become ready."""
        rec = self.record(agent, event.instance_key or "default")
        deadline = time.monotonic() + timeout_s
        while rec.handle is None or not rec.ready:
            if self._stopping or time.monotonic() > deadline:
                return False
            self._ensure_running(rec)
            await asyncio.sleep(0.05)
        await self._send(rec, rec.handle, IpcMessage.event(ORCHESTRATOR, rec.agent_name, event))
        return True

    async def _ready_watchdog(
        self, rec: InstanceRecord, handle: AgentHandle, signal: asyncio.Event
    ) -> None:
        """Kill a process that does not report ``ready`` in time (``signal`` is set by its
        ``ready`` report or its exit)."""
        try:
            async with asyncio.timeout(self.ready_timeout_s):
                await signal.wait()
        except TimeoutError:
            if rec.handle is handle:
                self.logger.error(
                    "%s not ready after %.0f s; killing it", rec.name, self.ready_timeout_s
                )
                handle.kill()

    # -- idle release (docs/scaling.md "Idle instances") -------------------------------------------
    def _is_idle(self, rec: InstanceRecord) -> bool:
        return (rec.status == "idle" and not rec.queue and rec.inbox.current is None
                and rec.stop_mode is None and not self._stopping)

    def _arm_idle(self, rec: InstanceRecord) -> None:
        """(Re)start ``rec``'s idle timer: after ``idle_timeout_ms`` without work it is released."""
        if self.idle_timeout_ms and self._is_idle(rec):
            rec.arm_idle_timer(self.idle_timeout_ms / 1000, lambda: self._idle_fired(rec))
        else:
            rec.stop_idle_timer()

    def _idle_fired(self, rec: InstanceRecord) -> None:
        rec.stop_idle_timer()
        if self._is_idle(rec):
            self._spawn_task(self._release_idle(rec))

    async def _release_idle(self, rec: InstanceRecord) -> None:
        """Stop an idle worker gracefully (its instance is folded and closed); the next event
        for it spawns a new one, which re-opens the instance from disk."""
        self.logger.info("%s idle; releasing it", rec.name,
                         extra={"event": "orchestrator.idleRelease", "agentName": rec.agent_name,
                                "instanceKey": rec.instance_key})
        rec.hold_dispatch("idle")
        try:
            await self._stop_record(rec, "idle", None)
        finally:
            rec.resume_dispatch()
            self.released += 1
            if rec.queue:  # events that arrived during the stop
                self._ensure_running(rec)

    async def _restart_record(self, rec: InstanceRecord, reason: str) -> None:
        """Gracefully replace one agent process (its conversation and queue are kept)."""
        self.logger.info(
            "%s restarts at its own request (%s)",
            rec.name,
            reason or "no reason given",
            extra={
                "event": "orchestrator.selfRestart",
                "agentName": rec.agent_name,
                "instanceKey": rec.instance_key,
            },
        )
        rec.hold_dispatch("restart")
        try:
            await self._stop_record(rec, "restart", None)
        finally:
            rec.resume_dispatch()
            rec.reset_crashes()
            self._ensure_running(rec)

    # -- reconciliation ----------------------------------------------------------------------------
    async def reconcile(self) -> ReconcilePlan:
        """One reconciliation pass; returns the plan it applied."""
        plan = plan_reconcile(self.agents, list(self.records.values()), time.monotonic())
        for key in plan.to_terminate:
            rec = self.records[key]
            for event in rec.inbox.clear():
                self._fail_request(event, rec, "E_AGENT_NOT_FOUND",
                                   f"agent {rec.agent_name} was removed from the configuration")
            self._spawn_task(self._stop_record(rec, "config_change", None))
        for agent, instance_key, _ in plan.to_respawn:
            self._ensure_running(self.records[(agent, instance_key)])
        for ident in plan.to_spawn:
            self._ensure_running(self.records[ident])
        return plan

    async def _reconcile_loop(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.reconcile_interval_s)
            try:
                await self.reconcile()
            except Exception:
                self.logger.exception("reconciliation failed")

    # -- status file -------------------------------------------------------------------------------
    def status_document(self) -> JsonObject:
        """``processes.json``: the orchestrator and every agent process."""
        return {
            "orchestrator": {
                "pid": os.getpid(),
                "startedAt": self.started_at,
                "swarm": self.swarm_name,
            },
            "updatedAt": now_iso(),
            "processes": self.snapshot(),
        }

    def _write_status(self) -> None:
        path = self.status_path
        if path is None:
            return
        with self._status_lock:
            private_dirs(path.parent)
            tmp = path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8", opener=private_opener) as handle:
                handle.write(json.dumps(self.status_document(), indent=2))
            os.replace(tmp, path)

    async def _status_loop(self) -> None:
        while True:
            await self._status_dirty.wait()
            self._status_dirty.clear()
            try:
                await asyncio.to_thread(self._write_status)
            except OSError as exc:
                self.logger.warning("cannot write %s: %s", self.status_path, exc)
            await asyncio.sleep(STATUS_WRITE_INTERVAL_S)  # coalesce the changes of a burst
