"""A background batch exporter: runtime events → spans → OTLP/HTTP, never blocking a turn.

:class:`OtlpExporter` is an :class:`~goondan.runtime.observe.EventSink`. ``handle`` puts the
event's payload on a bounded queue (when it is full the event is dropped and counted). A
daemon thread pairs start and end events into spans (:class:`~goondan.runtime.traces.SpanAssembler`),
maps them to the OpenTelemetry GenAI semantic conventions (:func:`to_otlp_span`), and POSTs
batches with urllib3 — ``http/protobuf`` by default, ``http/json`` on request. :meth:`close`
exports what is left (the shutdown flush). Configuration comes from the environment
(:meth:`OtlpConfig.from_env`); see docs/observability.md "OTLP export".
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from goondan.errors import ConfigError
from goondan.otlp.encode import (
    _ONE_BYTE,
    _PACK_FIXED64,
    _PARENT_FIELDS,
    _SPAN_ID_TAG,
    _TRACE_FIELD,
    SPAN_KIND_CLIENT,
    SPAN_KIND_INTERNAL,
    SPAN_KIND_SERVER,
    STATUS_ERROR,
    AttributeValue,
    OtlpSpan,
    Resource,
    _key,
    _len_field,
    _parent_field,
    _str_field,
    _varint,
    attribute_fields,
    encode_json,
    encode_protobuf_span_fields,
    encode_span,
)
from goondan.runtime.eventlog import BackgroundBatcher
from goondan.runtime.events import (
    AgentAnswered,
    IngressReceived,
    LlmCallEnded,
    LlmDelta,
    RuntimeEvent,
    StepEnded,
    ToolEnded,
    TurnEnded,
)
from goondan.runtime.observe import EventSink
from goondan.runtime.traces import SpanRecord, iso_to_unix_nanos
from goondan.types import JsonObject, iso_millis, remember

__all__ = ["OtlpConfig", "OtlpExporter", "event_span_field", "event_span_message", "event_to_otlp_span",
           "exporter_from_env", "to_otlp_span"]

_log = logging.getLogger("goondan.otlp")
_PROTOCOLS = ("http/protobuf", "http/json")


def _parse_headers(raw: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value`` pairs, comma separated, values URL-encoded."""
    headers: dict[str, str] = {}
    for item in raw.split(","):
        if "=" in item:
            key, value = item.split("=", 1)
            if key.strip():
                headers[unquote(key.strip())] = unquote(value.strip())
    return headers


def _traces_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


@dataclass(frozen=True)
class OtlpConfig:
    """Where and how spans are sent."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: Mapping[str, str] = field(default_factory=dict)
    service_name: str = "goondan"
    timeout_s: float = 10.0

    def __repr__(self) -> str:  # header values are often API keys
        return f"OtlpConfig(endpoint={self.endpoint!r}, protocol={self.protocol!r}, headers={sorted(self.headers)})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> OtlpConfig | None:
        """``GOONDAN_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
        ``OTEL_EXPORTER_OTLP_ENDPOINT`` (first set wins; ``None``: export is off), with
        ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_EXPORTER_OTLP_PROTOCOL`` and ``OTEL_SERVICE_NAME``."""
        traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        goondan = env.get("GOONDAN_OTLP_ENDPOINT", "").strip()
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if goondan:
            endpoint = _traces_url(goondan)
        elif traces:
            endpoint = traces  # the signal-specific variable is used as it is
        elif base:
            endpoint = _traces_url(base)
        else:
            return None
        protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
        if protocol not in _PROTOCOLS:
            raise ConfigError(
                f"OTLP protocol {protocol!r} is not supported", code="E_OTLP_PROTOCOL",
                suggestion="set OTEL_EXPORTER_OTLP_PROTOCOL to http/protobuf (default) or http/json",
            )
        headers = _parse_headers(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""))
        headers.update(_parse_headers(env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "")))
        timeout = env.get("OTEL_EXPORTER_OTLP_TIMEOUT", "")
        return cls(endpoint=endpoint, protocol=protocol, headers=headers,
                   service_name=env.get("OTEL_SERVICE_NAME", "").strip() or "goondan",
                   timeout_s=int(timeout) / 1000 if timeout.isdigit() else 10.0)


_OPENINFERENCE = {"turn": "AGENT", "step": "CHAIN", "llm": "LLM", "toolCall": "TOOL",
                  "agentCall": "AGENT", "ingress": "CHAIN"}


def to_otlp_span(record: SpanRecord) -> OtlpSpan:
    """A span with the OpenTelemetry GenAI semantic conventions (``gen_ai.*``) plus ``goondan.*``."""
    a = record.attributes
    attrs: dict[str, AttributeValue] = {
        "goondan.span.kind": record.kind,
        "goondan.agent.name": record.agent_name,
        "goondan.instance.key": record.instance_key,
        # Phoenix (and other OpenInference viewers) group spans by this attribute.
        "openinference.span.kind": _OPENINFERENCE.get(record.kind, "CHAIN"),
    }
    kind = SPAN_KIND_INTERNAL
    if record.kind == "turn":
        name = f"invoke_agent {record.agent_name}"
        attrs.update({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": record.agent_name,
                      "gen_ai.conversation.id": record.instance_key})
    elif record.kind == "step":
        name = record.name
        if isinstance(a.get("stepIndex"), int):
            attrs["goondan.step.index"] = a["stepIndex"]
    elif record.kind == "llm":
        model = str(a.get("model") or "")
        name = f"chat {model}".strip()
        kind = SPAN_KIND_CLIENT
        attrs["gen_ai.operation.name"] = "chat"
        if a.get("provider"):
            attrs["gen_ai.provider.name"] = str(a["provider"])
        if model:
            attrs["gen_ai.request.model"] = model
        if a.get("finishReason"):
            attrs["gen_ai.response.finish_reasons"] = [str(a["finishReason"])]
    elif record.kind == "toolCall":
        tool = str(a.get("toolName") or record.name)
        name = f"execute_tool {tool}"
        attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                      "gen_ai.tool.type": "function"})
        if a.get("toolCallId"):
            attrs["gen_ai.tool.call.id"] = str(a["toolCallId"])
    elif record.kind == "agentCall":
        target = str(a.get("target") or "")
        name = f"invoke_agent {target}".strip()
        kind = SPAN_KIND_CLIENT
        attrs.update({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": target})
    else:
        name = record.name
        kind = SPAN_KIND_SERVER
        for key in ("source", "eventType", "eventId"):
            if a.get(key):
                attrs[f"goondan.ingress.{key}"] = str(a[key])
    usage = record.token_usage
    if usage and record.kind in ("turn", "llm"):
        attrs["gen_ai.usage.input_tokens"] = int(usage.get("prompt") or 0)
        attrs["gen_ai.usage.output_tokens"] = int(usage.get("completion") or 0)
    if record.cost is not None:
        attrs["goondan.cost.usd"] = float(record.cost)
    if record.error_code:
        attrs["error.type"] = record.error_code
    end = max(record.end_unix_nanos, record.start_unix_nanos)
    return OtlpSpan(
        trace_id=record.trace_id, span_id=record.span_id, parent_span_id=record.parent_span_id,
        name=name, kind=kind, start_unix_nanos=record.start_unix_nanos, end_unix_nanos=end,
        attributes=attrs, status_code=STATUS_ERROR if record.status == "error" else 0,
        status_message=(record.error_message or "") if record.status == "error" else "",
    )


# (the last "YYYY-MM-DDTHH:MM:SS" parsed, its nanoseconds): one tuple, replaced whole.
_NANOS_OF_SECOND: list[tuple[str, int]] = [("", 0)]


def _timestamp_nanos(timestamp: str) -> int:
    """:func:`~goondan.runtime.traces.iso_to_unix_nanos` of a ``now_iso`` timestamp: looked up
    when this process made it lately (:func:`goondan.types.iso_millis`), else parsed, each second
    once (the events of a turn mostly share it)."""
    millis = iso_millis(timestamp)
    if millis is not None:
        return millis * 1_000_000
    return _parsed_nanos(timestamp)


def _parsed_nanos(timestamp: str) -> int:
    """The nanoseconds of ``timestamp`` read from its text, each second parsed once."""
    head, dot, tail = timestamp.partition(".")
    if dot and len(tail) == 4 and tail[3] == "Z" and tail[:3].isdigit():
        second, nanos = _NANOS_OF_SECOND[0]
        if second != head:
            nanos = iso_to_unix_nanos(head + ".000Z")
            _NANOS_OF_SECOND[0] = (head, nanos)
        return nanos + int(tail[:3]) * 1_000_000
    return iso_to_unix_nanos(timestamp)


def _outcome_attributes(event: RuntimeEvent, usage: Any, into: dict[str, AttributeValue]) -> Any:
    """Add what an end event says of its outcome — token usage, cost, error type — to ``into``,
    in the attribute order of every span; returns the event's ``failed`` flag."""
    if isinstance(usage, dict) and usage:
        into["gen_ai.usage.input_tokens"] = int(usage.get("prompt") or 0)
        into["gen_ai.usage.output_tokens"] = int(usage.get("completion") or 0)
    cost = getattr(event, "cost", None)
    if isinstance(cost, (int, float)):
        into["goondan.cost.usd"] = float(cost)
    failed = getattr(event, "failed", False)
    error_code = (getattr(event, "error_code", None) or None) if failed else None
    if error_code:
        into["error.type"] = error_code
    return failed


def _span_window(event: RuntimeEvent) -> tuple[int, int]:
    """``(start, end)`` in unix nanoseconds: an end event is stamped when its span ends."""
    latency = getattr(event, "latency_ms", 0.0)
    duration = int((float(latency) if isinstance(latency, (int, float)) else 0.0) * 1_000_000)
    end = _timestamp_nanos(event.timestamp)
    start = end - duration
    return start, max(start + duration, start)


def event_to_otlp_span(event: RuntimeEvent) -> OtlpSpan | None:
    """The span an end event (or an ingress) describes, as OTLP: the same span as
    ``to_otlp_span(SpanAssembler().feed(event.to_dict()))`` (``None`` where that is ``None``),
    built from the typed event without its payload dict or a :class:`SpanRecord`.

    The exporter thread runs this for every span, so it is the bulk of the export's cost;
    tests/otlp/test_exporter.py checks it against the general path for every event type."""
    trace_id, span_id = event.trace_id, event.span_id
    if not trace_id or not span_id or event.phase == "start":
        return None
    agent, key = event.agent_name, event.instance_key
    if isinstance(event, IngressReceived):
        attrs: dict[str, AttributeValue] = {
            "goondan.span.kind": "ingress", "goondan.agent.name": agent, "goondan.instance.key": key,
            "openinference.span.kind": "CHAIN"}
        for name, value in (("source", event.source), ("eventType", event.event_type),
                            ("eventId", event.event_id)):
            if value:
                attrs[f"goondan.ingress.{name}"] = str(value)
        start = _timestamp_nanos(event.timestamp) if event.timestamp else 0
        return OtlpSpan(trace_id=trace_id, span_id=span_id, parent_span_id=None,
                        name=f"ingress {event.source or ''}".strip(), kind=SPAN_KIND_SERVER,
                        start_unix_nanos=start, end_unix_nanos=start, attributes=attrs)
    kind = _EVENT_KINDS.get(type(event))
    if kind is None:
        return None
    attrs = {"goondan.span.kind": kind, "goondan.agent.name": agent, "goondan.instance.key": key,
             "openinference.span.kind": _OPENINFERENCE[kind]}
    span_kind = SPAN_KIND_INTERNAL
    usage: JsonObject | None = None
    if isinstance(event, StepEnded):
        name = f"step {'' if event.step_index is None else event.step_index}".strip()
        if isinstance(event.step_index, int):
            attrs["goondan.step.index"] = event.step_index
    elif isinstance(event, ToolEnded):
        tool = str(event.tool_name or "tool")
        name = f"execute_tool {tool}"
        attrs["gen_ai.operation.name"] = "execute_tool"
        attrs["gen_ai.tool.name"] = tool
        attrs["gen_ai.tool.type"] = "function"
        if event.tool_call_id:
            attrs["gen_ai.tool.call.id"] = str(event.tool_call_id)
    elif isinstance(event, LlmCallEnded):
        model = str(event.model or "")
        name = f"chat {model}".strip()
        span_kind = SPAN_KIND_CLIENT
        attrs["gen_ai.operation.name"] = "chat"
        if event.provider:
            attrs["gen_ai.provider.name"] = str(event.provider)
        if model:
            attrs["gen_ai.request.model"] = model
        if event.finish_reason:
            attrs["gen_ai.response.finish_reasons"] = [str(event.finish_reason)]
        usage = event.token_usage
    elif isinstance(event, TurnEnded):
        name = f"invoke_agent {agent}"
        attrs["gen_ai.operation.name"] = "invoke_agent"
        attrs["gen_ai.agent.name"] = agent
        attrs["gen_ai.conversation.id"] = key
        usage = event.token_usage
    else:
        assert isinstance(event, AgentAnswered)
        target = str(event.target or "")
        name = f"invoke_agent {target}".strip()
        span_kind = SPAN_KIND_CLIENT
        attrs["gen_ai.operation.name"] = "invoke_agent"
        attrs["gen_ai.agent.name"] = target
    failed = _outcome_attributes(event, usage, attrs)
    start, end = _span_window(event)
    return OtlpSpan(
        trace_id=trace_id, span_id=span_id, parent_span_id=event.parent_span_id or None,
        name=name, kind=span_kind, start_unix_nanos=start, end_unix_nanos=end,
        attributes=attrs, status_code=STATUS_ERROR if failed else 0,
        status_message=(getattr(event, "error_message", None) or "") if failed else "",
    )


_EVENT_KINDS: dict[type, str] = {TurnEnded: "turn", StepEnded: "step", LlmCallEnded: "llm",
                                 ToolEnded: "toolCall", AgentAnswered: "agentCall"}
# Attributes that vary from span to span; they follow the cached ones (to_otlp_span's order).
_VARYING = frozenset({"gen_ai.tool.call.id", "gen_ai.usage.input_tokens", "goondan.cost.usd", "error.type"})
# (event class, agent, instance, the fields the name and leading attributes come from) ->
# (the encoded name and kind fields, the encoded leading attributes): most spans of a turn share them.
_PREFIXES: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
_PREFIX_LIMIT = 4096


# Encoded pieces of the attributes that vary from span to span (see event_span_message).
_CALL_ID_KEY = b"\x0a\x13gen_ai.tool.call.id\x12"  # the key, then the value's tag
# field 9 (29 bytes): the key, then a value of 9 bytes holding a double (field 4, fixed64)
_COST_FIELD = b"\x4a\x1d\x0a\x10goondan.cost.usd\x12\x09\x21"
_PACK_DOUBLE = struct.Struct("<d").pack
# (prompt tokens, completion tokens) -> their two encoded attributes.
_USAGE_FIELDS: dict[tuple[int, int], bytes] = {}


def event_span_message(event: RuntimeEvent) -> bytes | None:
    """``encode.encode_span`` of :func:`event_to_otlp_span` (the same bytes: a property test
    proves it): :func:`event_span_field` without the field's tag and length."""
    field = event_span_field(event)
    if field is None:
        return None
    position = 1
    while field[position] & 0x80:  # the length's varint
        position += 1
    return field[position + 1:]


def event_span_field(event: RuntimeEvent) -> bytes | None:
    """The span of an end event as a ``ScopeSpans.spans`` field (tag, length, then
    :func:`event_span_message`), so that a request body is one join of these
    (:func:`encode.encode_protobuf_span_fields`); built from the typed event without the
    intermediate span. Everything that repeats from span to span — the name, the kind and the
    leading attributes per agent, instance and step index / tool / model, the trace and parent
    id fields, the time of the timestamp, token counts — is cached; each piece is computed into
    a local and the message made by one join. The exporter thread runs this once per span."""
    cls = type(event)
    trace_id, span_id = event.trace_id, event.span_id
    if cls not in _EVENT_KINDS or not trace_id or not span_id:
        return _general_field(event)
    e: Any = event  # one of five classes: the attributes below exist
    agent, instance = e.agent_name, e.instance_key
    if cls is ToolEnded:
        key: tuple[Any, ...] = (cls, agent, instance, e.tool_name)
    elif cls is StepEnded:
        key = (cls, agent, instance, e.step_index)
    elif cls is LlmCallEnded:
        key = (cls, agent, instance, e.model, e.provider, e.finish_reason)
    elif cls is TurnEnded:
        key = (cls, agent, instance)
    else:
        key = (cls, agent, instance, e.target)
    try:
        cached = _PREFIXES.get(key)
    except TypeError:  # an unhashable field value: the general path
        return _general_field(event)
    if cached is None:
        cached = _cache_prefix(event, key)
        if cached is None:
            return None
    head, leading = cached
    # ids
    last_trace, trace_field = _TRACE_FIELD[0]
    if last_trace != trace_id:
        trace = bytes.fromhex(trace_id)
        trace_field = b"\x0a\x10" + trace if len(trace) == 16 else _len_field(1, trace)
        _TRACE_FIELD[0] = (trace_id, trace_field)
    own = bytes.fromhex(span_id)
    if len(own) != 8:  # not a 16-digit span id: never made here, but spans of any id are exported
        return _general_field(event)
    parent_id = e.parent_span_id
    if parent_id:
        parent_field = _PARENT_FIELDS.get(parent_id)
        if parent_field is None:
            parent_field = _parent_field(parent_id)
    else:
        parent_field = b""
    # times: an end event is stamped when its span ends
    latency = e.latency_ms
    if type(latency) is float and latency > 0.0:
        duration = int(latency * 1_000_000)
    else:
        duration = int(float(latency) * 1_000_000) if isinstance(latency, (int, float)) else 0
    timestamp = e.timestamp
    millis = iso_millis(timestamp)  # what _timestamp_nanos does, one call fewer per span
    end = millis * 1_000_000 if millis is not None else _parsed_nanos(timestamp)
    start = end - duration
    if duration > 0 and start > 0:
        times = _PACK_TIMES(0x39, start, 0x41, end)
    else:
        end = start + duration if duration > 0 else start
        times = ((b"\x39" + _PACK_FIXED64(start) if start else b"")
                 + (b"\x41" + _PACK_FIXED64(end) if end else b""))
    # the attributes that vary, in to_otlp_span's order
    varying = b""
    if cls is ToolEnded:
        call_id = e.tool_call_id
        if call_id:
            text = str(call_id).encode()
            size = len(text)
            if size < 100:  # the three lengths below 128: one byte each
                varying = b"".join((b"\x4a", _ONE_BYTE[size + 25], _CALL_ID_KEY, _ONE_BYTE[size + 2],
                                    b"\x0a", _ONE_BYTE[size], text))
            else:
                value = b"\x0a" + _varint(size) + text
                pair = _CALL_ID_KEY + _varint(len(value)) + value
                varying = b"\x4a" + _varint(len(pair)) + pair
    elif cls is LlmCallEnded or cls is TurnEnded:
        usage = e.token_usage
        if isinstance(usage, dict) and usage:
            counts = (int(usage.get("prompt") or 0), int(usage.get("completion") or 0))
            varying = _USAGE_FIELDS.get(counts) or _usage_fields(counts)
    cost = e.cost if cls in _COSTED else None
    if cost is not None and isinstance(cost, (int, float)):
        varying += _COST_FIELD + _PACK_DOUBLE(float(cost))
    status = b""
    if e.failed:
        error_code = getattr(e, "error_code", None)
        if error_code:
            varying += attribute_fields({"error.type": error_code})
        message = e.error_message or ""
        inner = (_len_field(2, message.encode()) if message else b"") + b"\x18\x02"
        status = _len_field(15, inner)
    span = b"".join((trace_field, _SPAN_ID_TAG, own, parent_field, head, times, leading, varying, status))
    return (_SPAN_HEADS.get(len(span)) or _span_head(len(span))) + span


_SPAN_TAG = b"\x12"  # ScopeSpans.spans
_COSTED = frozenset(cls for cls in _EVENT_KINDS
                    if any(f.name == "cost" for f in dataclasses.fields(cls)))  # the classes with a cost
_PACK_TIMES = struct.Struct("<BQBQ").pack  # start_time_unix_nano (7) and end_time_unix_nano (8), fixed64
# a span message's length -> the field's tag and that length: the head ``_len_field(2, span)``
# would make, looked up instead (spans of a kind vary little in size; the two varint calls of
# _len_field cost more per span than the whole lookup)
_SPAN_HEADS: dict[int, bytes] = {}


def _span_head(size: int) -> bytes:
    return remember(_SPAN_HEADS, size, _SPAN_TAG + _varint(size), _PREFIX_LIMIT)


def _general_field(event: RuntimeEvent) -> bytes | None:
    span = event_to_otlp_span(event)
    return None if span is None else _len_field(2, encode_span(span))


def _cache_prefix(event: RuntimeEvent, key: tuple[Any, ...]) -> tuple[bytes, bytes] | None:
    """Encode and keep the name and kind fields and the leading attributes of ``event``'s span."""
    span = event_to_otlp_span(event)
    if span is None:
        return None
    leading: dict[str, AttributeValue] = {}
    for name, value in span.attributes.items():
        if name in _VARYING:
            break
        leading[name] = value
    # The name and kind fields sit between the ids and the times; the leading attributes
    # follow the times.
    head = _str_field(5, span.name) + (_key(6, 0) + _varint(span.kind) if span.kind else b"")
    return remember(_PREFIXES, key, (head, attribute_fields(leading)), _PREFIX_LIMIT)


def _usage_fields(counts: tuple[int, int]) -> bytes:
    return remember(_USAGE_FIELDS, counts, attribute_fields({
        "gen_ai.usage.input_tokens": counts[0], "gen_ai.usage.output_tokens": counts[1]}), _PREFIX_LIMIT)


class OtlpExporter(EventSink):
    """Exports the spans of the events it receives, in batches, from a background thread."""

    # An end event describes its whole span: start events are not needed (nor streamed text).
    skips = frozenset({"turn.started", "step.started", "llm.started", "tool.called",
                       "agent.requested", "llm.delta"})

    def __init__(self, config: OtlpConfig, *, resource_attributes: Mapping[str, AttributeValue] | None = None,
                 queue_limit: int = 20_000, batch_size: int = 512, interval_s: float = 1.0) -> None:
        self.config = config
        self.resource = Resource(
            attributes={"service.name": config.service_name, **(resource_attributes or {})},
            scope_name="goondan",
        )
        self.batch_size = batch_size
        self.exported = 0
        self.failed_batches = 0
        self.undelivered = 0  # spans a batch failed to deliver
        self._pool: Any = None
        self._endpoint_pool: Any = None
        self._path = "/"
        self._headers: dict[str, dict[str, str]] = {}
        self._batcher = BackgroundBatcher("goondan-otlp", self._export, limit=queue_limit,
                                          interval_s=interval_s)
        self._put = self._batcher.put

    def __repr__(self) -> str:
        return (f"<OtlpExporter {self.config.endpoint} exported={self.exported} "
                f"dropped={self.dropped}>")

    @property
    def dropped(self) -> int:
        """Events dropped because the queue was full, plus spans whose batch failed."""
        return self._batcher.dropped + self.undelivered

    @property
    def thread_cpu_s(self) -> float:
        """CPU seconds the exporter thread has spent building, encoding and sending batches."""
        return self._batcher.cpu_s

    def handler_for(self, event_class: type[RuntimeEvent]) -> Callable[[RuntimeEvent], object] | None:
        """The queue's ``put`` itself for end events and ingress; nothing for the others."""
        if event_class.phase == "start" or event_class is LlmDelta:
            return None
        self._batcher.start()
        return self._put

    def handle(self, event: RuntimeEvent) -> None:
        """Queue an end event or an ingress (never blocks; a full queue drops it and counts it).

        An end event describes its whole span (ids, parent, duration, attributes), so start
        events are not queued at all: half the work, and a span is exported once it ends."""
        if event.phase != "start" and type(event) is not LlmDelta:
            self._batcher.start()
            self._put(event)

    def close(self, timeout_s: float = 15.0) -> None:
        """Export everything queued (spans still open are dropped), then stop the thread."""
        self._batcher.close(timeout_s)
        if self._pool is not None:
            self._pool.clear()
            self._pool = self._endpoint_pool = None

    def flush(self, timeout_s: float = 15.0) -> None:
        """Export every span finished so far (blocks until sent)."""
        self._batcher.flush(timeout_s)

    # -- background thread -------------------------------------------------------------------------
    def _export(self, events: list[RuntimeEvent]) -> None:
        as_json = self.config.protocol == "http/json"
        build: Callable[[RuntimeEvent], Any] = event_to_otlp_span if as_json else event_span_field
        pending: list[Any] = []
        for event in events:
            try:
                span = build(event)
            except Exception as exc:  # one malformed event must not lose the batch
                _log.warning("OTLP export: event %s skipped: %s", event.type, exc)
                continue
            if span is not None:
                pending.append(span)
        for start in range(0, len(pending), self.batch_size):
            self._send(pending[start:start + self.batch_size], as_json)

    def _send(self, spans: list[Any], as_json: bool) -> None:
        try:
            if as_json:
                body, content_type = encode_json(spans, self.resource), "application/json"
            else:
                body, content_type = encode_protobuf_span_fields(spans, self.resource), "application/x-protobuf"
            status = self._post(body, content_type)
        except Exception as exc:  # the exporter must never take a turn down
            _log.warning("OTLP export to %s failed: %s", self.config.endpoint, exc)
            status = None
        if status is not None and 200 <= status < 300:
            self.exported += len(spans)
        else:
            self.failed_batches += 1
            self.undelivered += len(spans)
            if status is not None:
                _log.warning("OTLP export to %s answered HTTP %s; %d span(s) dropped",
                             self.config.endpoint, status, len(spans))

    def _post(self, body: bytes, content_type: str) -> int:
        import urllib3

        if self._pool is None:
            self._pool = urllib3.PoolManager(
                retries=urllib3.Retry(total=2, backoff_factor=0.2, allowed_methods=None,
                                      status_forcelist=(429, 502, 503, 504), raise_on_status=False),
                timeout=urllib3.Timeout(total=self.config.timeout_s),
            )
            # One endpoint: its connection pool and path are looked up once, not per batch.
            self._endpoint_pool = self._pool.connection_from_url(self.config.endpoint)
            parsed = urllib3.util.parse_url(self.config.endpoint)
            self._path = parsed.request_uri
            self._headers = {kind: {**self.config.headers, "Content-Type": kind}
                             for kind in ("application/x-protobuf", "application/json")}
        response = self._endpoint_pool.urlopen("POST", self._path, body=body, headers=self._headers[content_type],
                                               redirect=False)
        return int(response.status)


def exporter_from_env(env: Mapping[str, str] = os.environ, *,
                      resource_attributes: Mapping[str, AttributeValue] | None = None) -> OtlpExporter | None:
    """An :class:`OtlpExporter` when an OTLP endpoint is configured, else ``None``."""
    config = OtlpConfig.from_env(env)
    return OtlpExporter(config, resource_attributes=resource_attributes) if config is not None else None
