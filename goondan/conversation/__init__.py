"""Conversations: Message, MessageEvent, ConversationState and the JSONL codec."""
