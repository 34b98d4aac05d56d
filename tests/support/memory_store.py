"""An in-memory :class:`~goondan.workspace.store.ConversationStore` for runtime unit tests.

It keeps the base and the pending events in lists, and decides its commits and recovery with
the same pure planners as :class:`~goondan.workspace.InstanceStore` (``plan_commit``,
``plan_recovery``), so a test can run an ``AgentInstance`` or a ``TurnRunner`` without YAML,
files or a lock, and still see what a commit would have written (``plans``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.state import ConversationState
from goondan.errors import Diagnostic
from goondan.types import JsonValue
from goondan.workspace.plans import CommitPlan, plan_commit, plan_recovery
from goondan.workspace.store import Status

__all__ = ["MemoryStore"]


class MemoryStore:
    """A conversation store in memory; records statuses, event writes and commit plans."""

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self.base: list[Message] = list(messages)
        self.events: list[tuple[str, MessageEvent]] = []
        self.writes: list[list[MessageEvent]] = []  # one entry per append_event(s) call
        self.plans: list[CommitPlan] = []
        self.statuses: list[Status] = []
        self.extension_states: dict[str, str] = {}
        self.recovery_diagnostics: list[Diagnostic] = []
        self.closed = False
        self._loaded: list[Message] | None = None

    def __repr__(self) -> str:
        return (
            f"<MemoryStore messages={len(self.base)} "
            f"pending={len(self.events)} closed={self.closed}>"
        )

    @property
    def texts(self) -> list[str]:
        """The text of every committed message, in order (handy in assertions)."""
        return [m.text for m in self.base]

    def load(self, *, keep_open_calls: bool = False) -> ConversationState:
        self._loaded = self.base  # what "the file" holds, as InstanceStore reads it at load
        plan = plan_recovery(self.base, [event for _, event in self.events],
                             keep_open_calls=keep_open_calls)
        self.recovery_diagnostics = list(plan.diagnostics)
        return self.commit(plan.state)

    def append_event(self, event: MessageEvent, turn_id: str) -> None:
        self.append_events([event], turn_id)

    def append_events(self, events: Iterable[MessageEvent], turn_id: str) -> None:
        batch = list(events)
        self.writes.append(batch)
        self.events.extend((turn_id, event) for event in batch)

    def commit(self, state: ConversationState) -> ConversationState:
        self.plans.append(plan_commit(state, self._loaded))
        self.base = self._loaded = list(state.next_messages)
        self.events.clear()
        return ConversationState.adopt(self._loaded)

    def set_status(self, status: Status) -> None:
        self.statuses.append(status)

    def load_extension_state(self, name: str) -> JsonValue | None:
        text = self.extension_states.get(name)
        return None if text is None else json.loads(text)

    def save_extension_state(self, name: str, value: JsonValue) -> bool:
        text = json.dumps(value, sort_keys=True)
        if self.extension_states.get(name) == text:
            return False
        self.extension_states[name] = text
        return True

    def close(self) -> None:
        self.closed = True
