"""Supervision state: worker records, crash backoff, reconciliation plans (docs/orchestrator.md
"Supervision").

Pure data and pure functions, so the policy is testable without processes. Every worker kind
has a :class:`WorkerRecord`: agent instances an :class:`InstanceRecord`, Connections a
:class:`~goondan.swarm.connector_supervisor.ConnectorRecord`; both are applied by the one
supervision loop, :class:`~goondan.swarm.supervisor.WorkerSupervisor`. A record's ``status`` is
the one status of its process; :data:`TRANSITIONS` is the one table of what moves it, for every
worker kind, :meth:`WorkerRecord.transition` the only place it changes and
:meth:`WorkerRecord.count_crash` the one crash count and backoff. A record's fields change only
through its methods.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal, Self

from goondan.ipc.logs import process_name
from goondan.ipc.protocol import ShutdownReason
from goondan.swarm.instance_queue import InstanceQueue
from goondan.swarm.spawner import AgentHandle, WorkerExit
from goondan.types import AgentEvent, JsonObject, now_iso

__all__ = [
    "TRANSITIONS",
    "InstanceRecord",
    "ProcessStatus",
    "ReconcilePlan",
    "Trigger",
    "WorkerRecord",
    "backoff_ms",
    "iso_from_epoch",
    "next_status",
    "plan_reconcile",
]

ProcessStatus = Literal[
    "pending", "spawning", "idle", "running", "processing", "draining", "completed",
    "terminated", "crashed", "crashLoopBackOff",
]
# What moves a process between statuses (docs/orchestrator.md "Supervision"). Agent processes
# report ``ready`` and then take turns; a connector process reports ``run`` (its ``run(ctx)``
# started: it listens) and ``done`` (``run`` returned: its work is finished).
Trigger = Literal[
    "spawn",
    "ready",
    "turnStarted",
    "turnFinished",
    "run",
    "done",
    "drain",
    "exit",
    "crash",
    "backoff",
]
_ALIVE: Final = ("spawning", "idle", "running", "processing", "draining")
_DOWN: Final = ("pending", "completed", "terminated", "crashed", "crashLoopBackOff")
# (status, trigger) → next status, for every worker kind. A pair not in the table leaves the
# status as it is: a report that arrives late (``ready`` after ``shutdown`` was sent) must not
# undo a drain.
TRANSITIONS: Final[dict[tuple[ProcessStatus, Trigger], ProcessStatus]] = {
    **{(s, "spawn"): "spawning" for s in _DOWN},
    ("spawning", "ready"): "idle",
    ("idle", "turnStarted"): "processing",
    ("processing", "turnFinished"): "idle",
    ("spawning", "run"): "running",
    **{(s, "done"): "completed" for s in _ALIVE},
    **{(s, "drain"): "draining" for s in _ALIVE},
    **{(s, "exit"): "terminated" for s in (*_ALIVE, *_DOWN)},
    **{(s, "crash"): "crashed" for s in (*_ALIVE, *_DOWN)},
    **{(s, "backoff"): "crashLoopBackOff" for s in (*_ALIVE, *_DOWN)},
}


def next_status(status: ProcessStatus, trigger: Trigger) -> ProcessStatus:
    """The status after ``trigger`` (pure; see :data:`TRANSITIONS`)."""
    return TRANSITIONS.get((status, trigger), status)


def backoff_ms(consecutive_crashes: int, threshold: int = 5, cap_ms: int = 300_000) -> int:
    """Crashes 1..threshold respawn at once, then 1 s, 2 s, 4 s … capped at 300 s."""
    if consecutive_crashes <= threshold:
        return 0
    return int(min(1000 * 2 ** (consecutive_crashes - threshold - 1), cap_ms))


def iso_from_epoch(epoch: float) -> str:
    """Epoch seconds as ISO-8601 UTC with milliseconds."""
    return (
        datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


@dataclass(kw_only=True)
class WorkerRecord:
    """What every supervised worker has, whatever its kind: one ``status`` that only
    :meth:`transition` changes, its process handle, crash counts (:meth:`count_crash`), the
    respawn after a backoff, the hold of a stop under way and an ``exited`` event per process."""

    status: ProcessStatus = "terminated"
    handle: AgentHandle | None = None
    consecutive_crashes: int = 0
    total_crashes: int = 0
    spawn_count: int = 0
    last_exit_code: int | None = None
    last_error: str | None = None  # the cause of the last crash (``status`` shows it)
    crash_looping: bool = False  # the last crash was over the threshold (a backoff applied)
    started_at: str | None = None
    started_monotonic: float | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    stop_mode: ShutdownReason | None = None  # set: a stop or restart is under way (no respawn)
    next_spawn_at: float = 0.0  # time.monotonic(): the end of the backoff
    _timer: asyncio.TimerHandle | None = None  # the respawn after a backoff
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def alive(self) -> bool:
        return self.handle is not None

    @property
    def starting(self) -> bool:
        """A spawn is under way (no handle yet)."""
        return self.status == "spawning" and self.handle is None

    def transition(self, trigger: Trigger) -> ProcessStatus:
        """The one place the status changes (:data:`TRANSITIONS`); wakes :meth:`wait_for`."""
        self.status = next_status(self.status, trigger)
        self.notify()
        return self.status

    def begin_spawn(self) -> None:
        """A new process is being started: ``spawning``, its exit not seen yet."""
        self.exited.clear()
        self.transition("spawn")

    def spawned(self, handle: AgentHandle) -> None:
        """The process is up (no longer starting): keep its handle; wakes :meth:`wait_for`."""
        self.handle = handle
        self.spawn_count += 1
        self.started_at, self.started_monotonic = handle.started_at, handle.started_monotonic
        self.notify()

    def ended(self, exit_code: int | None) -> None:
        """The process is gone (its status moves by the trigger the supervisor chooses)."""
        self.handle = None
        self.last_exit_code = exit_code

    def reset_crashes(self) -> None:
        """A fresh start (a restart, a new spec): the crash count and last error start over."""
        self.consecutive_crashes = 0
        self.crash_looping = False
        self.last_error = None
        self.next_spawn_at = 0.0

    def crash_cause(self, ended: WorkerExit | None) -> str:
        """Why the process crashed (``None``: it could not be spawned)."""
        code = ended.status_code if ended is not None else None
        return f"exited with code {code}" if code is None or code >= 0 else (
            f"killed by signal {-code}")

    def count_crash(self, threshold: int, *, stable_after_s: float | None = None,
                    cause: str | None = None) -> int:
        """Count one crash (``cause``: why, kept as :attr:`last_error`) and move to ``crashed``
        (respawn at once) or ``crashLoopBackOff``; returns the backoff in ms
        (:func:`backoff_ms`). A worker that had run longer than ``stable_after_s`` before this
        crash starts a new count."""
        if (stable_after_s is not None and self.started_monotonic
                and time.monotonic() - self.started_monotonic > stable_after_s):
            self.consecutive_crashes = 0
        self.consecutive_crashes += 1
        self.total_crashes += 1
        if cause is not None:
            self.last_error = cause
        delay = backoff_ms(self.consecutive_crashes, threshold)
        self.crash_looping = delay > 0
        self.next_spawn_at = time.monotonic() + delay / 1000
        self.transition("backoff" if delay > 0 else "crash")
        return delay

    def hold_dispatch(self, reason: ShutdownReason) -> None:
        """A stop or restart for ``reason`` is under way: the worker is not respawned (and an
        agent is sent nothing)."""
        self.stop_mode = reason

    def resume_dispatch(self) -> None:
        self.stop_mode = None

    def schedule_spawn(self, delay_s: float, callback: Callable[[], object]) -> None:
        """Call ``callback`` after ``delay_s`` (the end of a backoff), unless one is pending."""
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(delay_s, callback)

    def spawn_timer_fired(self) -> None:
        self._timer = None

    def cancel_spawn_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def shown_status(self, stable_after_s: float | None = None) -> ProcessStatus:
        """The status ``status`` shows: ``crashLoopBackOff`` while the worker is crash-looping —
        also while its next attempt starts and runs, so one that keeps failing never looks
        ``running``/``idle`` between its crashes — until the count starts over (a finished
        turn, a restart) or it has run for ``stable_after_s``."""
        stable = (
            stable_after_s is not None
            and self.handle is not None
            and self.started_monotonic is not None
            and time.monotonic() - self.started_monotonic > stable_after_s
        )
        if self.crash_looping and not stable and self.status not in ("completed", "terminated"):
            return "crashLoopBackOff"
        return self.status

    def notify(self) -> None:
        """Wake the waiters of :meth:`wait_for` (the record changed)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, predicate: Callable[[Self], bool]) -> None:
        """Wait until ``predicate(self)`` holds, re-checked on every :meth:`notify`."""
        while not predicate(self):
            await self._changed.wait()


@dataclass
class InstanceRecord(WorkerRecord):
    """Supervision state of one (agent, instanceKey): its :class:`InstanceQueue`, its process
    and one ``status`` that only :meth:`transition` changes."""

    agent_name: str
    instance_key: str
    workdir: str | None = None
    owner: tuple[str, str] | None = None
    created_at: str = field(default_factory=now_iso)
    inbox: InstanceQueue = field(default_factory=InstanceQueue)
    processed: int = 0
    ready_signal: asyncio.Event = field(default_factory=asyncio.Event)  # per process: ready or gone
    # A started Turn whose process died, and how it exited (goondan/swarm/resumes.py).
    interrupted: tuple[AgentEvent, str] | None = None
    _idle_timer: asyncio.TimerHandle | None = None  # policy.idleTimeoutMs (docs/scaling.md)

    @property
    def key(self) -> tuple[str, str]:
        return (self.agent_name, self.instance_key)

    @property
    def name(self) -> str:
        return process_name(self.agent_name, self.instance_key)

    @property
    def ready(self) -> bool:
        """The process reported ``ready`` and is not draining: events may be sent."""
        return self.handle is not None and self.status in ("idle", "processing")

    @property
    def queue(self) -> deque[AgentEvent]:
        """The events waiting behind the one in flight."""
        return self.inbox.waiting

    @property
    def in_flight(self) -> AgentEvent | None:
        """The event sent to the process whose ``turnFinished`` has not arrived."""
        return self.inbox.current.event if self.inbox.current is not None else None

    @property
    def cancel_requested(self) -> str | None:
        """Id of the in-flight event a ``runtime.cancel`` was sent for."""
        current = self.inbox.current
        return current.event.id if current is not None and current.cancel_requested else None

    # -- what the supervisor and the router tell the record (its fields change only here) ----------
    def hold_interrupted(self, event: AgentEvent, how: str) -> None:
        """The process died during ``event``'s started Turn (it exited ``how``): held until the
        next process is ready (goondan/swarm/resumes.py)."""
        self.interrupted = (event, how)

    def take_interrupted(self) -> tuple[AgentEvent, str] | None:
        """The held Turn, if any; the record no longer holds it."""
        held, self.interrupted = self.interrupted, None
        return held

    def begin_spawn(self) -> None:
        super().begin_spawn()
        self.ready_signal = asyncio.Event()

    def ended(self, exit_code: int | None) -> None:
        super().ended(exit_code)
        self.ready_signal.set()

    def turn_finished(self, steered: Collection[str] | None = None) -> None:
        """The turn in flight finished (``steered``: the ids of the steered inputs it took): it
        leaves the queue, the crash count starts over."""
        self.inbox.finish(steered)
        self.consecutive_crashes = 0  # docs/orchestrator.md "Supervision"
        self.crash_looping = False
        self.processed += 1
        self.transition("turnFinished")

    def arm_idle_timer(self, delay_s: float, callback: Callable[[], object]) -> None:
        """(Re)start the idle timer: ``callback`` after ``delay_s`` without work."""
        self.stop_idle_timer()
        self._idle_timer = asyncio.get_running_loop().call_later(delay_s, callback)

    def stop_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def __repr__(self) -> str:
        return (
            f"<InstanceRecord {self.agent_name}@{self.instance_key} {self.status} "
            f"queued={len(self.queue)} crashes={self.consecutive_crashes}>"
        )

    def to_dict(self) -> JsonObject:
        """Row of ``processes.json`` / ``instance list``."""
        handle = self.handle
        return {
            "process": self.name,
            "agentName": self.agent_name,
            "instanceKey": self.instance_key,
            "status": self.shown_status(),
            "pid": handle.pid if handle is not None else None,
            "startedAt": self.started_at if handle is not None else None,
            "queued": len(self.inbox),
            "processed": self.processed,
            "consecutiveCrashes": self.consecutive_crashes,
            "restarts": max(0, self.spawn_count - 1),
            "lastExitCode": self.last_exit_code,
            "lastError": self.last_error,
        }


@dataclass
class ReconcilePlan:
    """``{toSpawn, toTerminate, toRespawn}`` of one reconciliation pass (docs/orchestrator.md
    "Supervision")."""

    to_spawn: list[tuple[str, str]] = field(default_factory=list)
    to_terminate: list[tuple[str, str]] = field(default_factory=list)
    to_respawn: list[tuple[str, str, int]] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        return {
            "toSpawn": [{"agentName": a, "instanceKey": k} for a, k in self.to_spawn],
            "toTerminate": [
                {"agentName": a, "instanceKey": k, "reason": "config_change"}
                for a, k in self.to_terminate
            ],
            "toRespawn": [
                {"agentName": a, "instanceKey": k, "backoffMs": b} for a, k, b in self.to_respawn
            ],
        }


def plan_reconcile(
    desired_agents: Iterable[str], records: Iterable[InstanceRecord], now: float
) -> ReconcilePlan:
    """Compare desired and actual state (pure). Agents are on demand, so nothing is spawned
    eagerly: records with queued work and no process are spawned, processes of agents no longer
    configured are terminated, crashed ones are respawned once their backoff has passed."""
    desired = set(desired_agents)
    plan = ReconcilePlan()
    for rec in records:
        if rec.agent_name not in desired:
            if rec.alive or rec.queue:
                plan.to_terminate.append(rec.key)
            continue
        if rec.alive or rec.starting:
            continue
        if rec.status in ("crashed", "crashLoopBackOff"):
            wait = max(0, int((rec.next_spawn_at - now) * 1000))
            if wait == 0:
                plan.to_respawn.append((rec.agent_name, rec.instance_key, 0))
        elif rec.queue:
            plan.to_spawn.append(rec.key)
    return plan
