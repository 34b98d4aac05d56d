"""Supervision state: per-instance records, crash backoff, reconciliation plans (docs/orchestrator.md "Supervision").

Pure data and pure functions, so the policy is testable without processes; the
:class:`~goondan.ipc.supervisor.ProcessSupervisor` applies it. A record's ``status`` is the one
status of its process; :data:`TRANSITIONS` is the table of what moves it, and
:meth:`InstanceRecord.transition` is the only place it changes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal

from goondan.ipc.instance_queue import InstanceQueue
from goondan.ipc.protocol import ShutdownReason
from goondan.ipc.spawner import AgentHandle, process_name
from goondan.types import AgentEvent, JsonObject, now_iso

__all__ = [
    "TRANSITIONS",
    "InstanceRecord",
    "ProcessStatus",
    "ReconcilePlan",
    "Trigger",
    "backoff_ms",
    "iso_from_epoch",
    "next_status",
    "plan_reconcile",
]

ProcessStatus = Literal[
    "spawning", "idle", "processing", "draining", "terminated", "crashed", "crashLoopBackOff"
]
# What moves a process between statuses (docs/orchestrator.md "Supervision").
Trigger = Literal[
    "spawn", "ready", "turnStarted", "turnFinished", "drain", "exit", "crash", "backoff"
]
_ALIVE: Final = ("spawning", "idle", "processing", "draining")
_DOWN: Final = ("terminated", "crashed", "crashLoopBackOff")
# (status, trigger) → next status. A pair not in the table leaves the status as it is: a
# report that arrives late (``ready`` after ``shutdown`` was sent) must not undo a drain.
TRANSITIONS: Final[dict[tuple[ProcessStatus, Trigger], ProcessStatus]] = {
    **{(s, "spawn"): "spawning" for s in _DOWN},
    ("spawning", "ready"): "idle",
    ("idle", "turnStarted"): "processing",
    ("processing", "turnFinished"): "idle",
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
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class InstanceRecord:
    """Supervision state of one (agent, instanceKey): its :class:`InstanceQueue`, its process
    and one ``status`` that only :meth:`transition` changes."""

    agent_name: str
    instance_key: str
    workdir: str | None = None
    owner: tuple[str, str] | None = None
    created_at: str = field(default_factory=now_iso)
    status: ProcessStatus = "terminated"
    handle: AgentHandle | None = None
    inbox: InstanceQueue = field(default_factory=InstanceQueue)
    stop_mode: ShutdownReason | None = None  # set: hold dispatch (a stop or restart is under way)
    consecutive_crashes: int = 0
    total_crashes: int = 0
    spawn_count: int = 0
    processed: int = 0
    next_spawn_at: float = 0.0  # time.monotonic()
    last_exit_code: int | None = None
    started_at: str | None = None
    started_monotonic: float | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    ready_signal: asyncio.Event = field(default_factory=asyncio.Event)  # per process: ready or gone
    # A started Turn whose process died, and how it exited (goondan/ipc/resumes.py).
    interrupted: tuple[AgentEvent, str] | None = None
    _timer: asyncio.TimerHandle | None = None
    _idle_timer: asyncio.TimerHandle | None = None  # policy.idleTimeoutMs (docs/scaling.md)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def key(self) -> tuple[str, str]:
        return (self.agent_name, self.instance_key)

    @property
    def name(self) -> str:
        return process_name(self.agent_name, self.instance_key)

    @property
    def alive(self) -> bool:
        return self.handle is not None

    @property
    def starting(self) -> bool:
        """A spawn is under way (no handle yet)."""
        return self.status == "spawning" and self.handle is None

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

    def transition(self, trigger: Trigger) -> ProcessStatus:
        """The one place the status changes (:data:`TRANSITIONS`); wakes :meth:`wait_for`."""
        self.status = next_status(self.status, trigger)
        self.notify()
        return self.status

    def notify(self) -> None:
        """Wake the waiters of :meth:`wait_for` (the record changed)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, predicate: Callable[[InstanceRecord], bool]) -> None:
        """Wait until ``predicate(self)`` holds, re-checked on every :meth:`notify`."""
        while not predicate(self):
            await self._changed.wait()

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
            "status": self.status,
            "pid": handle.pid if handle is not None else None,
            "startedAt": self.started_at if handle is not None else None,
            "queued": len(self.inbox),
            "processed": self.processed,
            "consecutiveCrashes": self.consecutive_crashes,
            "restarts": max(0, self.spawn_count - 1),
            "lastExitCode": self.last_exit_code,
        }


@dataclass
class ReconcilePlan:
    """``{toSpawn, toTerminate, toRespawn}`` of one reconciliation pass (docs/orchestrator.md "Supervision")."""

    to_spawn: list[tuple[str, str]] = field(default_factory=list)
    to_terminate: list[tuple[str, str]] = field(default_factory=list)
    to_respawn: list[tuple[str, str, int]] = field(default_factory=list)

    def to_dict(self) -> JsonObject:
        return {
            "toSpawn": [{"agentName": a, "instanceKey": k} for a, k in self.to_spawn],
            "toTerminate": [{"agentName": a, "instanceKey": k, "reason": "config_change"} for a, k in self.to_terminate],
            "toRespawn": [{"agentName": a, "instanceKey": k, "backoffMs": b} for a, k, b in self.to_respawn],
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
