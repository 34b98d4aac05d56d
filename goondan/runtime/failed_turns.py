"""What a failed turn leaves in the conversation, and how the next turn picks it up.

The policy (docs/conversations.md "When a turn fails"), as pure functions over messages and
message events so the turn loop and the instance only emit what these return:

* a turn that fails keeps the user's input, marked ``metadata["goondan.failedTurn"]`` with
  the error code (:func:`failed_turn_events`);
* the next turn whose input has the same text as that marked message (the user retries)
  reuses it instead of appending a second copy (:func:`input_events`), so any number of
  retries send the input once; a different input is appended after it as usual;
* a turn that failed because the request exceeded the model's context window
  (``E_LLM_CONTEXT_LENGTH``) is removed whole, input included: what it added is what did not
  fit, and keeping it would make every later turn fail the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from goondan.conversation.messages import Message, MessageEvent

__all__ = ["CONTEXT_LENGTH_CODE", "FAILED_TURN_KEY", "failed_turn_events", "input_events"]

FAILED_TURN_KEY = "goondan.failedTurn"
CONTEXT_LENGTH_CODE = "E_LLM_CONTEXT_LENGTH"


def _is_input(message: Message) -> bool:
    """A user's own input (not a runtime reminder, which is a user-role system message)."""
    return message.role == "user" and message.source.type == "user"


def input_events(messages: Sequence[Message], text: str,
                 metadata: dict[str, str] | None = None) -> list[MessageEvent]:
    """The events that put a turn's input ``text`` (with ``metadata``) into the conversation.

    One ``append`` normally. When the latest input belongs to a failed turn and has the same
    text, that message is reused: a ``replace`` drops its failed mark. Only the failed turn's
    own tool calls and results may follow it; an assistant answer ends the search.
    """
    for message in reversed(messages):
        if _is_input(message):
            if message.metadata.get(FAILED_TURN_KEY) and message.text == text:
                kept = {k: v for k, v in message.metadata.items() if k != FAILED_TURN_KEY}
                return [MessageEvent.replace(message.id, dataclasses.replace(
                    message, metadata={**kept, **(metadata or {})}))]
            break
        if message.role == "assistant" and not message.tool_calls:
            break
    return [MessageEvent.append(Message.user(text, metadata=dict(metadata) if metadata else None))]


def failed_turn_events(
    messages: Sequence[Message], turn_events: Sequence[MessageEvent], error_code: str
) -> list[MessageEvent]:
    """The events that record a failed turn (see the module docstring).

    ``messages`` is the conversation as it stands after the turn, ``turn_events`` the events
    the turn emitted.
    """
    ids: set[str] = set()
    for event in turn_events:
        message = event.message
        if message is None:
            continue
        # Messages the turn added, and an earlier input it reused (see input_events); not the
        # replacements middleware made of older history (a compaction summary stays).
        if event.type == "append" or (event.target_id == message.id and _is_input(message)):
            ids.add(message.id)
    if not ids:
        return []
    own: list[Message] = []
    for message in reversed(messages):  # the turn's messages are at the end
        if message.id in ids:
            own.append(message)
            if len(own) == len(ids):
                break
    own.reverse()
    if error_code == CONTEXT_LENGTH_CODE:
        return [MessageEvent.remove(m.id) for m in own]
    events: list[MessageEvent] = []
    for message in own:
        if _is_input(message):
            metadata = {**message.metadata, FAILED_TURN_KEY: error_code}
            events.append(
                MessageEvent.replace(message.id, dataclasses.replace(message, metadata=metadata))
            )
    return events
