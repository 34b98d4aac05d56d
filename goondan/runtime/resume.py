"""The turn journal from the runtime's side: what a turn records, and how an interrupted one
resumes.

docs/conversations.md "Durability". A turn writes ``turn.started`` before its first message
event, ``toolCall.started`` right before each tool handler runs (with the call's idempotency
key), and ``turn.ended`` once its answer is committed and handed to its caller
(:class:`TurnRecorder`). When an instance opens with a turn still open in its journal, the turn
resumes with the same ``turnId`` and input event (:func:`plan_resume` decides from the
conversation and the journal, :func:`finish_interrupted_step` completes the interrupted step):

* a call with a result keeps it and never runs again;
* a call whose handler started and left no result runs again with the same key if its export
  is ``idempotent``, else it gets the result ``E_TOOL_OUTCOME_UNKNOWN``;
* a call that never started runs normally;
* a turn whose final answer was already written just ends with it.

After :data:`MAX_CRASH_RESUMES` resumes caused by crashes the turn is not resumed again: it ends
with ``E_TURN_INTERRUPTED`` (the crash-loop guard), as every interrupted turn did before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.repair import tool_result_ids
from goondan.pipeline.context import Step
from goondan.runtime.approvals import decided_call
from goondan.runtime.failed_turns import FAILED_TURN_KEY, input_events
from goondan.runtime.inputs import input_tag, input_text
from goondan.types import AgentEvent, JsonObject, ToolCall, ToolCallResult, now_iso
from goondan.workspace.journal import OpenTurn, idempotency_key

if TYPE_CHECKING:
    from goondan.runtime.turn import TurnRunner
    from goondan.storage.contract import TurnLog

__all__ = [
    "MAX_CRASH_RESUMES",
    "OUTCOME_UNKNOWN",
    "ResumePoint",
    "TurnRecorder",
    "finish_interrupted_step",
    "plan_resume",
    "resume_mode",
    "turn_input",
    "unknown_outcome",
]

OUTCOME_UNKNOWN = "E_TOOL_OUTCOME_UNKNOWN"
INTERRUPTED = "E_TURN_INTERRUPTED"
MAX_CRASH_RESUMES = 3
_UNKNOWN_MESSAGE = (
    "The turn was interrupted while this tool call ran, and the tool is not idempotent: "
    "the call may or may not have taken effect."
)
_UNKNOWN_SUGGESTION = "Check whether it took effect before calling it again."

ResumeMode = Literal["resume", "guard", "drop", "parked"]
CallAction = Literal["run", "rerun", "unknown", "approval"]


def resume_mode(turn: OpenTurn | None, *, resume_interrupted: bool) -> ResumeMode | None:
    """What opening an instance does with its journal's open ``turn`` (None: there is none).

    ``parked``: the turn waits for a decision (approvals), it is not resumed by a crash;
    ``drop``: ``resume_interrupted=False`` — repaired with ``E_TURN_INTERRUPTED`` results as
    before; ``guard``: interrupted :data:`MAX_CRASH_RESUMES` times already; ``resume``: go on.
    """
    if turn is None:
        return None
    if turn.parked:
        return "parked"
    if not resume_interrupted:
        return "drop"
    return "guard" if turn.crash_resumes >= MAX_CRASH_RESUMES else "resume"


class TurnRecorder:
    """Writes one instance's turn records to its journal; without a journal only keys are made."""

    def __init__(self, journal: TurnLog | None, agent: str, instance_key: str) -> None:
        self.journal = journal
        self.agent = agent
        self.instance_key = instance_key

    def key(self, turn_id: str, tool_call_id: str) -> str:
        """The call's idempotency key (``ToolContext.idempotency_key``)."""
        return idempotency_key(self.agent, self.instance_key, turn_id, tool_call_id)

    def _append(self, record: JsonObject) -> None:
        if self.journal is not None:
            self.journal.append({**record, "at": now_iso()})

    def turn_started(self, turn_id: str, event: AgentEvent, input_message_id: str | None) -> None:
        self._append({"type": "turn.started", "turnId": turn_id, "input": event.to_dict(),
                      "inputMessageId": input_message_id})

    def call_started(self, turn_id: str, call_id: str, tool_name: str, idempotent: bool,
                     key: str) -> None:
        """``toolCall.started`` (``key``: the call's :meth:`key`, computed once by the caller)."""
        self._append({"type": "toolCall.started", "turnId": turn_id, "toolCallId": call_id,
                      "toolName": tool_name, "idempotencyKey": key, "idempotent": idempotent})

    def turn_resumed(self, turn_id: str, attempt: int, cause: str = "crash") -> None:
        self._append(
            {"type": "turn.resumed", "turnId": turn_id, "attempt": attempt, "cause": cause}
        )

    def turn_ended(self, turn_id: str, finish_reason: str) -> None:
        """``turn.ended``, then the journal is emptied (nothing of the turn is needed any more)."""
        if self.journal is not None:
            self._append({"type": "turn.ended", "turnId": turn_id, "finishReason": finish_reason})
            self.journal.clear()


@dataclass
class ResumePoint:
    """Where an interrupted turn goes on (see :func:`plan_resume`)."""

    turn: OpenTurn
    event: AgentEvent
    input_written: bool
    steps_taken: int = 0
    assistant: Message | None = None  # the interrupted step's assistant message
    calls: list[tuple[ToolCall, CallAction]] = field(default_factory=list)  # calls without result
    final: Message | None = None  # the answer, when the turn had finished
    tools_ok: frozenset[str] = frozenset()  # tools that succeeded in the turn (requiredTools)


def plan_resume(messages: Sequence[Message], turn: OpenTurn) -> ResumePoint:
    """Decide how ``turn`` goes on from the conversation ``messages`` (loaded with its calls
    open)."""
    event = AgentEvent.from_dict(turn.input)
    start = _turn_start(messages, turn.input_message_id)
    if start is None:  # the input never reached the conversation: the turn starts over
        return ResumePoint(turn, event, input_written=False)
    own = list(messages[start:])
    point = ResumePoint(turn, event, input_written=True,
                        steps_taken=sum(1 for m in own if m.role == "assistant"))
    point.tools_ok = frozenset(_succeeded_tools(own))
    last = max((i for i, m in enumerate(own) if m.role == "assistant"), default=None)
    if last is None:
        return point
    assistant = own[last]
    point.assistant = assistant
    if not assistant.tool_calls:
        if last == len(own) - 1:
            point.final = assistant
        return point
    answered = {i for m in own[last + 1:] for i in tool_result_ids(m)}
    seen: set[str] = set()
    for call in assistant.tool_calls:
        if call.id in answered or call.id in seen:
            continue
        seen.add(call.id)
        started = turn.started_calls.get(call.id)
        action: CallAction
        if started is not None:  # an approved call that started counts as started (never twice)
            action = "rerun" if started.get("idempotent") is True else "unknown"
        elif call.id in turn.approvals:
            action = "approval"
        else:
            action = "run"
        point.calls.append((call, action))
    return point


def _turn_start(messages: Sequence[Message], input_id: str | None) -> int | None:
    """Index of the turn's first own message (after its input); None if the input is missing."""
    if input_id is None:
        # An input without text writes no message: the turn's messages are what follows the
        # last user message.
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
        return last_user + 1
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.id == input_id:
            # A reused failed input (failed_turns.input_events) is written once its mark is gone.
            return None if message.metadata.get(FAILED_TURN_KEY) else index + 1
    return None


def _succeeded_tools(messages: Sequence[Message]) -> set[str]:
    names: set[str] = set()
    for message in messages:
        content = message.data.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type") == "tool-result":
                output = part.get("output")
                kind = output.get("type") if isinstance(output, dict) else None
                if isinstance(kind, str) and not kind.startswith("error"):
                    names.add(str(part.get("toolName")))
    return names


def turn_input(messages: Sequence[Message], event: AgentEvent,
               resume: ResumePoint | None) -> tuple[list[MessageEvent], str | None]:
    """The events that write the turn's input, and the id of the message holding it.

    A resumed turn whose input is written writes nothing; one whose input never reached the
    conversation writes it under the id the journal recorded, so a second crash finds it.
    """
    text = input_text(event)
    if not text:
        return [], None
    if resume is not None and resume.input_written:
        return [], resume.turn.input_message_id
    # A durable input's id tags it (inputs.connector_input_written).
    events = input_events(messages, text, input_tag(event))
    wanted = resume.turn.input_message_id if resume is not None else None
    first = events[0]
    if wanted and first.type == "append" and first.message is not None:
        events = [MessageEvent.append(dataclasses.replace(first.message, id=wanted))]
    written = events[-1].message
    return events, written.id if written is not None else None


def unknown_outcome(call: ToolCall) -> ToolCallResult:
    """The result of a non-idempotent call whose handler started and whose result was lost."""
    return ToolCallResult.failure(call.id, call.name, _UNKNOWN_MESSAGE, code=OUTCOME_UNKNOWN,
                                  suggestion=_UNKNOWN_SUGGESTION)


async def finish_interrupted_step(runner: TurnRunner, point: ResumePoint) -> list[ToolCallResult]:
    """Give every call of the interrupted step that has no result one (in call order).

    The step is the assistant message's own (same step id and index); calls that run go
    through the whole toolCall chain and are journaled again."""
    assistant = point.assistant
    assert assistant is not None
    step = Step(
        id=assistant.source.step_id or f"{runner.turn_id}-resumed", index=point.steps_taken - 1
    )
    runner.turn.steps.append(step)
    runner.last_assistant = assistant
    runner.tool_call_count += len(point.calls)
    span = runner.span.child(f"step {step.index}", "step")
    catalog = await runner.env.step_catalog(runner.turn_id)
    results: list[ToolCallResult] = []
    for call, action in point.calls:
        if action == "unknown":
            result = unknown_outcome(call)
        elif action == "approval":  # the decision decides (docs/approvals.md)
            decided = await decided_call(runner, step, span, call, assistant, catalog,
                                         point.turn.approvals[call.id])
            if decided is None:  # still pending: the turn parks again
                continue
            result = decided
        else:  # run / rerun
            result = await runner.run_tool_call(step, span, call, assistant, catalog)
        runner.emit(MessageEvent.append(Message.tool_result(result)))
        results.append(result)
    span.finish()
    return results


def interrupted_error(turn: OpenTurn) -> JsonObject:
    """The ``TurnResult.error`` of a turn the crash-loop guard ends."""
    return {
        "code": INTERRUPTED,
        "message": f"the turn was interrupted {turn.crash_resumes + 1} times (the process died "
        "each time); it is not resumed again",
        "suggestion": "look for what kills the agent process (logs, memory limits), then send "
        "the message again",
    }
