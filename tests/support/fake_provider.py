"""A loopback HTTP server speaking the OpenAI, Anthropic and Gemini wire formats.

Modelled on urllib3's ``dummyserver`` and httpx's test server: a ``ThreadingHTTPServer`` on
``127.0.0.1:0`` in a daemon thread, started and stopped by the ``fake_provider`` fixture
(``tests/llm/conftest.py``). Tests queue provider-neutral :class:`FakeReply` objects; each
request takes the next one and gets it rendered in the wire format of the path it hit:

* ``POST /v1/chat/completions``                        OpenAI Chat Completions (``stream`` in body)
* ``POST /v1/messages``                                 Anthropic Messages (``stream`` in body)
* ``POST /v1beta/models/{model}:generateContent``       Gemini
* ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``  Gemini, streamed

Every request is recorded (:class:`RecordedRequest`: method, path, query, headers, parsed JSON
body, monotonic timestamp). Replies can be text, several tool calls, usage numbers, HTTP errors
in each provider's error JSON, delays, ``429`` + ``Retry-After``, malformed JSON, truncated
streams (connection dropped mid-stream) and a "hang" mode for cancellation tests.

Behaviours of real servers seen outside the providers' own APIs (docs/models.md "Local and
compatible servers"): ``FakeProvider(behaviour="llama-cpp")`` answers an OpenAI request that
holds an assistant message with ``content: null`` with HTTP 500 and a validation report, as
llama-cpp-python does; :meth:`FakeReply.context_length_exceeded` renders the 400 of OpenAI
(``context_length_exceeded``), Anthropic ("prompt is too long") or llama.cpp's server
(``exceed_context_size_error``); :meth:`FakeReply.empty_stream` ends an OpenAI stream with no
content and no finish reason; ``usage=False`` leaves usage out (a stream without the
``include_usage`` chunk); :meth:`FakeReply.validation_error` is a 500 whose body is a
validation report. ``for_model`` makes a reply wait for a request of that model, so several
agents can share one server deterministically.

Wire shapes follow the providers' public references: OpenAI ``chat.completion`` /
``chat.completion.chunk`` (tool-call deltas by ``index``, the ``include_usage`` chunk with empty
``choices`` before ``[DONE]``); Anthropic ``message`` and the SSE events ``message_start``,
``content_block_start``/``_delta`` (``text_delta``, ``input_json_delta``)/``_stop``, ``ping``,
``message_delta`` (``stop_reason``, cumulative ``output_tokens``), ``message_stop``; Gemini
``GenerateContentResponse`` (``candidates[].content.parts[]`` with ``text``/``functionCall``,
``finishReason``, ``usageMetadata``), one JSON object per ``data:`` line with CRLF framing.
Streams use chunked transfer encoding, so a truncated stream is a protocol error for the
client, as it is with the real services.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

from goondan.config.providers import PROVIDERS

__all__ = [
    "FakeProvider",
    "FakeReply",
    "FakeToolCall",
    "Provider",
    "RecordedRequest",
]

Provider = Literal["openai", "anthropic", "google"]
Finish = Literal["stop", "tool_calls", "length", "content_filter"]

_HANG_LIMIT_S = 30.0  # a hung handler never outlives a forgotten test by more than this

_FINISH_WIRE: dict[str, dict[str, str]] = {
    "openai": {"stop": "stop", "tool_calls": "tool_calls", "length": "length",
               "content_filter": "content_filter"},
    "anthropic": {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens",
                  "content_filter": "refusal"},
    "google": {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS",
               "content_filter": "SAFETY"},
}

_OPENAI_ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
                       403: "invalid_request_error", 404: "invalid_request_error",
                       429: "requests", 500: "server_error", 503: "server_error"}
_OPENAI_ERROR_CODES = {401: "invalid_api_key", 404: "model_not_found", 429: "rate_limit_exceeded"}
_ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                          403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                          429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
# llama-cpp-python's answer to an assistant message whose content is null (pydantic report).
_LLAMA_CPP_NULL_CONTENT: dict[str, Any] = {
    "error": {
        "message": "1 validation error for "
        "ChatCompletionRequestAssistantMessage\ncontent\n  Input should "
        "be a valid string [type=string_type, input_value=None, input_type=NoneType]",
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}

_GOOGLE_STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                    404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                    503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


@dataclass
class FakeToolCall:
    """One tool call in a reply; ``id`` defaults to a provider-style generated id."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass
class FakeReply:
    """One scripted response, rendered in the wire format of the request that takes it.

    ``truncate_after`` sends that many SSE events, then drops the connection (no final chunk).
    ``hang`` never answers (until the client disconnects or the server stops);
    ``hang_after`` streams that many events and then hangs. ``body`` replaces the rendered body
    verbatim (malformed JSON); ``raw_events`` replaces the rendered SSE events verbatim.
    """

    text: str = ""
    tool_calls: list[FakeToolCall] = field(default_factory=list)
    input_tokens: int = 11
    output_tokens: int = 7
    cached_tokens: int | None = None
    finish: Finish | None = None
    status: int = 200
    error_message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    event_delay_s: float = 0.0
    chunks: int = 3
    body: bytes | None = None
    raw_events: list[str] | None = None
    truncate_after: int | None = None
    hang: bool = False
    hang_after: int | None = None
    usage: bool = True  # False: no usage anywhere (JSON body or stream chunk)
    error_json: dict[str, Any] | None = None  # replaces the rendered error body
    for_model: str | None = None  # only a request for this model takes the reply
    serial: int = 0  # set by FakeProvider.enqueue: 1, 2, ... in queue order (tool-call ids use it)
    call_ids: bool = True  # False: tool calls carry no id at all, as some OpenAI-compatible servers

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def reply(cls, text: str, **kwargs: Any) -> FakeReply:
        """A plain text reply."""
        return cls(text=text, **kwargs)

    @classmethod
    def calls(cls, *calls: FakeToolCall | tuple[str, dict[str, Any]], text: str = "",
              **kwargs: Any) -> FakeReply:
        """A reply with one or more tool calls (``FakeToolCall`` or ``(name, args)`` tuples)."""
        items = [
            c if isinstance(c, FakeToolCall) else FakeToolCall(c[0], dict(c[1])) for c in calls
        ]
        return cls(text=text, tool_calls=items, **kwargs)

    @classmethod
    def error(cls, status: int, message: str = "fake provider error", *,
              retry_after: str | None = None, **kwargs: Any) -> FakeReply:
        """An HTTP error in the provider's error JSON shape (``Retry-After`` when given)."""
        headers = dict(kwargs.pop("headers", {}))
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        return cls(status=status, error_message=message, headers=headers, **kwargs)

    @classmethod
    def context_length_exceeded(
        cls, flavour: Literal["openai", "anthropic", "llama.cpp"], **kwargs: Any
    ) -> FakeReply:
        """HTTP 400 "the prompt does not fit", in the shape ``flavour``'s server sends it."""
        bodies: dict[str, dict[str, Any]] = {
            "openai": {
                "error": {
                    "message": "This model's maximum context length is 4096 tokens. However, your "
                    "messages resulted in 5120 tokens. Please reduce the length of the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            "anthropic": {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 208310 tokens > 200000 maximum",
                },
                "request_id": "req_fake_context",
            },
            "llama.cpp": {
                "error": {
                    "code": 400,
                    "message": "request (5120 tokens) exceeds "
                    "the available context size (4096 tokens)",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 5120,
                    "n_ctx": 4096,
                }
            },
        }
        return cls(status=400, error_json=bodies[flavour], **kwargs)

    @classmethod
    def validation_error(cls, **kwargs: Any) -> FakeReply:
        """HTTP 500 whose body is a request validation report (llama-cpp-python's shape)."""
        return cls(status=500, error_json=_LLAMA_CPP_NULL_CONTENT, **kwargs)

    @classmethod
    def empty_stream(cls, **kwargs: Any) -> FakeReply:
        """An OpenAI stream that sends only the role chunk and ends: no content, no finish."""
        role = {"id": "chatcmpl-empty", "object": "chat.completion.chunk", "created": 1_700_000_000,
                "model": "fake", "choices": [{"index": 0, "delta": {"role": "assistant"},
                                              "logprobs": None, "finish_reason": None}]}
        return cls(raw_events=[f"data: {_dumps(role)}\n\n"], **kwargs)

    @classmethod
    def malformed(cls, body: bytes = b'{"id": "broken", "choices": [', **kwargs: Any) -> FakeReply:
        """A 200 response whose JSON body is cut short."""
        return cls(body=body, **kwargs)

    @classmethod
    def hanging(cls, **kwargs: Any) -> FakeReply:
        """Never answer: for cancellation and read-timeout tests."""
        return cls(hang=True, **kwargs)

    @property
    def finish_reason(self) -> str:
        return self.finish or ("tool_calls" if self.tool_calls else "stop")


@dataclass
class RecordedRequest:
    """What the server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: bytes
    json: Any
    timestamp: float  # time.monotonic()
    provider: Provider | None

    def header(self, name: str) -> str | None:
        """Header value by case-insensitive name."""
        return self.headers.get(name.lower())

    @property
    def stream(self) -> bool:
        if self.provider == "google":
            return ":streamGenerateContent" in self.path
        return isinstance(self.json, dict) and self.json.get("stream") is True

    @property
    def raw_text(self) -> str:
        """Headers and body as one string (for "the secret never leaks" style checks)."""
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.path}\n{head}\n\n{self.body.decode('utf-8', 'replace')}"


def _provider_of(path: str) -> Provider | None:
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/messages"):
        return "anthropic"
    if ":generateContent" in path or ":streamGenerateContent" in path:
        return "google"
    return None


def _null_content(body: Any) -> bool:
    messages = body.get("messages") if isinstance(body, dict) else None
    return any(isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") is None
               for m in messages or [])


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, parts)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _without_none(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` without an ``id`` of None (a server that sends no tool-call ids)."""
    return {k: v for k, v in item.items() if not (k == "id" and v is None)}


# -- renderers -----------------------------------------------------------------------------------


class _Renderer:
    """Renders a FakeReply for one request; ids are deterministic per server."""

    def __init__(self, provider: Provider, reply: FakeReply, model: str, seq: int,
                 include_usage: bool) -> None:
        self.provider = provider
        self.reply = reply
        self.model = model
        self.seq = seq
        self.include_usage = include_usage
        prefix = {"openai": "call_fake", "anthropic": "toolu_fake", "google": ""}[provider]
        # Ids depend on the reply, not the request: a reply queued twice (plain, then
        # streamed) yields the same ids, so the two results can be compared whole.
        self.call_ids = [c.id or (f"{prefix}{reply.serial}_{i}" if prefix else None)
                         if reply.call_ids else None for i, c in enumerate(reply.tool_calls)]

    @property
    def finish(self) -> str:
        return _FINISH_WIRE[self.provider][self.reply.finish_reason]

    # errors
    def error_body(self) -> dict[str, Any]:
        if self.reply.error_json is not None:
            return self.reply.error_json
        status, message = self.reply.status, self.reply.error_message or "error"
        if self.provider == "openai":
            return {
                "error": {
                    "message": message,
                    "type": _OPENAI_ERROR_TYPES.get(status, "api_error"),
                    "param": None,
                    "code": _OPENAI_ERROR_CODES.get(status),
                }
            }
        if self.provider == "anthropic":
            return {
                "type": "error",
                "error": {
                    "type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"),
                    "message": message,
                },
                "request_id": f"req_fake{self.seq}",
            }
        return {"error": {"code": status, "message": message,
                          "status": _GOOGLE_STATUSES.get(status, "UNKNOWN")}}

    # whole responses
    def json_body(self) -> dict[str, Any]:
        return getattr(self, f"_{self.provider}_json")()  # type: ignore[no-any-return]

    def events(self) -> list[str]:
        return getattr(self, f"_{self.provider}_events")()  # type: ignore[no-any-return]

    # OpenAI -------------------------------------------------------------------------------
    def _openai_usage(self) -> dict[str, Any]:
        r = self.reply
        return {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
                "total_tokens": r.input_tokens + r.output_tokens,
                "prompt_tokens_details": {"cached_tokens": r.cached_tokens or 0, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}}

    def _openai_base(self, obj: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-fake{self.seq}",
            "object": obj,
            "created": 1_700_000_000 + self.seq,
            "model": self.model,
            "system_fingerprint": "fp_fake",
        }

    def _openai_json(self) -> dict[str, Any]:
        r = self.reply
        message: dict[str, Any] = {"role": "assistant", "content": r.text or None, "refusal": None}
        if r.tool_calls:
            message["tool_calls"] = [
                _without_none({"id": cid, "type": "function",
                               "function": {"name": c.name, "arguments": _dumps(c.args)}})
                for c, cid in zip(r.tool_calls, self.call_ids, strict=True)
            ]
        out = self._openai_base("chat.completion")
        out["choices"] = [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish}
        ]
        if r.usage:
            out["usage"] = self._openai_usage()
        return out

    def _openai_chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        chunk = self._openai_base("chat.completion.chunk")
        chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if self.include_usage:
            chunk["usage"] = None
        return f"data: {_dumps(chunk)}\n\n"

    def _openai_events(self) -> list[str]:
        r = self.reply
        events = [self._openai_chunk({"role": "assistant", "content": "", "refusal": None})]
        events += [self._openai_chunk({"content": piece}) for piece in _split(r.text, r.chunks)]
        for index, (call, cid) in enumerate(zip(r.tool_calls, self.call_ids, strict=True)):
            events.append(self._openai_chunk({"tool_calls": [_without_none(
                {"index": index, "id": cid, "type": "function",
                 "function": {"name": call.name, "arguments": ""}})]}))
            for piece in _split(_dumps(call.args), r.chunks):
                events.append(self._openai_chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        events.append(self._openai_chunk({}, self.finish))
        if self.include_usage and r.usage:
            chunk = self._openai_base("chat.completion.chunk")
            chunk["choices"] = []
            chunk["usage"] = self._openai_usage()
            events.append(f"data: {_dumps(chunk)}\n\n")
        events.append("data: [DONE]\n\n")
        return events

    # Anthropic ----------------------------------------------------------------------------
    def _anthropic_blocks(self) -> list[dict[str, Any]]:
        r = self.reply
        blocks: list[dict[str, Any]] = []
        if r.text:
            blocks.append({"type": "text", "text": r.text})
        for call, cid in zip(r.tool_calls, self.call_ids, strict=True):
            blocks.append(
                _without_none(
                    {"type": "tool_use", "id": cid, "name": call.name, "input": call.args}
                )
            )
        return blocks

    def _anthropic_usage(self, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": self.reply.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": self.reply.cached_tokens or 0,
            "output_tokens": output_tokens,
        }

    def _anthropic_message(self, content: list[dict[str, Any]], stop: str | None,
                           output_tokens: int) -> dict[str, Any]:
        return {
            "id": f"msg_fake{self.seq}",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": self._anthropic_usage(output_tokens),
        }

    def _anthropic_json(self) -> dict[str, Any]:
        return self._anthropic_message(
            self._anthropic_blocks(), self.finish, self.reply.output_tokens
        )

    @staticmethod
    def _sse(event: str, data: dict[str, Any]) -> str:
        # The event name always equals the JSON "type".
        return f"event: {event}\ndata: {_dumps(data)}\n\n"

    def _anthropic_events(self) -> list[str]:
        r = self.reply
        ev = [self._sse("message_start", {"type": "message_start",
                                          "message": self._anthropic_message([], None, 1)})]
        index = 0
        if r.text:
            ev.append(
                self._sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            ev.append(self._sse("ping", {"type": "ping"}))
            for piece in _split(r.text, r.chunks):
                ev.append(
                    self._sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
            ev.append(self._sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
            index = 1
        for offset, (call, cid) in enumerate(zip(r.tool_calls, self.call_ids, strict=True)):
            i = index + offset
            ev.append(
                self._sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": i,
                        "content_block": _without_none(
                            {"type": "tool_use", "id": cid, "name": call.name, "input": {}}
                        ),
                    },
                )
            )
            for piece in ["", *_split(_dumps(call.args), r.chunks)]:
                ev.append(self._sse("content_block_delta", {
                    "type": "content_block_delta", "index": i,
                    "delta": {"type": "input_json_delta", "partial_json": piece}}))
            ev.append(self._sse("content_block_stop", {"type": "content_block_stop", "index": i}))
        ev.append(
            self._sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": self.finish, "stop_sequence": None},
                    "usage": {"output_tokens": r.output_tokens},
                },
            )
        )
        ev.append(self._sse("message_stop", {"type": "message_stop"}))
        return ev

    # Gemini -------------------------------------------------------------------------------
    def _google_usage(self, final: bool) -> dict[str, Any]:
        r = self.reply
        usage: dict[str, Any] = {"promptTokenCount": r.input_tokens}
        if final:
            usage["candidatesTokenCount"] = r.output_tokens
            usage["totalTokenCount"] = r.input_tokens + r.output_tokens
            if r.cached_tokens is not None:
                usage["cachedContentTokenCount"] = r.cached_tokens
        else:
            usage["totalTokenCount"] = r.input_tokens
        return usage

    def _google_call_parts(self) -> list[dict[str, Any]]:
        parts = []
        for call, cid in zip(self.reply.tool_calls, self.call_ids, strict=True):
            fc: dict[str, Any] = {"name": call.name, "args": call.args}
            if cid is not None:
                fc["id"] = cid
            parts.append({"functionCall": fc})
        return parts

    def _google_response(self, parts: list[dict[str, Any]], final: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if final:
            candidate["finishReason"] = self.finish
        return {"candidates": [candidate], "usageMetadata": self._google_usage(final),
                "modelVersion": self.model, "responseId": f"resp-fake{self.seq}"}

    def _google_json(self) -> dict[str, Any]:
        parts = [{"text": self.reply.text}] if self.reply.text else []
        return self._google_response(parts + self._google_call_parts(), final=True)

    def _google_events(self) -> list[str]:
        pieces = _split(self.reply.text, self.reply.chunks)
        calls = self._google_call_parts()
        bodies: list[tuple[list[dict[str, Any]], bool]] = [([{"text": p}], False) for p in pieces]
        # Function calls arrive whole, in the last chunk with finishReason and the full usage.
        if calls or not bodies:
            bodies.append((calls, True))
        else:
            bodies[-1] = (bodies[-1][0], True)
        return [
            f"data: {_dumps(self._google_response(parts, final))}\r\n\r\n"
            for parts, final in bodies
        ]


# -- server ----------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: FakeProvider

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (cancellation and cut-stream tests) are expected, not noise."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # Headers and body leave in separate writes: without TCP_NODELAY every reply waits for the
    # client's delayed ACK (~40 ms), which makes HTTP-heavy tests slow for nothing.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def do_GET(self) -> None:
        self._send_json(405, {"error": {"message": "fake provider: use POST"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        path = unquote(split.path)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        provider = _provider_of(path)
        recorded = RecordedRequest(
            method="POST", path=path, query=dict(parse_qsl(split.query)),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=raw, json=body, timestamp=time.monotonic(), provider=provider,
        )
        seq, reply = owner._record(recorded)
        if provider is None:
            self._send_json(404, {"error": {"message": f"fake provider: unknown path {path}"}})
            return
        if reply is None:
            # 418 is never retried, so an unscripted call fails fast and visibly.
            self._send_json(418, {"error": {"message": "fake provider: no scripted reply queued",
                                            "type": "fake_provider", "code": None}})
            return
        model = str(body.get("model", "")) if isinstance(body, dict) else ""
        if provider == "google":
            model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        include_usage = bool(
            isinstance(body, dict) and (body.get("stream_options") or {}).get("include_usage")
        )
        renderer = _Renderer(provider, reply, model, seq, include_usage)
        try:
            self._respond(renderer, recorded.stream)
        except OSError:  # includes ConnectionError: the client went away mid-write
            owner._note_disconnect()
            self.close_connection = True

    # -- responses ------------------------------------------------------------------------------
    def _respond(self, renderer: _Renderer, stream: bool) -> None:
        reply = renderer.reply
        if reply.delay_s and not self._wait(reply.delay_s):
            return
        if reply.hang:
            self._hang()
            return
        if reply.status >= 400:
            self._send_json(reply.status, renderer.error_body(), reply.headers)
            return
        if reply.body is not None:
            self._send_bytes(reply.status, reply.body, "application/json", reply.headers)
            return
        if not stream:
            self._send_json(reply.status, renderer.json_body(), reply.headers)
            return
        events = reply.raw_events if reply.raw_events is not None else renderer.events()
        self.send_response(reply.status)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for count, event in enumerate(events):
            if reply.truncate_after is not None and count >= reply.truncate_after:
                self._drop()
                return
            if reply.hang_after is not None and count >= reply.hang_after:
                self._hang()
                return
            if count and reply.event_delay_s and not self._wait(reply.event_delay_s):
                return
            data = event.encode("utf-8")
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, _dumps(data).encode("utf-8"), "application/json", headers or {})

    def _send_bytes(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str]
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _drop(self) -> None:
        """Close the connection abruptly: the chunked body never gets its final chunk."""
        self.wfile.flush()
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when the client left or the server is stopping."""
        deadline = time.monotonic() + seconds
        owner = self.server.owner
        while (left := deadline - time.monotonic()) > 0:
            if owner._stopping.wait(min(left, 0.02)):
                return False
            if self._client_gone():
                owner._note_disconnect()
                self.close_connection = True
                return False
        return True

    def _hang(self) -> None:
        self.wfile.flush()
        self._wait(_HANG_LIMIT_S)
        self.close_connection = True


class FakeProvider:
    """The server plus its reply queue and request log; usable as a context manager."""

    def __init__(self, *, behaviour: Literal["standard", "llama-cpp"] = "standard") -> None:
        self.behaviour = behaviour
        self._lock = threading.Condition()
        self._replies: deque[FakeReply] = deque()
        self._requests: list[RecordedRequest] = []
        self._seq = itertools.count(1)
        self._serials = itertools.count(1)
        self._disconnects = 0
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeProvider:
        """Bind 127.0.0.1:0 and serve in a daemon thread."""
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="fake-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Release hung handlers, stop serving and close the socket."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses -------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._server is not None, "fake provider not started"
        return int(self._server.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def base_url(self, provider: Provider) -> str:
        """The Model ``endpoint`` for ``provider``: this server's origin with the path of the
        provider's default endpoint in goondan's provider table (``/v1``, ``/v1beta``)."""
        return self.origin + urlsplit(PROVIDERS[provider].endpoint).path

    # -- scripting -------------------------------------------------------------------------------
    def enqueue(self, *replies: FakeReply | str) -> FakeProvider:
        """Queue replies (a string is a text reply); each request takes the next one."""
        with self._lock:
            for reply in replies:
                item = FakeReply(text=reply) if isinstance(reply, str) else reply
                if not item.serial:
                    item.serial = next(self._serials)
                self._replies.append(item)
        return self

    @property
    def pending(self) -> int:
        """Replies queued but not taken yet."""
        with self._lock:
            return len(self._replies)

    def assert_all_used(self) -> None:
        """AssertionError when queued replies were never requested."""
        assert self.pending == 0, f"{self.pending} fake reply(s) never requested"

    # -- inspection ------------------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def disconnects(self) -> int:
        """Clients that hung up while a handler was waiting (delay/hang): cancellation worked."""
        with self._lock:
            return self._disconnects

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until ``count`` requests arrived (AssertionError after ``timeout``)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= count, timeout):
                raise AssertionError(f"expected {count} request(s), got {len(self._requests)}")
            return list(self._requests)

    def wait_for_disconnects(self, count: int = 1, timeout: float = 5.0) -> None:
        """Block until ``count`` clients hung up on a waiting handler."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._disconnects >= count, timeout):
                raise AssertionError(f"expected {count} disconnect(s), got {self._disconnects}")

    def iter_bodies(self) -> Iterator[Any]:
        """Parsed JSON bodies of every request so far."""
        return (r.json for r in self.requests)

    # -- handler side ------------------------------------------------------------------------------
    def _record(self, request: RecordedRequest) -> tuple[int, FakeReply | None]:
        with self._lock:
            self._requests.append(request)
            reply = self._take(request) if request.provider else None
            self._lock.notify_all()
            return next(self._seq), reply

    def _take(self, request: RecordedRequest) -> FakeReply | None:
        if (
            self.behaviour == "llama-cpp"
            and request.provider == "openai"
            and _null_content(request.json)
        ):
            # Rejected before the queue is looked at, as the server rejects it before the model.
            return FakeReply.validation_error()
        model = request.json.get("model") if isinstance(request.json, dict) else None
        if request.provider == "google":
            model = request.path.rsplit("/", 1)[-1].split(":", 1)[0]
        for reply in self._replies:
            if reply.for_model is None or reply.for_model == model:
                self._replies.remove(reply)
                return reply
        return None

    def _note_disconnect(self) -> None:
        with self._lock:
            self._disconnects += 1
            self._lock.notify_all()
