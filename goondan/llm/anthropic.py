"""Anthropic Messages API adapter.

Wire format (POST ``{endpoint}/messages``, default endpoint ``https://api.anthropic.com/v1``;
headers ``x-api-key``, ``anthropic-version: 2023-06-01``)::

    {"model": ..., "max_tokens": 4096, "system": "...", "messages": [...],
     "tools": [{"name", "description", "input_schema"}], "temperature", "top_p",
     "stream": true, ...passthrough}

Messages: Anthropic has no ``system`` role, so the agent's system prompt and every system message
of the conversation (docs/models.md) are joined, in order, by a blank line into the top-level
``system`` field. Content is always sent as blocks: ``text`` (empty text is dropped: the API
rejects it), ``tool_use`` (``id``, ``name``, ``input``) on assistant turns, and ``tool_result``
(``tool_use_id``, ``content`` text, ``is_error: true`` for error outputs) inside a *user* turn.
Consecutive messages that map to the same role are merged into one turn, so the results of
several parallel tool calls travel together, before any following user text.

``maxTokens`` → ``max_tokens`` (required by the API; default :data:`DEFAULT_MAX_TOKENS`),
``topP`` → ``top_p``.

Responses: ``content`` blocks (``text``, ``tool_use``; ``thinking`` / ``redacted_thinking``
blocks are not part of the text: they become ``ModelResponse.reasoning`` parts carrying their
signature, are stored first in the assistant message and are sent back verbatim, as Claude
requires for extended thinking with tool use), ``stop_reason`` (end_turn / stop_sequence → stop,
max_tokens → length, tool_use → tool_calls, refusal → content_filter, pause_turn → other) and
``usage``. Input tokens are reported as ``input_tokens + cache_creation_input_tokens +
cache_read_input_tokens`` (the prompt's full size, like OpenAI), cached as
``cache_read_input_tokens``.

Streams: ``message_start`` (message id, model, input usage), ``content_block_start`` /
``content_block_delta`` (``text_delta``; ``input_json_delta`` with ``partial_json``;
``thinking_delta`` and ``signature_delta`` accumulated into the thinking block) /
``content_block_stop``, ``message_delta`` (``stop_reason``, cumulative ``usage``),
``message_stop``, ``ping`` and ``error`` events.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from goondan.config.providers import PROVIDERS
from goondan.errors import LlmError
from goondan.llm.base import FinishReason, ModelRequest, ModelResponse, ModelSpec, StreamDelta
from goondan.llm.http import RetryPolicy, error_for_status
from goondan.llm.provider import (
    HttpModel,
    StreamAccumulator,
    append_turn,
    as_object,
    bad_shape,
    content_parts,
    is_error_output,
    load_event_json,
    merge_params,
    new_call_id,
    parts_text,
    stream_cut,
    tool_call,
    tool_call_input,
    tool_result_text,
)
from goondan.llm.sse import SseEvent
from goondan.llm.wire import Converter, RawJson, WireCache, encode_chunks
from goondan.types import JsonObject, TokenUsage, ToolCall, ToolCatalogItem

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_ENDPOINT",
    "DEFAULT_MAX_TOKENS",
    "AnthropicModel",
    "MessagesConverter",
    "create_anthropic",
]

DEFAULT_ENDPOINT = PROVIDERS["anthropic"].endpoint
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096

_FINISH: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "other",
}

# Stream "error" event types → the HTTP status the same error has as a response.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def messages_to_wire(
    messages: Sequence[JsonObject], system: str | None
) -> tuple[str, list[JsonObject]]:
    """Canonical messages → (top-level ``system`` text, Messages API ``messages``)."""
    converter = MessagesConverter().convert(messages)
    return _system_text(system, converter.system_texts), converter.out


def _system_text(system: str | None, texts: list[str]) -> str:
    return "\n\n".join([system, *texts] if system else texts)


class MessagesConverter(Converter):
    """Messages API conversion, one message at a time (same-role messages merge into a turn)."""

    merges = True
    merge_key = "content"

    def feed(self, message: JsonObject) -> None:
        out = self.out
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):  # the common case: plain text
            if role == "system":
                if content:
                    self.system_texts.append(content)
            elif content and role != "tool":
                speaker = "assistant" if role == "assistant" else "user"
                append_turn(out, speaker, [{"type": "text", "text": content}], "content")
            return
        parts = content_parts(message)
        if role == "system":
            text = parts_text(parts)
            if text:
                self.system_texts.append(text)
            return
        if role == "assistant":
            blocks: list[JsonObject] = []
            for part in parts:
                kind = part.get("type")
                if kind == "text" and part.get("text"):
                    blocks.append({"type": "text", "text": str(part["text"])})
                elif kind == "reasoning":
                    blocks.extend(_thinking_to_wire(part))
                elif kind == "tool-call":
                    blocks.append({
                        "type": "tool_use",
                        "id": str(part.get("toolCallId", "")),
                        "name": str(part.get("toolName", "")),
                        "input": tool_call_input(part),
                    })
            append_turn(out, "assistant", blocks, "content")
            return
        results: list[JsonObject] = []
        texts: list[JsonObject] = []
        for part in parts:
            kind = part.get("type")
            if kind == "tool-result":
                block: JsonObject = {
                    "type": "tool_result",
                    "tool_use_id": str(part.get("toolCallId", "")),
                    "content": tool_result_text(part),
                }
                if is_error_output(part):
                    block["is_error"] = True
                results.append(block)
            elif kind == "text" and part.get("text"):
                texts.append({"type": "text", "text": str(part["text"])})
        # tool_result blocks must lead the user turn
        append_turn(out, "user", results + texts, "content")


def _thinking_to_wire(part: JsonObject) -> list[JsonObject]:
    """A stored ``reasoning`` part → the ``thinking``/``redacted_thinking`` block it came from.

    Claude requires these blocks back, verbatim and signed, in an assistant turn that used tools
    with extended thinking on. Reasoning without an Anthropic signature (e.g. from another
    provider) cannot be replayed and is left out.
    """
    options = part.get("providerOptions")
    anthropic = options.get("anthropic") if isinstance(options, dict) else None
    if not isinstance(anthropic, dict):
        return []
    if anthropic.get("redactedData"):
        return [{"type": "redacted_thinking", "data": str(anthropic["redactedData"])}]
    if anthropic.get("signature"):
        return [{"type": "thinking", "thinking": str(part.get("text") or ""),
                 "signature": str(anthropic["signature"])}]
    return []


def _reasoning_from_wire(block: JsonObject) -> JsonObject:
    """A ``thinking``/``redacted_thinking`` block → a canonical ``reasoning`` part."""
    if block.get("type") == "redacted_thinking":
        return {"type": "reasoning", "text": "",
                "providerOptions": {"anthropic": {"redactedData": str(block.get("data") or "")}}}
    return {"type": "reasoning", "text": str(block.get("thinking") or ""),
            "providerOptions": {"anthropic": {"signature": str(block.get("signature") or "")}}}


def tools_to_wire(tools: list[ToolCatalogItem]) -> list[JsonObject]:
    """Tool catalog → ``tools`` (``input_schema`` is the JSON schema)."""
    out: list[JsonObject] = []
    for tool in tools:
        item: JsonObject = {"name": tool.name, "input_schema": tool.parameters}
        if tool.description:
            item["description"] = tool.description
        out.append(item)
    return out


def usage_from_wire(usage: Any) -> TokenUsage:
    """``usage`` → :class:`TokenUsage` (input includes cache writes and reads)."""
    if not isinstance(usage, dict) or not usage:
        return TokenUsage.unknown()  # never reported: unknown, not zero
    fresh = int(usage.get("input_tokens") or 0)
    created = int(usage.get("cache_creation_input_tokens") or 0)
    read = usage.get("cache_read_input_tokens")
    total_input = fresh + created + int(read or 0)
    output = int(usage.get("output_tokens") or 0)
    return TokenUsage(
        input_tokens=total_input,
        output_tokens=output,
        total_tokens=total_input + output,
        cached_tokens=int(read) if read is not None else None,
    )


class AnthropicModel(HttpModel):
    """Messages API over urllib3 (``provider: anthropic``)."""

    provider = "anthropic"
    label = "Anthropic"
    default_endpoint = DEFAULT_ENDPOINT
    key_env = PROVIDERS["anthropic"].key_env
    base_url_env = PROVIDERS["anthropic"].base_url_env

    def url(self, *, stream: bool) -> str:
        return f"{self.endpoint}/messages"

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        key = self.api_key()
        if key:
            headers["x-api-key"] = key
        return headers

    def to_wire(self, request: ModelRequest, *, stream: bool = False) -> JsonObject:
        """Build the Messages API request body."""
        system, messages = messages_to_wire(request.messages, request.system)
        return self._body(request, system, messages, stream=stream)

    def payload(self, request: ModelRequest, *, stream: bool = False) -> list[bytes]:
        """The encoded body, in chunks; only messages new since the last request are
        converted and encoded (:class:`~goondan.llm.wire.WireCache`)."""
        if type(self).to_wire is not AnthropicModel.to_wire:  # a subclass builds its own body
            return super().payload(request, stream=stream)
        if self._wire is None:
            self._wire = WireCache(MessagesConverter)
        converter, items = self._wire.convert(request.messages)
        system = _system_text(request.system, converter.system_texts)
        return encode_chunks(self._body(request, system, RawJson.array(items), stream=stream))

    def _body(
        self, request: ModelRequest, system: str, messages: object, *, stream: bool
    ) -> JsonObject:
        body = merge_params(
            self.spec.options,
            request.params,
            {"temperature": "temperature", "topP": "top_p", "maxTokens": "max_tokens"},
        )
        body["model"] = self.spec.model
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        if system:
            body["system"] = system
        body["messages"] = messages
        if request.tools:
            body["tools"] = tools_to_wire(request.tools)
        if stream:
            body["stream"] = True
        else:
            body.pop("stream", None)
        return body

    def from_wire(self, body: JsonObject, *, request: ModelRequest | None = None) -> ModelResponse:
        """Parse a ``message`` object."""
        content = body.get("content")
        if not isinstance(content, list):
            if body.get("type") == "error":
                raise error_for_status(500, json.dumps(body).encode(), {}, label=self.label)
            raise bad_shape(self.label, "no content in the message")
        texts: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[JsonObject] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text") or ""))
            elif kind in ("thinking", "redacted_thinking"):
                reasoning.append(_reasoning_from_wire(block))
            elif kind == "tool_use":
                calls.append(tool_call(
                    str(block.get("id") or new_call_id("toolu_")), str(block.get("name") or ""),
                    block.get("input"),
                ))
        raw_finish = body.get("stop_reason")
        finish: FinishReason = _FINISH.get(str(raw_finish), "other") if raw_finish else "stop"
        metadata: JsonObject = {"id": body["id"]} if body.get("id") else {}
        return ModelResponse(
            text="".join(texts),
            tool_calls=calls,
            finish_reason=finish,
            usage=usage_from_wire(body.get("usage")),
            raw_finish_reason=str(raw_finish) if raw_finish is not None else None,
            model=body.get("model") if isinstance(body.get("model"), str) else self.spec.model,
            provider_metadata=metadata,
            reasoning=reasoning,
        )

    def new_stream(self, request: ModelRequest | None = None) -> AnthropicStream:
        return AnthropicStream(self)


def create_anthropic(
    spec: ModelSpec, *, retry_policy: RetryPolicy | None = None, base_dir: Any = None
) -> AnthropicModel:
    """The factory of ``provider: anthropic`` (goondan/config/providers.py)."""
    return AnthropicModel(spec, retry_policy=retry_policy)


class AnthropicStream(StreamAccumulator):
    """Accumulates Messages stream events into a ``message`` body."""

    def __init__(self, model: AnthropicModel) -> None:
        self.model = model
        self.message: JsonObject = {}
        self.usage: JsonObject = {}
        self.blocks: dict[int, JsonObject] = {}
        self.tool_index: dict[int, int] = {}  # content block index → tool call ordinal
        self.json_parts: dict[int, list[str]] = {}
        self.stop_reason: str | None = None
        self.started = False
        self.done = False

    def feed(self, event: SseEvent) -> list[StreamDelta]:
        data = load_event_json(event, self.model.label)
        if not isinstance(data, dict):
            raise bad_shape(self.model.label, "a stream event that is not an object")
        kind = data.get("type") or event.event
        if kind == "message_start":
            self.started = True
            message = data.get("message") or {}
            self.message = {k: v for k, v in message.items() if k in ("id", "model", "role")}
            self.usage.update(message.get("usage") or {})
        elif kind == "content_block_start":
            return self._block_start(data)
        elif kind == "content_block_delta":
            return self._block_delta(data)
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            # message_delta usage is cumulative: later values replace earlier ones
            self.usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise self._stream_error(data)
        return []  # ping, content_block_stop and unknown events carry nothing for us

    def _block_start(self, data: JsonObject) -> list[StreamDelta]:
        index = int(data.get("index") or 0)
        block = dict(data.get("content_block") or {})
        self.blocks[index] = block
        if block.get("type") == "tool_use":
            ordinal = len(self.tool_index)
            self.tool_index[index] = ordinal
            self.json_parts[index] = []
            return [StreamDelta(
                kind="tool_call", index=ordinal, tool_call_id=str(block.get("id") or "") or None,
                tool_name=str(block.get("name") or "") or None,
            )]
        if block.get("type") == "text" and block.get("text"):
            return [StreamDelta(kind="text", text=str(block["text"]))]
        return []

    def _block_delta(self, data: JsonObject) -> list[StreamDelta]:
        index = int(data.get("index") or 0)
        delta = data.get("delta") or {}
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            text = str(delta.get("text") or "")
            block["text"] = str(block.get("text") or "") + text
            return [StreamDelta(kind="text", text=text)] if text else []
        if kind == "input_json_delta":
            partial = str(delta.get("partial_json") or "")
            self.json_parts.setdefault(index, []).append(partial)
            return [StreamDelta(
                kind="tool_call", index=self.tool_index.get(index, 0), args_delta=partial,
            )] if partial else []
        if kind == "thinking_delta":  # kept (with its signature) so it can be sent back
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(
                delta.get("signature") or ""
            )
        return []  # thinking is not streamed as answer text; citations are ignored

    def _stream_error(self, data: JsonObject) -> LlmError:
        error = as_object(data.get("error"))
        status = _ERROR_STATUS.get(str(error.get("type")), 500)
        return error_for_status(status, json.dumps(data).encode(), {}, label=self.model.label)

    def finish(self) -> ModelResponse:
        if not self.started:
            raise stream_cut(self.model.label, "no message_start")
        if not self.done and self.stop_reason is None:
            raise stream_cut(self.model.label, "no message_stop")
        content: list[JsonObject] = []
        for index, block in sorted(self.blocks.items()):
            if block.get("type") == "tool_use":
                text = "".join(self.json_parts.get(index, []))
                initial = block.get("input")
                # Malformed JSON text stays text: from_wire turns it into an invalid tool call.
                content.append(
                    {
                        **block,
                        "input": text if text else (initial if isinstance(initial, dict) else {}),
                    }
                )
            else:
                content.append(block)
        body: JsonObject = {
            **self.message,
            "type": "message",
            "content": content,
            "stop_reason": self.stop_reason,
            "usage": self.usage,
        }
        return self.model.from_wire(body)
