"""Conversations: Message, MessageEvent, ConversationState, the JSONL codec and tool-pair repair."""

from __future__ import annotations

from goondan.conversation.codec import (
    DecodedFile,
    decode_events,
    decode_messages,
    encode_event,
    encode_message,
)
from goondan.conversation.messages import Message, MessageEvent, MessageSource
from goondan.conversation.repair import (
    INTERRUPTED,
    interrupted_result,
    repair_tool_pairs,
    tool_call_groups,
)
from goondan.conversation.state import ConversationState, fold

__all__ = [
    "INTERRUPTED",
    "ConversationState",
    "DecodedFile",
    "Message",
    "MessageEvent",
    "MessageSource",
    "decode_events",
    "decode_messages",
    "encode_event",
    "encode_message",
    "fold",
    "interrupted_result",
    "repair_tool_pairs",
    "tool_call_groups",
]
