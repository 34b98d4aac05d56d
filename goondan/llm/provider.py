"""What the three HTTP adapters share: canonical-message helpers, keys, and the generate() flow.

A provider module (``openai.py``, ``anthropic.py``, ``google.py``) subclasses
:class:`HttpModel` and supplies four things: ``to_wire(request, stream=...)`` (the request
body), ``from_wire(body)`` (a non-streamed response body → :class:`ModelResponse`),
``new_stream()`` (a :class:`StreamAccumulator` that turns SSE events into
:class:`StreamDelta` values and finally rebuilds a non-streamed body and runs it through
``from_wire`` — so a streamed call returns exactly what the non-streamed call would), and
``url(stream)`` / ``headers()``.

Canonical messages are conversation ``data`` dicts (see ``goondan.llm.base``). The helpers below
read them leniently: string or part-list content, ``input`` or ``args`` on tool calls, and
tool-result ``output`` as ``{"type": "text"|"json"|"error-text"|"error-json", "value"}`` (a bare
value is treated as JSON).
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import ipaddress
import json
import os
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from goondan.errors import LlmAuthError, LlmBadResponseError
from goondan.llm.base import (
    DeltaCallback,
    LanguageModel,
    ModelRequest,
    ModelResponse,
    ModelSpec,
    StreamDelta,
)
from goondan.llm.http import HttpTransport, RetryPolicy
from goondan.llm.sse import SseEvent
from goondan.llm.wire import WireCache, encode_chunks
from goondan.secrets import register_secret
from goondan.text import clean_json
from goondan.types import JsonObject, ToolCall

__all__ = [
    "HttpModel",
    "StreamAccumulator",
    "append_turn",
    "as_object",
    "content_parts",
    "is_error_output",
    "is_loopback",
    "merge_params",
    "new_call_id",
    "parse_tool_args",
    "parts_text",
    "resolve_api_key",
    "to_json_text",
    "tool_call",
    "tool_call_input",
    "tool_result_text",
]


# --------------------------------------------------------------------------- canonical helpers


# One prebuilt encoder: json.dumps(..., ensure_ascii=False) builds a new encoder per call, which
# dominates request building for long conversations (thousands of tool arguments and results).
to_json_text: Callable[[Any], str] = json.JSONEncoder(ensure_ascii=False).encode


def as_object(value: Any) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one (for lenient response parsing)."""
    return value if isinstance(value, dict) else {}


def content_parts(message: Mapping[str, Any]) -> list[JsonObject]:
    """The message's content as a list of parts (a string becomes one text part)."""
    content = message.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [p for p in content if isinstance(p, dict)]
    return [{"type": "text", "text": str(content)}]


def parts_text(parts: Sequence[Mapping[str, Any]]) -> str:
    """Concatenated text of the ``text`` parts."""
    return "".join(str(p.get("text") or "") for p in parts if p.get("type") == "text")


def tool_call_input(part: Mapping[str, Any]) -> JsonObject:
    """A tool-call part's arguments (``input``, or legacy ``args``; JSON text is parsed)."""
    value = part.get("input", part.get("args"))
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _output(part: Mapping[str, Any]) -> Mapping[str, Any]:
    output = part.get("output")
    if isinstance(output, dict) and output.get("type") in (
        "text",
        "json",
        "error-text",
        "error-json",
    ):
        return output
    return {"type": "json", "value": output if output is not None else part.get("result")}


def is_error_output(part: Mapping[str, Any]) -> bool:
    """True for ``error-text`` / ``error-json`` tool results."""
    return str(_output(part).get("type", "")).startswith("error-")


def tool_result_text(part: Mapping[str, Any]) -> str:
    """A tool-result part's output as the string a text-only provider field needs."""
    output = _output(part)
    value = output.get("value")
    if output.get("type") in ("text", "error-text") and isinstance(value, str):
        return value
    return to_json_text(value)


def tool_result_value(part: Mapping[str, Any]) -> Any:
    """A tool-result part's output value (JSON), for providers that take structured results."""
    return _output(part).get("value")


def append_turn(turns: list[JsonObject], role: str, items: list[JsonObject], key: str) -> None:
    """Add ``items`` to the last turn when it has the same ``role``, else start a turn.

    For APIs whose roles must alternate (Anthropic ``content``, Gemini ``parts``): consecutive
    canonical messages that map to one role travel as one turn. Empty ``items`` add nothing.
    """
    if not items:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(items)
    else:
        turns.append({"role": role, key: items})


def parse_tool_args(text: str) -> JsonObject | None:
    """Parse a tool call's JSON argument text; None when it is not a JSON object.

    Malformed arguments are the model's mistake, not the server's: the adapter keeps the call
    (see :func:`tool_call`) and the executor answers it with an ``E_TOOL_INVALID_ARGS`` result
    carrying the raw text, so the model can correct itself on the next step.
    """
    if not text or not text.strip():
        return {}
    try:
        value = clean_json(json.loads(text))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def new_call_id(prefix: str) -> str:
    """An id for a tool call the server sent without one.

    Random, so it is unique in the whole conversation: a per-step counter (``call_0``, ...)
    repeats in every turn, and results are paired with their calls by id (repair, windowing).
    """
    return prefix + uuid.uuid4().hex


def tool_call(call_id: str, name: str, arguments: Any) -> ToolCall:
    """A :class:`ToolCall` from wire arguments (an object, or JSON text that may be malformed)."""
    if isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, args=arguments)
    text = "" if arguments is None else str(arguments)
    parsed = parse_tool_args(text)
    if parsed is None:
        return ToolCall(id=call_id, name=name, args={}, invalid_args=text)
    return ToolCall(id=call_id, name=name, args=parsed)


_STANDARD_PARAMS = ("temperature", "maxTokens", "topP")


def merge_params(
    options: Mapping[str, Any], params: Mapping[str, Any], names: Mapping[str, str]
) -> JsonObject:
    """``options`` then ``params`` (params win); the standard names are renamed via ``names``.

    ``names`` maps ``temperature`` / ``maxTokens`` / ``topP`` to the provider's field; every other
    key passes through unchanged (write provider-native names there). ``None`` values are dropped.
    """
    out: JsonObject = {}
    for source in (options, params):
        for key, value in source.items():
            if value is None:
                continue
            out[names.get(key, key) if key in _STANDARD_PARAMS else key] = value
    return out


# --------------------------------------------------------------------------- keys + endpoints


def is_loopback(url: str) -> bool:
    """True when ``url`` points at this machine (localhost or a loopback address)."""
    host = urlsplit(url).hostname or ""
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_api_key(
    spec: ModelSpec,
    env_names: Sequence[str],
    *,
    label: str,
    required: bool = True,
    env: Mapping[str, str] | None = None,
) -> str | None:
    """``spec.api_key``, else the first set variable of ``spec.api_key_env`` / ``env_names``.

    The key is registered with :func:`goondan.secrets.register_secret`. A missing required key
    raises ``LlmAuthError`` (E_LLM_AUTH) naming the variables to set.
    """
    environ = os.environ if env is None else env
    key = spec.api_key
    names = [n for n in (spec.api_key_env, *env_names) if n]
    if not key:
        for name in names:
            value = environ.get(name)
            if value:
                key = value
                break
    if key:
        register_secret(key)
        return key
    if not required:
        return None
    where = " or ".join(dict.fromkeys(names)) or "an API key"
    model = f"Model/{spec.name}" if spec.name else f"the {label} model"
    offline = ""
    if spec.offline_alternatives:
        # the bundle ships an offline model (goondan init templates): name it as the way to try
        offline = (
            " To try it offline, point the Agent's modelRef "
            f'at "Model/{spec.offline_alternatives[0]}"'
            " (a scripted model, no key needed)."
        )
    raise LlmAuthError(
        f"no API key for {model} ({label})",
        suggestion=f"Set {where}, or give the Model a "
        f"spec.apiKey (value or valueFrom.env).{offline}",
    )


def auth_suggestion(spec: ModelSpec, env_names: Sequence[str]) -> str:
    """Suggestion attached to 401/403 answers: which key to check."""
    names = " or ".join(dict.fromkeys(n for n in (spec.api_key_env, *env_names) if n))
    return (
        f"Check the API key ({names or 'Model spec.apiKey'}) "
        f"and that it may use model {spec.model!r}."
    )


# --------------------------------------------------------------------------- generate() flow


class StreamAccumulator(abc.ABC):
    """Turns one response's SSE events into deltas, then into the final :class:`ModelResponse`."""

    done: bool = False  # a terminal event arrived; the caller may stop reading

    @abc.abstractmethod
    def feed(self, event: SseEvent) -> list[StreamDelta]:
        """Consume one event; return the deltas it carries, in order."""

    @abc.abstractmethod
    def finish(self) -> ModelResponse:
        """The final response; raises E_LLM_BAD_RESPONSE if the stream ended too early."""


class HttpModel(LanguageModel):
    """A :class:`LanguageModel` over :class:`HttpTransport`; subclasses speak one wire format."""

    provider = "http"
    label = "the model provider"
    default_endpoint = ""
    key_env: tuple[str, ...] = ()
    # Like the official SDKs: the endpoint when the Model has no spec.endpoint
    # (OPENAI_BASE_URL, ANTHROPIC_BASE_URL).
    base_url_env: str | None = None

    def __init__(
        self,
        spec: ModelSpec,
        *,
        retry_policy: RetryPolicy | None = None,
        transport: HttpTransport | None = None,
    ) -> None:
        self.spec = spec
        self.model = spec.model
        env_base = os.environ.get(self.base_url_env) if self.base_url_env else None
        # "spec", "env" or "default": an environment key goes only to the provider's own host
        # or to the host the same environment named (docs/models.md "Endpoints and API keys").
        self.endpoint_source = "spec" if spec.endpoint else ("env" if env_base else "default")
        self.endpoint = (spec.endpoint or env_base or self.default_endpoint).rstrip("/")
        self.transport = transport or HttpTransport(
            label=self.label,
            timeout_ms=spec.timeout_ms,
            retry_policy=retry_policy,
            auth_suggestion=auth_suggestion(spec, self.env_names()),
        )
        register_secret(spec.api_key)
        self._key: str | None = None
        self._key_resolved = False
        self._wire: WireCache | None = None  # built by adapters that convert incrementally

    # -- provider hooks ----------------------------------------------------------------------

    @abc.abstractmethod
    def to_wire(self, request: ModelRequest, *, stream: bool = False) -> JsonObject:
        """The provider request body for ``request``."""

    def payload(self, request: ModelRequest, *, stream: bool = False) -> list[bytes]:
        """The encoded request body, as chunks sent one after the other: the encoding of
        :meth:`to_wire`. The built-in adapters override it to splice in the cached bytes of
        the messages they already sent (goondan/llm/wire.py)."""
        return encode_chunks(self.to_wire(request, stream=stream))

    @abc.abstractmethod
    def from_wire(self, body: JsonObject, *, request: ModelRequest | None = None) -> ModelResponse:
        """Parse a non-streamed response body (``request`` only seeds generated ids)."""

    @abc.abstractmethod
    def new_stream(self, request: ModelRequest | None = None) -> StreamAccumulator:
        """A fresh accumulator for one streamed response."""

    @abc.abstractmethod
    def url(self, *, stream: bool) -> str:
        """The URL to POST to."""

    @abc.abstractmethod
    def headers(self) -> dict[str, str]:
        """Request headers, including authentication."""

    def is_public_endpoint(self) -> bool:
        """Whether requests go to the provider's own public host (``api.openai.com`` ...)."""
        return _host(self.endpoint) == _host(self.default_endpoint)

    def env_names(self) -> tuple[str, ...]:
        """Environment variables that may hold the key: the provider's usual variables, but
        only for its public host or an endpoint taken from the environment (``*_BASE_URL``).
        A key from the environment is never sent to a host the Model named itself; such a
        Model gives its own ``spec.apiKey``."""
        if self.is_public_endpoint() or self.endpoint_source == "env":
            return self.key_env
        return ()

    def key_required(self) -> bool:
        """Whether a missing key is an error: for the provider's public host, or when the Model
        names the variable its key comes from (``apiKey.valueFrom.env``); local and self-hosted
        servers without an ``apiKey`` need none."""
        return self.is_public_endpoint() or bool(self.spec.api_key_env)

    # -- shared flow ---------------------------------------------------------------------------

    def api_key(self) -> str | None:
        """The resolved key (looked up on first use, so building a model never fails)."""
        if not self._key_resolved:
            self._key = resolve_api_key(
                self.spec, self.env_names(), label=self.label, required=self.key_required()
            )
            self._key_resolved = True
        return self._key

    async def generate(
        self,
        request: ModelRequest,
        *,
        stream: bool = False,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        """One round trip; with ``stream=True`` deltas go to ``on_delta`` as they arrive."""
        if stream and self.spec.capabilities.get("streaming") is False:
            # capabilities.streaming: false — the server cannot stream (docs/models.md)
            stream = False
        url = self.url(stream=stream)
        _check_model_request(url)
        headers = self.headers()
        body = self.payload(request, stream=stream)
        if not stream:
            return self.from_wire(
                await self.transport.post_json(url, body, headers), request=request
            )
        accumulator = self.new_stream(request)
        async with contextlib.aclosing(self.transport.stream_sse(url, body, headers)) as events:
            async for event in events:
                for delta in accumulator.feed(event):
                    if on_delta is not None:
                        result = on_delta(delta)
                        if inspect.isawaitable(result):
                            await result
                if accumulator.done:
                    break
        return accumulator.finish()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(provider={self.provider!r}, "
            f"model={self.model!r}, endpoint={self.endpoint!r})"
        )


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def stream_cut(label: str, what: str) -> LlmBadResponseError:
    """The error for a stream that ended before its terminal event."""
    return LlmBadResponseError(
        f"{label} stream ended before the reply was complete ({what})",
        suggestion="The connection or the server stopped mid-reply; try again.",
    )


def stream_empty(label: str) -> LlmBadResponseError:
    """The error for a stream that ended cleanly without any content or finish reason."""
    return LlmBadResponseError(
        f"{label} ended the stream without sending a reply (no text, no tool calls, "
        "no finish reason)",
        code="E_LLM_EMPTY_STREAM",
        suggestion=(
            "Some servers (llama.cpp-based ones) do this when they cannot stream tool calls; "
            "set the Model's capabilities: {streaming: false}, or check the server's log."
        ),
    )


def bad_shape(label: str, what: str) -> LlmBadResponseError:
    """The error for a response body of an unexpected shape."""
    return LlmBadResponseError(
        f"{label} returned an unexpected response: {what}",
        suggestion="Check that spec.endpoint points at the "
        "provider's API and that the provider is right.",
    )


def load_event_json(event: SseEvent, label: str) -> Any:
    """Decode an SSE event's JSON data (E_LLM_BAD_RESPONSE if it is not JSON)."""
    try:
        # The U+FFFD rule for "\\udcff" escapes (docs/security.md).
        return clean_json(json.loads(event.data))
    except ValueError as exc:
        raise LlmBadResponseError(
            f"{label} stream sent an event that is not JSON ({len(event.data)} characters)",
            suggestion="Check that spec.endpoint points at the provider's API.",
        ) from exc


def _check_model_request(url: str) -> None:
    """The guard of goondan.llm.testing (ALLOW_MODEL_REQUESTS): in test suites, non-loopback
    hosts are refused before anything, even the key lookup, happens.

    When neither the module switch nor ``GOONDAN_ALLOW_MODEL_REQUESTS`` forbids anything, every
    request is allowed and the testing module (with its imports) is not loaded at all
    (docs/runtime.md "Performance")."""
    testing = sys.modules.get("goondan.llm.testing")
    switch = getattr(testing, "ALLOW_MODEL_REQUESTS", True)
    env = os.environ.get("GOONDAN_ALLOW_MODEL_REQUESTS", "1").strip().lower()
    if switch and env not in ("0", "false", "no", "off"):
        return
    from goondan.llm.testing import check_model_request

    check_model_request(url)
