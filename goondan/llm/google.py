"""Google Gemini API adapter (``generateContent`` / ``streamGenerateContent``).

Wire format (default endpoint ``https://generativelanguage.googleapis.com/v1beta``; header
``x-goog-api-key`` — the key never goes into the URL)::

    POST {endpoint}/models/{model}:generateContent
    POST {endpoint}/models/{model}:streamGenerateContent?alt=sse

    {"contents": [{"role": "user"|"model", "parts": [...]}],
     "systemInstruction": {"parts": [{"text": ...}]},
     "tools": [{"functionDeclarations": [{"name", "description", "parametersJsonSchema"}]}],
     "generationConfig": {"temperature", "topP", "maxOutputTokens", ...}}

Messages: the system prompt and every system message of the conversation (docs/models.md) are
joined, in order, by a blank line into ``systemInstruction``. Assistant turns are role
``model`` with ``text`` and ``functionCall`` (``name``, ``args``) parts; tool results are
``functionResponse`` parts (``name``, ``response``) in a role ``user`` turn, ``response`` being
``{"output": value}`` or ``{"error": value}`` as the API documents. Consecutive messages that map
to the same role are merged, so the responses to parallel calls travel in one turn.

Tool schemas go in ``parametersJsonSchema`` (full JSON Schema) rather than ``parameters`` (an
OpenAPI subset that rejects keys such as ``additionalProperties``).

Parameters: ``temperature``, ``topP`` and ``maxTokens`` (→ ``maxOutputTokens``) go into
``generationConfig``; other keys too, except the request-level fields ``safetySettings``,
``toolConfig``, ``cachedContent`` and ``labels``; a ``generationConfig`` object is merged.

Tool-call ids: Gemini usually sends none, so each such call gets a random id (prefix ``gcall-``),
unique in the conversation; a stream gives the call its id when the call arrives, so its deltas
and the final response agree. A call id Gemini did send (``functionCall.id``) is used as is and
echoed in ``functionResponse.id``; generated ids are never sent back.

Thought signatures: a ``thoughtSignature`` next to a ``functionCall`` is returned in
``ModelResponse.provider_metadata["google"]["thoughtSignatures"][call_id]``; a canonical tool-call
part carrying ``providerOptions.google.thoughtSignature`` sends it back.

Responses: ``candidates[0].content.parts`` (``thought: true`` parts are not text),
``finishReason`` (STOP → stop, or tool_calls when the reply has function calls; MAX_TOKENS →
length; SAFETY / RECITATION / BLOCKLIST / PROHIBITED_CONTENT / SPII / IMAGE_SAFETY →
content_filter; MALFORMED_FUNCTION_CALL → error; others → other), ``promptFeedback.blockReason``
(→ content_filter), ``usageMetadata`` (``promptTokenCount``, ``candidatesTokenCount`` +
``thoughtsTokenCount``, ``totalTokenCount``, ``cachedContentTokenCount``). A stream is a sequence
of such responses; text parts are increments, function calls arrive whole, the last chunk carries
``finishReason`` and the final usage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from goondan.config.providers import PROVIDERS
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
    new_call_id,
    parts_text,
    stream_cut,
    tool_call_input,
    tool_result_value,
)
from goondan.llm.sse import SseEvent
from goondan.llm.wire import Converter, RawJson, WireCache, encode_chunks
from goondan.types import JsonObject, TokenUsage, ToolCall, ToolCatalogItem

__all__ = ["DEFAULT_ENDPOINT", "GENERATED_ID_PREFIX", "GoogleModel", "create_google"]

DEFAULT_ENDPOINT = PROVIDERS["google"].endpoint
GENERATED_ID_PREFIX = "gcall-"
_REQUEST_LEVEL = ("safetySettings", "toolConfig", "cachedContent", "labels")
_FILTERED = ("SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY")


def _finish(raw: str | None, has_calls: bool) -> FinishReason:
    if raw is None or raw == "STOP":
        return "tool_calls" if has_calls else "stop"
    if raw == "MAX_TOKENS":
        return "length"
    if raw in _FILTERED:
        return "content_filter"
    if raw in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"):
        return "error"
    return "other"


def messages_to_wire(
    messages: Sequence[JsonObject], system: str | None
) -> tuple[str, list[JsonObject]]:
    """Canonical messages → (``systemInstruction`` text, ``contents``)."""
    converter = ContentsConverter().convert(messages)
    return _system_text(system, converter.system_texts), converter.out


def _system_text(system: str | None, texts: list[str]) -> str:
    return "\n\n".join([system, *texts] if system else texts)


class ContentsConverter(Converter):
    """Gemini ``contents`` conversion, one message at a time (same-role messages merge)."""

    merges = True
    merge_key = "parts"

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, str] = {}  # tool call id → function name, for functionResponse.name

    def feed(self, message: JsonObject) -> None:
        out = self.out
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):  # the common case: plain text
            if role == "system":
                if content:
                    self.system_texts.append(content)
            elif content and role != "tool":
                append_turn(out, "model" if role == "assistant" else "user", [{"text": content}],
                            "parts")
            return
        parts = content_parts(message)
        if role == "system":
            text = parts_text(parts)
            if text:
                self.system_texts.append(text)
            return
        names = self.names
        wire: list[JsonObject] = []
        for part in parts:
            kind = part.get("type")
            if kind == "text" and part.get("text"):
                wire.append({"text": str(part["text"])})
            elif kind == "tool-call" and role == "assistant":
                identifier = str(part.get("toolCallId", ""))
                name = str(part.get("toolName", ""))
                names[identifier] = name
                call: JsonObject = {"name": name, "args": tool_call_input(part)}
                if identifier and not identifier.startswith(GENERATED_ID_PREFIX):
                    call["id"] = identifier
                item: JsonObject = {"functionCall": call}
                options = part.get("providerOptions")
                google = options.get("google") if isinstance(options, dict) else None
                if isinstance(google, dict) and google.get("thoughtSignature"):
                    item["thoughtSignature"] = google["thoughtSignature"]
                wire.append(item)
            elif kind == "tool-result":
                identifier = str(part.get("toolCallId", ""))
                key = "error" if is_error_output(part) else "output"
                response: JsonObject = {
                    "name": str(part.get("toolName") or names.get(identifier, "")),
                    "response": {key: tool_result_value(part)},
                }
                if identifier and not identifier.startswith(GENERATED_ID_PREFIX):
                    response["id"] = identifier
                wire.append({"functionResponse": response})
        if role == "assistant":
            append_turn(out, "model", wire, "parts")
        else:
            # results first: they answer the model turn that precedes them
            responses_first = [p for p in wire if "functionResponse" in p] + [
                p for p in wire if "text" in p
            ]
            append_turn(out, "user", responses_first, "parts")


def tools_to_wire(tools: list[ToolCatalogItem]) -> list[JsonObject]:
    """Tool catalog → one ``functionDeclarations`` tool."""
    declarations: list[JsonObject] = []
    for tool in tools:
        item: JsonObject = {"name": tool.name, "parametersJsonSchema": tool.parameters}
        if tool.description:
            item["description"] = tool.description
        declarations.append(item)
    return [{"functionDeclarations": declarations}]


def usage_from_wire(usage: Any) -> TokenUsage:
    """``usageMetadata`` → :class:`TokenUsage` (output includes thinking tokens)."""
    if not isinstance(usage, dict):
        return TokenUsage.unknown()  # never reported: unknown, not zero
    prompt = int(usage.get("promptTokenCount") or 0)
    output = int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)
    cached = usage.get("cachedContentTokenCount")
    return TokenUsage(
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=int(usage.get("totalTokenCount") or prompt + output),
        cached_tokens=int(cached) if cached is not None else None,
    )


class GoogleModel(HttpModel):
    """Gemini API over urllib3 (``provider: google``)."""

    provider = "google"
    label = "Gemini"
    default_endpoint = DEFAULT_ENDPOINT
    key_env = PROVIDERS["google"].key_env

    def url(self, *, stream: bool) -> str:
        model = self.spec.model.removeprefix("models/")
        base = f"{self.endpoint}/models/{quote(model, safe='-_.')}"
        return f"{base}:streamGenerateContent?alt=sse" if stream else f"{base}:generateContent"

    def headers(self) -> dict[str, str]:
        key = self.api_key()
        return {"x-goog-api-key": key} if key else {}

    def to_wire(self, request: ModelRequest, *, stream: bool = False) -> JsonObject:
        """Build the ``GenerateContentRequest`` body (the same for streaming)."""
        system, contents = messages_to_wire(request.messages, request.system)
        return self._body(request, system, contents)

    def payload(self, request: ModelRequest, *, stream: bool = False) -> list[bytes]:
        """The encoded body, in chunks; only messages new since the last request are
        converted and encoded (:class:`~goondan.llm.wire.WireCache`)."""
        if type(self).to_wire is not GoogleModel.to_wire:  # a subclass builds its own body
            return super().payload(request, stream=stream)
        if self._wire is None:
            self._wire = WireCache(ContentsConverter)
        converter, items = self._wire.convert(request.messages)
        system = _system_text(request.system, converter.system_texts)
        return encode_chunks(self._body(request, system, RawJson.array(items)))

    def _body(self, request: ModelRequest, system: str, contents: object) -> JsonObject:
        body: JsonObject = {}
        config: JsonObject = {}
        names = {"temperature": "temperature", "topP": "topP", "maxTokens": "maxOutputTokens"}
        for source in (self.spec.options, request.params):
            for key, value in source.items():
                if value is None:
                    continue
                if key in _REQUEST_LEVEL:
                    body[key] = value
                elif key == "generationConfig" and isinstance(value, dict):
                    config.update(value)
                else:
                    config[names.get(key, key)] = value
        body["contents"] = contents
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if request.tools:
            body["tools"] = tools_to_wire(request.tools)
        if config:
            body["generationConfig"] = config
        return body

    def from_wire(self, body: JsonObject, *, request: ModelRequest | None = None) -> ModelResponse:
        """Parse a ``GenerateContentResponse``."""
        error = body.get("error")
        if isinstance(error, dict):
            status = int(error.get("code") or 500)
            raise error_for_status(status, json.dumps(body).encode(), {}, label=self.label)
        candidates = body.get("candidates")
        feedback = as_object(body.get("promptFeedback"))
        usage = usage_from_wire(body.get("usageMetadata"))
        model = (
            body.get("modelVersion")
            if isinstance(body.get("modelVersion"), str)
            else self.spec.model
        )
        response_id = str(body.get("responseId") or "")
        metadata: JsonObject = {"id": response_id} if response_id else {}
        if not candidates:
            if feedback.get("blockReason"):
                metadata["blockReason"] = feedback["blockReason"]
                return ModelResponse(
                    text="", finish_reason="content_filter", usage=usage,
                    raw_finish_reason=str(feedback["blockReason"]), model=model,
                    provider_metadata=metadata,
                )
            raise bad_shape(self.label, "no candidates in the response")
        candidate = candidates[0]
        if not isinstance(candidate, dict):
            raise bad_shape(self.label, "candidates[0] is not an object")
        content = as_object(candidate.get("content"))
        texts: list[str] = []
        calls: list[ToolCall] = []
        signatures: dict[str, str] = {}
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str) and not part.get("thought"):
                texts.append(part["text"])
            call = part.get("functionCall")
            if isinstance(call, dict):
                name = str(call.get("name") or "")
                args = as_object(call.get("args"))
                identifier = str(call.get("id") or "") or new_call_id(GENERATED_ID_PREFIX)
                calls.append(ToolCall(id=identifier, name=name, args=args))
                if part.get("thoughtSignature"):
                    signatures[identifier] = str(part["thoughtSignature"])
        if signatures:
            metadata["google"] = {"thoughtSignatures": signatures}
        raw_finish = candidate.get("finishReason")
        return ModelResponse(
            text="".join(texts),
            tool_calls=calls,
            finish_reason=_finish(str(raw_finish) if raw_finish else None, bool(calls)),
            usage=usage,
            raw_finish_reason=str(raw_finish) if raw_finish is not None else None,
            model=model,
            provider_metadata=metadata,
            tool_call_options={
                call_id_: {"google": {"thoughtSignature": sig}}
                for call_id_, sig in signatures.items()
            },
        )

    def new_stream(self, request: ModelRequest | None = None) -> GoogleStream:
        return GoogleStream(self, request)


def create_google(
    spec: ModelSpec, *, retry_policy: RetryPolicy | None = None, base_dir: Any = None
) -> GoogleModel:
    """The factory of ``provider: google`` / ``gemini`` (goondan/config/providers.py)."""
    return GoogleModel(spec, retry_policy=retry_policy)


class GoogleStream(StreamAccumulator):
    """Accumulates streamed ``GenerateContentResponse`` chunks into one response body."""

    def __init__(self, model: GoogleModel, request: ModelRequest | None) -> None:
        self.model = model
        self.request = request
        self.parts: list[JsonObject] = []
        self.calls = 0
        self.last: JsonObject = {}
        self.finish_reason: str | None = None
        self.blocked = False
        self.done = False

    def feed(self, event: SseEvent) -> list[StreamDelta]:
        chunk = load_event_json(event, self.model.label)
        if isinstance(chunk, list) and chunk:  # tolerate a JSON-array framed chunk
            chunk = chunk[0]
        if not isinstance(chunk, dict):
            raise bad_shape(self.model.label, "a stream chunk that is not an object")
        if isinstance(chunk.get("error"), dict):
            self.model.from_wire(chunk)  # raises the mapped error
        for key in ("usageMetadata", "modelVersion", "responseId", "promptFeedback"):
            if key in chunk:
                self.last[key] = chunk[key]
        if isinstance(chunk.get("promptFeedback"), dict) and chunk["promptFeedback"].get(
            "blockReason"
        ):
            self.blocked = True
        deltas: list[StreamDelta] = []
        candidates = chunk.get("candidates") or []
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
        content = as_object(candidate.get("content"))
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            text = part.get("text")
            if isinstance(text, str) and not part.get("thought") and "functionCall" not in part:
                if self.parts and set(self.parts[-1]) == {"text"}:
                    self.parts[-1]["text"] += text
                else:
                    self.parts.append({"text": text})
                if text:
                    deltas.append(StreamDelta(kind="text", text=text))
            elif isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                name = str(call.get("name") or "")
                args = as_object(call.get("args"))
                identifier = str(call.get("id") or "")
                if not identifier:  # kept on the part, so the final response has the same id
                    identifier = new_call_id(GENERATED_ID_PREFIX)
                    part = {**part, "functionCall": {**call, "id": identifier}}
                self.parts.append(part)
                deltas.append(StreamDelta(
                    kind="tool_call", index=self.calls, tool_call_id=identifier, tool_name=name,
                    args_delta=json.dumps(args, ensure_ascii=False),
                ))
                self.calls += 1
            else:
                self.parts.append(part)  # thoughts and other parts: kept, not text
        if candidate.get("finishReason"):
            self.finish_reason = str(candidate["finishReason"])
            self.done = False  # keep reading: usage may follow in the same or a later chunk
        return deltas

    def finish(self) -> ModelResponse:
        if self.finish_reason is None and not self.blocked:
            raise stream_cut(self.model.label, "no finishReason")
        body: JsonObject = dict(self.last)
        if self.parts or self.finish_reason:
            body["candidates"] = [{
                "content": {"role": "model", "parts": self.parts},
                "finishReason": self.finish_reason,
            }]
        return self.model.from_wire(body, request=self.request)
