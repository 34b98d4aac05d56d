"""The one contract every model adapter implements.

A :class:`LanguageModel` takes a :class:`ModelRequest` (canonical messages, tool catalog, system
prompt, parameters) and returns a :class:`ModelResponse` (text, tool calls, finish reason,
usage). Streaming and non-streaming calls share one signature: with ``stream=True`` the adapter
calls ``on_delta`` for every text or tool-call fragment as it arrives and still returns the
same final :class:`ModelResponse`.

Canonical messages are the ``data`` dicts of conversation messages (see
``goondan.conversation.messages``): roles ``system|user|assistant|tool``; content a string or a
list of ``text`` / ``tool-call`` / ``tool-result`` parts. Provider quirks live only in the
provider modules.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from goondan.types import JsonObject, TokenUsage, ToolCall, ToolCatalogItem

__all__ = [
    "FinishReason",
    "LanguageModel",
    "ModelRequest",
    "ModelResponse",
    "ModelSpec",
    "StreamDelta",
]

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "other"]


@dataclass
class ModelSpec:
    """A Model resource resolved for the adapter layer (no YAML types leak below config/).

    ``api_key`` is the resolved secret (never logged or repr'd); ``api_key_env`` names the
    variable it came from or should come from, for error suggestions.
    """

    provider: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    endpoint: str | None = None
    options: JsonObject = field(default_factory=dict)
    capabilities: JsonObject = field(default_factory=dict)
    timeout_ms: int | None = None
    name: str | None = None  # Model resource name, for messages
    offline_alternatives: list[str] = field(default_factory=list)  # scripted Models of the bundle


@dataclass
class ModelRequest:
    """Everything one model round trip needs.

    ``messages`` are the conversation's own ``data`` dicts (``ConversationState.to_llm_messages``
    shares them to keep a step O(1) in history size): adapters and middleware must treat them
    as read-only and build new structures for the wire. The turn loop passes a read-only
    sequence (``ConversationState.llm_view``: indexing, slicing, iteration, ``len``, ``==`` and
    ``+`` as on a list, and ``copy.deepcopy`` gives a list) rather than a copy of the history;
    use ``list(request.messages)`` for a list of your own.
    """

    messages: Sequence[JsonObject]
    tools: list[ToolCatalogItem] = field(default_factory=list)
    system: str | None = None
    params: JsonObject = field(default_factory=dict)  # temperature, maxTokens, topP, passthrough


@dataclass
class StreamDelta:
    """One streamed fragment: text, or part of a tool call (``args_delta`` is raw JSON text)."""

    kind: Literal["text", "tool_call"]
    text: str = ""
    index: int = 0
    tool_call_id: str | None = None
    tool_name: str | None = None
    args_delta: str = ""


@dataclass
class ModelResponse:
    """The assistant's reply in canonical form."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason = "stop"
    usage: TokenUsage = field(default_factory=TokenUsage)
    raw_finish_reason: str | None = None
    model: str | None = None
    provider_metadata: JsonObject = field(default_factory=dict)
    # Per tool-call id: ``providerOptions`` the runtime stores on the tool-call part so the
    # adapter can send them back next time (e.g. Gemini thought signatures).
    tool_call_options: dict[str, JsonObject] = field(default_factory=dict)
    # Canonical ``reasoning`` parts (``{"type": "reasoning", "text", "providerOptions"}``) stored
    # ahead of the text so providers that require it get them back (Claude's signed thinking).
    reasoning: list[JsonObject] = field(default_factory=list)


DeltaCallback = Callable[[StreamDelta], Any]


class LanguageModel(abc.ABC):
    """Adapter contract. Implementations must be safe to call from one event loop at a time
    and must honour cancellation (``asyncio.CancelledError``) promptly, aborting the request."""

    provider: str = "abstract"
    model: str = ""

    @abc.abstractmethod
    async def generate(
        self,
        request: ModelRequest,
        *,
        stream: bool = False,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        """Run one round trip. Raises ``goondan.errors.LlmError`` subclasses on failure."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default does nothing."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(provider={self.provider!r}, model={self.model!r})"
