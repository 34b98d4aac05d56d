"""Tool-pair repair (Decision 3): every assistant tool call gets exactly one tool result.

A Turn that died (crash, SIGKILL, failed step) can leave an assistant message whose tool calls
have no ``role: tool`` result. Providers reject such histories, so before the next Turn each
missing result is filled with a synthetic error result::

    {"type": "tool-result", "toolCallId": ..., "toolName": ...,
     "output": {"type": "error-json", "value": {"message": ..., "code": "E_TURN_INTERRUPTED"}}}

placed right after the tool results the assistant message already has. The repair is expressed
as ordinary :class:`MessageEvent`s so it is persisted and replayed like any other change: when
the insertion point is the end of the conversation these are plain appends; otherwise the
messages after the insertion point are removed and re-appended (same ids) behind the synthetic
results.
"""

from __future__ import annotations

from collections.abc import Sequence

from goondan.conversation.messages import Message, MessageEvent
from goondan.types import ToolCallResult

__all__ = [
    "INTERRUPTED",
    "interrupted_result",
    "repair_tool_pairs",
    "tool_call_groups",
    "tool_result_ids",
]

INTERRUPTED = "E_TURN_INTERRUPTED"
_MESSAGE = (
    "The turn was interrupted before this tool call returned a result; "
    "the call may or may not have taken effect."
)


def tool_result_ids(message: Message) -> list[str]:
    """The ``toolCallId`` of every tool-result part of ``message``."""
    content = message.data.get("content")
    if not isinstance(content, list):
        return []
    return [
        str(part.get("toolCallId"))
        for part in content
        if isinstance(part, dict) and part.get("type") == "tool-result"
    ]


def interrupted_result(tool_call_id: str, tool_name: str) -> Message:
    """The synthetic ``role: tool`` message standing in for a result that never arrived."""
    result = ToolCallResult.failure(tool_call_id, tool_name, _MESSAGE, code=INTERRUPTED)
    return Message.tool_result(result, metadata={"synthetic": True})


def repair_tool_pairs(messages: Sequence[Message]) -> list[MessageEvent]:
    """Events that give every assistant tool call a result; ``[]`` when nothing is missing."""
    answered: set[str] = set()
    for message in messages:
        if message.role == "tool":
            answered.update(tool_result_ids(message))

    desired: list[Message] = []
    first_change: int | None = None
    index = 0
    total = len(messages)
    while index < total:
        message = messages[index]
        desired.append(message)
        index += 1
        if message.role != "assistant":
            continue
        # dict.fromkeys: a call id repeated within the message still gets a single result.
        missing = list(dict.fromkeys(c.id for c in message.tool_calls if c.id not in answered))
        if not missing:
            continue
        # Keep the results that already follow the assistant message, then add the synthetic ones.
        while index < total and messages[index].role == "tool":
            desired.append(messages[index])
            index += 1
        if first_change is None:
            first_change = index
        names = {call.id: call.name for call in reversed(message.tool_calls)}
        for call_id in missing:
            answered.add(call_id)
            desired.append(interrupted_result(call_id, names[call_id]))

    if first_change is None:
        return []
    tail = list(messages[first_change:])
    tail_ids = {m.id for m in tail}
    if len(tail_ids) != len(tail) or any(m.id in tail_ids for m in messages[:first_change]):
        # ``remove`` hits the first message with an id; duplicate ids make that ambiguous.
        return [MessageEvent.truncate(), *(MessageEvent.append(m) for m in desired)]
    events = [MessageEvent.remove(m.id) for m in reversed(tail)]
    events.extend(MessageEvent.append(m) for m in desired[first_change:])
    return events


def tool_call_groups(messages: Sequence[Message]) -> list[list[int]]:
    """Indices of messages that must be kept or removed together, oldest group first.

    An assistant message with ``tool-call`` parts forms one group with every later message whose
    ``tool-result`` parts answer those calls; any other message is a group of its own.
    Windowing and compaction remove whole groups, so a provider never sees a tool call without
    its result (or a result without its call).
    """
    groups: list[list[int]] = []
    owner: dict[str, int] = {}  # toolCallId -> index in ``groups``
    for index, message in enumerate(messages):
        target: int | None = None
        content = message.data.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "tool-result":
                    found = owner.get(str(part.get("toolCallId")))
                    if found is not None and target is None:
                        target = found
                    elif found is not None and found != target and target is not None:
                        # One message answering calls of two assistant messages: merge them.
                        groups[target].extend(groups[found])
                        groups[found] = []
                        owner.update({k: target for k, v in owner.items() if v == found})
        if target is None:
            groups.append([])
            target = len(groups) - 1
        groups[target].append(index)
        for call in message.tool_calls:
            owner[call.id] = target
    return [sorted(group) for group in groups if group]
