"""Steering: input that arrives while a turn runs joins that turn (``inputPolicy: steer``).

An Agent with ``spec.inputPolicy: steer`` (docs/configuration.md "Agent") takes input for an
instance whose turn is running into that turn instead of queueing a new one:
:meth:`AgentInstance.steer <goondan.runtime.instance.AgentInstance.steer>` hands the event to
the running turn's :class:`SteerQueue`, and the turn loop
(:class:`~goondan.runtime.turn.TurnRunner`) drains it before each model request: each event becomes
a user message rendered like a turn's input (:func:`~goondan.runtime.inputs.input_text`, always with
its ``[goondan_context]`` header, so the model sees where it came from) and tagged ``steered: true``
plus its input id (the claim check of a restarted agent process). A turn whose model answered while
steered input waited takes one more step, so the answer covers it. The turn's answer is the answer
of every input it took (the agent process answers their callers with it, docs/orchestrator.md
"Steering").

A turn that ends otherwise (an error, ``maxStepsPerTurn``, a cancel) still records what it took
(:meth:`SteerQueue.close`): no accepted input is dropped from the conversation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from goondan.conversation.messages import Message, MessageEvent
from goondan.runtime.inputs import input_tag, input_text
from goondan.types import AgentEvent

__all__ = ["STEERED_KEY", "SteerQueue", "steered_message"]

STEERED_KEY = "steered"  # user-message metadata: this input joined a running turn


def steered_message(event: AgentEvent) -> Message:
    """The user message of a steered input (header always shown: the model sees its source)."""
    return Message.user(input_text(event, header=True),
                        metadata={**(input_tag(event) or {}), STEERED_KEY: True})


class SteerQueue:
    """The inputs one running turn took and has not yet put into its conversation."""

    def __init__(self) -> None:
        self._waiting: deque[AgentEvent] = deque()
        self.taken: list[AgentEvent] = []  # every input the turn accepted, in order
        self.open = True

    def __repr__(self) -> str:
        return f"<SteerQueue waiting={len(self._waiting)} taken={len(self.taken)} open={self.open}>"

    @property
    def pending(self) -> bool:
        """True while an accepted input is not yet in the conversation."""
        return bool(self._waiting)

    def put(self, event: AgentEvent) -> bool:
        """Accept ``event`` into the turn; False once the turn is over (it must queue instead)."""
        if not self.open:
            return False
        self._waiting.append(event)
        self.taken.append(event)
        return True

    def drain(self, emit: Callable[[MessageEvent], None]) -> int:
        """Append every waiting input to the conversation (before a model request)."""
        count = 0
        while self._waiting:
            emit(MessageEvent.append(steered_message(self._waiting.popleft())))
            count += 1
        return count

    def close(self, emit: Callable[[MessageEvent], None]) -> list[AgentEvent]:
        """The turn is over: accept nothing more, record what waits; returns every input taken."""
        self.open = False
        self.drain(emit)
        return list(self.taken)
