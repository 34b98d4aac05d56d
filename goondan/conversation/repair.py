"""Tool-pair repair: every assistant tool call gets exactly one tool result, and every tool
result answers exactly one earlier call (see docs/conversations.md, "Recovery").

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

A history can also hold results that no provider accepts: an *orphan* result whose call is not
in any earlier message (a hand-edited or truncated file) or a *duplicate* second result for the
same call (a retried append). Those result parts are dropped by the same events (the message
keeps its id; a message left empty is removed). A result belongs to the nearest earlier message
that made a call with its id, so an id that repeats in a later turn (histories written while
servers without ids got ``call_0`` in every step) is a new call, not a duplicate.
"""

from __future__ import annotations

from collections.abc import Sequence

from goondan.conversation.messages import Message, MessageEvent
from goondan.types import ToolCallResult

__all__ = [
    "INTERRUPTED",
    "count_tool_results",
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


def _valid_results(
    messages: Sequence[Message],
) -> tuple[dict[int, Message | None], set[tuple[int, str]]]:
    """Tool messages that must change, and the calls that keep a result.

    A ``tool-result`` part answers the call with its id in the nearest earlier message that made
    one: ids can repeat across turns (a server that sends none and a per-step counter), so a
    result belongs to the assistant message it follows, never to an older call with the same id.
    The part is dropped when no earlier message made its call (an orphan) or that message's call
    already has a result (a duplicate): providers reject both. The message keeps its id and its
    other parts; a message left with no content is dropped. Answered calls are returned as
    ``(index of the calling message, call id)``.
    """
    caller: dict[str, int] = {}  # call id -> index of the latest message making that call
    answered: set[tuple[int, str]] = set()
    changed: dict[int, Message | None] = {}
    for index, message in enumerate(messages):
        caller.update((call.id, index) for call in message.tool_calls)
        content = message.data.get("content")
        if not isinstance(content, list):
            continue
        kept: list[object] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "tool-result":
                call_id = str(part.get("toolCallId"))
                owner = caller.get(call_id)
                if owner is None or (owner, call_id) in answered:
                    continue
                answered.add((owner, call_id))
            kept.append(part)
        if len(kept) != len(content):
            changed[index] = Message(
                id=message.id, data={**message.data, "content": kept}, source=message.source,
                metadata=dict(message.metadata), created_at=message.created_at,
                extra=dict(message.extra),
            ) if kept else None
    return changed, answered


def count_tool_results(messages: Sequence[Message]) -> int:
    """How many ``tool-result`` parts ``messages`` hold (for repair reports)."""
    return sum(len(tool_result_ids(m)) for m in messages)


def repair_tool_pairs(
    messages: Sequence[Message], *, keep_open_calls: bool = False
) -> list[MessageEvent]:
    """Events that make the tool pairs provider-valid; ``[]`` when nothing needs repair.

    Every assistant tool call gets exactly one result (a synthetic ``E_TURN_INTERRUPTED`` one
    when it has none), and orphan or duplicate results are dropped (see :func:`_valid_results`).
    With ``keep_open_calls`` the calls of the last assistant message are left as they are: a
    resumed turn gives them their results (docs/conversations.md "Durability").
    """
    changed, answered = _valid_results(messages)
    effective = [changed.get(i, m) for i, m in enumerate(messages)]
    last_assistant = -1
    if keep_open_calls:
        last_assistant = max((i for i, m in enumerate(effective)
                              if m is not None and m.role == "assistant"), default=-1)

    desired: list[Message] = []
    index = 0
    total = len(effective)
    while index < total:
        message = effective[index]
        position = index
        index += 1
        if message is None:
            continue
        desired.append(message)
        if message.role != "assistant" or position == last_assistant:
            continue
        # dict.fromkeys: a call id repeated within the message still gets a single result.
        missing = list(dict.fromkeys(
            c.id for c in message.tool_calls if (position, c.id) not in answered
        ))
        if not missing:
            continue
        # Keep the results that already follow the assistant message, then add the synthetic ones.
        while index < total:
            follower = effective[index]
            if follower is not None and follower.role != "tool":
                break
            if follower is not None:
                desired.append(follower)
            index += 1
        names = {call.id: call.name for call in reversed(message.tool_calls)}
        for call_id in missing:
            desired.append(interrupted_result(call_id, names[call_id]))

    # The unchanged prefix stays; everything after it is removed and re-appended as desired.
    first_change = 0
    limit = min(len(messages), len(desired))
    while first_change < limit and desired[first_change] is messages[first_change]:
        first_change += 1
    if first_change == len(messages) == len(desired):
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
