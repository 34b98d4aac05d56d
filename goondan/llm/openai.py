"""OpenAI Chat Completions adapter (also every OpenAI-compatible server: Ollama, vLLM, llama.cpp,
LM Studio, ...).

Wire format (POST ``{endpoint}/chat/completions``, default endpoint ``https://api.openai.com/v1``,
header ``Authorization: Bearer <key>``)::

    {"model": ..., "messages": [...], "tools": [{"type": "function", "function":
     {"name", "description", "parameters"}}], "temperature", "top_p",
     "max_completion_tokens" | "max_tokens", "stream": true,
     "stream_options": {"include_usage": true}, ...passthrough}

Messages: the agent's system prompt is a leading ``{"role": "system"}`` message; system messages
inside the conversation stay where they are. Assistant tool calls become ``tool_calls``
(``arguments`` is JSON text). Without text, ``content`` is null for api.openai.com and ``""``
for every other server: llama-cpp-python and other compatible servers answer HTTP 500 to a
null content, and OpenAI accepts both. Each tool-result part
becomes its own ``{"role": "tool", "tool_call_id", "content"}`` message, with JSON outputs
serialised to text (errors included: the error JSON is the content).

``maxTokens`` maps to ``max_completion_tokens`` for the real OpenAI endpoint and to the more
widely supported ``max_tokens`` for any other endpoint (``provider: openai-compatible`` or a
custom ``spec.endpoint``); ``options.maxTokensField`` overrides the choice.

Responses: ``choices[0].message`` (``content``, ``tool_calls``), ``finish_reason``
(stop / length / tool_calls / content_filter / function_call), ``usage`` (``prompt_tokens``,
``completion_tokens``, ``total_tokens``, ``prompt_tokens_details.cached_tokens``). Streams are
``chat.completion.chunk`` objects with ``choices[0].delta`` (``content``; ``tool_calls`` keyed by
``index``, the first fragment carrying ``id`` and ``function.name``, later ones
``function.arguments`` text), a final usage-only chunk (``choices: []``) and ``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from goondan.config.providers import PROVIDERS
from goondan.llm.base import FinishReason, ModelRequest, ModelResponse, ModelSpec, StreamDelta
from goondan.llm.http import HttpTransport, RetryPolicy, error_for_status
from goondan.llm.provider import (
    HttpModel,
    StreamAccumulator,
    bad_shape,
    content_parts,
    load_event_json,
    merge_params,
    new_call_id,
    stream_cut,
    stream_empty,
    to_json_text,
    tool_call,
    tool_call_input,
    tool_result_text,
)
from goondan.llm.sse import SseEvent
from goondan.llm.wire import Converter, RawJson, WireCache, encode_chunks, encode_json
from goondan.types import JsonObject, TokenUsage, ToolCall, ToolCatalogItem

__all__ = [
    "DEFAULT_ENDPOINT",
    "ChatConverter",
    "OpenAIModel",
    "create_compatible",
    "create_openai",
    "messages_to_wire",
]

DEFAULT_ENDPOINT = PROVIDERS["openai"].endpoint

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def messages_to_wire(
    messages: Sequence[JsonObject], system: str | None, *, empty_content: str | None = None
) -> list[JsonObject]:
    """Canonical messages (+ system prompt) → Chat Completions ``messages``.

    ``empty_content`` is the ``content`` of an assistant message that only calls tools.
    """
    out = [{"role": "system", "content": system}] if system else []
    return out + ChatConverter(empty_content).convert(messages).out


class ChatConverter(Converter):
    """Chat Completions conversion, one message at a time (every item is final at once)."""

    def __init__(self, empty_content: str | None = None) -> None:
        super().__init__()
        self.empty_content = empty_content

    def feed(self, message: JsonObject) -> None:
        out = self.out
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):  # the common case: plain text, one message
            if role != "tool":
                out.append(
                    {
                        "role": role if role in ("system", "assistant") else "user",
                        "content": content,
                    }
                )
            return
        parts = content_parts(message)
        if role == "assistant":
            texts: list[str] = []
            calls: list[JsonObject] = []
            for p in parts:
                kind = p.get("type")
                if kind == "text":
                    texts.append(str(p.get("text") or ""))
                elif kind == "tool-call":
                    calls.append({
                        "id": str(p.get("toolCallId", "")),
                        "type": "function",
                        "function": {
                            "name": str(p.get("toolName", "")),
                            "arguments": to_json_text(tool_call_input(p)),
                        },
                    })
            text = "".join(texts)
            item: JsonObject = {
                "role": "assistant",
                "content": text if text or not calls else self.empty_content,
            }
            if calls:
                item["tool_calls"] = calls
            out.append(item)
            return
        text_parts: list[JsonObject] = []
        for part in parts:
            kind = part.get("type")
            if kind == "tool-result":
                out.append({
                    "role": "tool",
                    "tool_call_id": str(part.get("toolCallId", "")),
                    "content": tool_result_text(part),
                })
            elif kind == "text":
                text_parts.append(part)
        if role == "tool" or not text_parts:
            return
        wire_role = "system" if role == "system" else "user"
        if len(text_parts) == 1:
            out.append({"role": wire_role, "content": str(text_parts[0].get("text") or "")})
        else:
            out.append({
                "role": wire_role,
                "content": [{"type": "text", "text": str(p.get("text") or "")} for p in text_parts],
            })


def tools_to_wire(tools: list[ToolCatalogItem]) -> list[JsonObject]:
    """Tool catalog → ``tools`` (function tools)."""
    out: list[JsonObject] = []
    for tool in tools:
        function: JsonObject = {"name": tool.name, "parameters": tool.parameters}
        if tool.description:
            function["description"] = tool.description
        out.append({"type": "function", "function": function})
    return out


def usage_from_wire(usage: Any) -> TokenUsage:
    """``usage`` object → :class:`TokenUsage` (cached from ``prompt_tokens_details``)."""
    if not isinstance(usage, dict):
        return TokenUsage.unknown()  # never reported (a stream without a usage chunk): not zero
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return TokenUsage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=int(usage.get("total_tokens") or prompt + completion),
        cached_tokens=int(cached) if cached is not None else None,
    )


class OpenAIModel(HttpModel):
    """Chat Completions over urllib3 (``provider: openai`` / ``openai-compatible``)."""

    provider = "openai"
    label = "OpenAI"
    default_endpoint = DEFAULT_ENDPOINT
    key_env = PROVIDERS["openai"].key_env
    base_url_env = PROVIDERS["openai"].base_url_env

    def __init__(
        self,
        spec: ModelSpec,
        *,
        retry_policy: RetryPolicy | None = None,
        transport: HttpTransport | None = None,
        compatible: bool | None = None,
    ) -> None:
        self.compatible = spec.provider == "openai-compatible" if compatible is None else compatible
        if self.compatible:
            self.label = "OpenAI-compatible server"
        super().__init__(spec, retry_policy=retry_policy, transport=transport)
        if self.compatible:
            self.provider = "openai-compatible"

    def env_names(self) -> tuple[str, ...]:
        # An OpenAI key is never sent to a third-party server unless the Model names it.
        return () if self.compatible else super().env_names()

    def key_required(self) -> bool:
        # Local servers (Ollama, llama.cpp ...) usually run without authentication.
        return bool(self.spec.api_key_env) if self.compatible else super().key_required()

    def url(self, *, stream: bool) -> str:
        return f"{self.endpoint}/chat/completions"

    def headers(self) -> dict[str, str]:
        key = self.api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _max_tokens_field(self) -> str:
        chosen = self.spec.options.get("maxTokensField")
        if isinstance(chosen, str) and chosen:
            return chosen
        if self.compatible or self.endpoint != DEFAULT_ENDPOINT:
            return "max_tokens"
        return "max_completion_tokens"

    def _empty_content(self) -> str | None:
        # The endpoint never changes after construction: worked out once (it parses the URL).
        empty = self.__dict__.get("_empty")
        if empty is None:
            empty = self.__dict__["_empty"] = (
                None if self.is_public_endpoint() and not self.compatible else "",
            )
        return empty[0]

    def to_wire(self, request: ModelRequest, *, stream: bool = False) -> JsonObject:
        """Build the Chat Completions request body."""
        messages = messages_to_wire(
            request.messages, request.system, empty_content=self._empty_content()
        )
        return self._body(request, messages, stream=stream)

    def payload(self, request: ModelRequest, *, stream: bool = False) -> list[bytes]:
        """The encoded body, in chunks; only messages new since the last request are
        converted and encoded (:class:`~goondan.llm.wire.WireCache`)."""
        if type(self).to_wire is not OpenAIModel.to_wire:  # a subclass builds its own body
            return super().payload(request, stream=stream)
        empty = self._empty_content()
        if self._wire is None:
            self._wire = WireCache(lambda: ChatConverter(empty))
        _, items = self._wire.convert(request.messages, empty)
        first = (
            encode_json({"role": "system", "content": request.system}) if request.system else None
        )
        return encode_chunks(self._body(request, RawJson.array(items, first), stream=stream))

    def _body(self, request: ModelRequest, messages: object, *, stream: bool) -> JsonObject:
        options = {k: v for k, v in self.spec.options.items() if k != "maxTokensField"}
        body = merge_params(
            options,
            request.params,
            {"temperature": "temperature", "topP": "top_p", "maxTokens": self._max_tokens_field()},
        )
        body["model"] = self.spec.model
        body["messages"] = messages
        if request.tools:
            body["tools"] = tools_to_wire(request.tools)
        if stream:
            body["stream"] = True
            options_value = body.get("stream_options")
            stream_options = dict(options_value) if isinstance(options_value, dict) else {}
            stream_options.setdefault("include_usage", True)
            body["stream_options"] = stream_options
        else:
            body.pop("stream", None)
            body.pop("stream_options", None)
        return body

    def from_wire(self, body: JsonObject, *, request: ModelRequest | None = None) -> ModelResponse:
        """Parse a ``chat.completion`` object."""
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise bad_shape(self.label, "no choices in the completion")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise bad_shape(self.label, "choices[0].message is missing")
        content = message.get("content")
        if isinstance(content, list):  # some compatible servers return text parts
            content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
        calls: list[ToolCall] = []
        for raw in message.get("tool_calls") or []:
            if not isinstance(raw, dict) or not isinstance(raw.get("function"), dict):
                raise bad_shape(self.label, "a tool call without a function")
            function = raw["function"]
            name = str(function.get("name") or "")
            calls.append(
                tool_call(
                    str(raw.get("id") or new_call_id("call_")), name, function.get("arguments")
                )
            )
        raw_finish = choice.get("finish_reason")
        finish: FinishReason = _FINISH.get(str(raw_finish), "other") if raw_finish else "stop"
        if calls and finish == "stop":
            finish = "tool_calls"  # some compatible servers say "stop" after tool calls
        metadata: JsonObject = {}
        if body.get("id"):
            metadata["id"] = body["id"]
        if message.get("refusal"):
            metadata["refusal"] = message["refusal"]
        return ModelResponse(
            text=content if isinstance(content, str) else "",
            tool_calls=calls,
            finish_reason=finish,
            usage=usage_from_wire(body.get("usage")),
            raw_finish_reason=str(raw_finish) if raw_finish is not None else None,
            model=body.get("model") if isinstance(body.get("model"), str) else self.spec.model,
            provider_metadata=metadata,
        )

    def new_stream(self, request: ModelRequest | None = None) -> OpenAIStream:
        return OpenAIStream(self)


def create_openai(
    spec: ModelSpec, *, retry_policy: RetryPolicy | None = None, base_dir: Any = None
) -> OpenAIModel:
    """The factory of ``provider: openai`` (goondan/config/providers.py)."""
    return OpenAIModel(spec, retry_policy=retry_policy, compatible=False)


def create_compatible(
    spec: ModelSpec, *, retry_policy: RetryPolicy | None = None, base_dir: Any = None
) -> OpenAIModel:
    """The factory of ``provider: openai-compatible``."""
    return OpenAIModel(spec, retry_policy=retry_policy, compatible=True)


class OpenAIStream(StreamAccumulator):
    """Accumulates ``chat.completion.chunk`` events into a ``chat.completion`` body."""

    def __init__(self, model: OpenAIModel) -> None:
        self.model = model
        self.text: list[str] = []
        self.calls: dict[int, JsonObject] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.meta: JsonObject = {}
        self.refusal: list[str] = []
        self.done = False

    def feed(self, event: SseEvent) -> list[StreamDelta]:
        data = event.data
        if data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = load_event_json(event, self.model.label)
        if not isinstance(chunk, dict):
            raise bad_shape(self.model.label, "a stream chunk that is not an object")
        if "error" in chunk and "choices" not in chunk:
            raise error_for_status(
                500, json.dumps(chunk).encode(), {}, label=self.model.label
            )
        for key in ("id", "model"):
            if chunk.get(key) and key not in self.meta:
                self.meta[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        deltas: list[StreamDelta] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.text.append(text)
                deltas.append(StreamDelta(kind="text", text=text))
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            for position, raw in enumerate(delta.get("tool_calls") or []):
                deltas.append(self._tool_delta(raw, position))
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return deltas

    def _tool_delta(self, raw: Mapping[str, Any], position: int) -> StreamDelta:
        index = raw.get("index")
        if not isinstance(index, int):
            index = position
        call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        function = raw.get("function") or {}
        if raw.get("id"):
            call["id"] = str(raw["id"])
        name = function.get("name")
        if name:
            call["name"] = str(name)
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # a few compatible servers send parsed objects
            arguments = json.dumps(arguments)
        args_delta = arguments if isinstance(arguments, str) else ""
        call["arguments"].append(args_delta)
        return StreamDelta(
            kind="tool_call", index=index, tool_call_id=raw.get("id") or None,
            tool_name=name or None, args_delta=args_delta,
        )

    def finish(self) -> ModelResponse:
        if self.finish_reason is None and not self.text and not self.calls and not self.refusal:
            # llama-cpp-python ends a stream like this when it cannot stream the tool choice.
            raise stream_empty(self.model.label)
        if not self.done and self.finish_reason is None:
            raise stream_cut(self.model.label, "no finish_reason and no [DONE]")
        message: JsonObject = {"role": "assistant", "content": "".join(self.text)}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"] or new_call_id("call_"),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self.calls.items())
            ]
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        body: JsonObject = {
            **self.meta,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return self.model.from_wire(body)
