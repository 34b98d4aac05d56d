"""The per-instance queue: events wait here until their Turn may start, one at a time.

Every (agent, instanceKey) has one :class:`InstanceQueue` (docs/orchestrator.md "Routing"):
the orchestrator sends the next event only after the process reported ``turnFinished`` for
the one :attr:`InstanceQueue.current`, so per-instance order is the order of arrival, and a
crash loses at most the Turn that was running.

Steering (``inputPolicy: steer``, docs/orchestrator.md "Steering"): while the Turn in flight has
started, :meth:`InstanceQueue.take_next` hands out the next waiting event anyway, marked
(:attr:`AgentEvent.steer_into`) to join that Turn; it is kept in :attr:`InFlight.steered`.
When the Turn finishes, the ones its process did not take go back to the front of the queue;
when the process died, all of them do (their claims tell whether one had joined the Turn).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from goondan.types import AgentEvent

__all__ = ["InFlight", "InstanceQueue"]


@dataclass
class InFlight:
    """The event sent to the process: did its Turn start, was it asked to cancel."""

    event: AgentEvent
    started: bool = False
    cancel_requested: bool = False
    steered: list[AgentEvent] = field(default_factory=list)  # sent to join this Turn


@dataclass
class InstanceQueue:
    """Waiting events (FIFO) and the one in flight."""

    waiting: deque[AgentEvent] = field(default_factory=deque)
    current: InFlight | None = None
    steer: Callable[[], bool] | None = None  # True: the agent's inputPolicy is steer

    def __len__(self) -> int:
        """Waiting plus in flight (the ``queued`` column of ``processes.json``)."""
        current = self.current
        return len(self.waiting) + (1 + len(current.steered) if current is not None else 0)

    def __repr__(self) -> str:
        current = self.current.event.id if self.current is not None else None
        return f"<InstanceQueue waiting={len(self.waiting)} current={current}>"

    def push(self, event: AgentEvent) -> None:
        """Queue ``event`` behind the others."""
        self.waiting.append(event)

    def push_front(self, events: list[AgentEvent]) -> None:
        """Put ``events`` (in this order) before the waiting ones: they were sent to a process
        that never started them."""
        self.waiting.extendleft(reversed(events))

    def take_next(self) -> AgentEvent | None:
        """Make the first waiting event the one in flight (or, steering, one that joins the
        started Turn in flight); None if nothing may be sent."""
        current = self.current
        if not self.waiting:
            return None
        if current is not None:
            if not (
                current.started
                and not current.cancel_requested
                and self.steer is not None
                and self.steer()
            ):
                return None
            event = self.waiting.popleft()
            event.steer_into = current.event.id
            current.steered.append(event)
            return event
        event = self.waiting.popleft()
        self.current = InFlight(event)
        return event

    def finish(self, taken: Collection[str] | None = None) -> InFlight | None:
        """The in-flight event is done (``taken``: the ids of the steered events its Turn took)
        or lost (None): free the slot, put the steered events not taken back in front; returns
        what it held."""
        current, self.current = self.current, None
        if current is not None and current.steered:
            back = [e for e in current.steered if taken is None or e.id not in taken]
            for event in back:
                event.steer_into = None
                if taken is None:
                    event.was_steered = True
            self.push_front(back)
        return current

    def is_current(self, event_id: str) -> bool:
        """True if ``event_id`` is in flight."""
        return self.current is not None and self.current.event.id == event_id

    def holds(self, event_id: str) -> bool:
        """True if ``event_id`` waits or is in flight."""
        return self.is_current(event_id) or any(e.id == event_id for e in self.waiting)

    def remove_waiting(self, event_id: str) -> AgentEvent | None:
        """Take ``event_id`` out of the waiting events; None if it does not wait here."""
        event = next((e for e in self.waiting if e.id == event_id), None)
        if event is not None:
            self.waiting.remove(event)
        return event

    def remove_requests(self) -> list[AgentEvent]:
        """Take out the waiting events that expect an answer (``replyTo``)."""
        requests = [e for e in self.waiting if e.reply_to is not None]
        for event in requests:
            self.waiting.remove(event)
        return requests

    def clear(self) -> list[AgentEvent]:
        """Take out every waiting event."""
        events = list(self.waiting)
        self.waiting.clear()
        return events
