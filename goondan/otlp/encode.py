"""OTLP trace payloads for goondan's spans: ``http/protobuf`` and ``http/json``.

Only the subset of ``opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest`` that
goondan sends is written, by hand, with the standard library (no protobuf runtime at run time):

    ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
    ResourceSpans  { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
    Resource       { repeated KeyValue attributes = 1; }
    ScopeSpans     { InstrumentationScope scope = 1; repeated Span spans = 2; }
    InstrumentationScope { string name = 1; string version = 2; }
    Span { bytes trace_id = 1; bytes span_id = 2; bytes parent_span_id = 4; string name = 5;
           SpanKind kind = 6; fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
           repeated KeyValue attributes = 9; Status status = 15; }
    Status { string message = 2; StatusCode code = 3; }
    KeyValue { string key = 1; AnyValue value = 2; }
    AnyValue { oneof { string string_value = 1; bool bool_value = 2; int64 int_value = 3;
                       double double_value = 4; ArrayValue array_value = 5; } }
    ArrayValue { repeated AnyValue values = 1; }

Fields are written in field-number order and proto3 defaults are left out, exactly as
``SerializeToString()`` of the official classes does; ``tests/otlp/test_encode.py`` proves the
bytes identical with a property test against ``opentelemetry-proto``. The JSON form follows the
OTLP/JSON rules: hex ids, enum numbers, 64-bit integers as decimal strings.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from goondan.types import remember

__all__ = [
    "SPAN_KIND_CLIENT",
    "SPAN_KIND_INTERNAL",
    "STATUS_ERROR",
    "STATUS_OK",
    "STATUS_UNSET",
    "AttributeValue",
    "OtlpSpan",
    "Resource",
    "attribute_fields",
    "encode_json",
    "encode_protobuf",
    "encode_protobuf_span_fields",
    "encode_protobuf_spans",
    "encode_span",
    "span_message",
]

AttributeValue = str | bool | int | float | Sequence[str | bool | int | float]

SPAN_KIND_INTERNAL = 1
SPAN_KIND_SERVER = 2
SPAN_KIND_CLIENT = 3
STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2


@dataclass
class OtlpSpan:
    """One span in OTLP terms (ids as hex strings, times in Unix nanoseconds)."""

    trace_id: str
    span_id: str
    name: str
    start_unix_nanos: int
    end_unix_nanos: int
    parent_span_id: str | None = None
    kind: int = SPAN_KIND_INTERNAL
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    status_code: int = STATUS_UNSET
    status_message: str = ""


@dataclass
class Resource:
    """The resource and instrumentation scope every exported span belongs to."""

    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    scope_name: str = "goondan"
    scope_version: str = ""


# -- protobuf wire format ------------------------------------------------------------------------
_ONE_BYTE = [bytes((i,)) for i in range(128)]
# Two-byte varints (128 to 16383): the lengths of spans and of their attribute blocks.
_TWO_BYTES = [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(1 << 14)]


def _varint(value: int) -> bytes:
    if 0 <= value < 128:  # tags, lengths of short fields, small enums: the common case
        return _ONE_BYTE[value]
    if 0 <= value < 16384:
        return _TWO_BYTES[value]
    value &= (1 << 64) - 1  # negative int64: ten-byte two's complement, as protobuf does
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _str_field(number: int, text: str) -> bytes:
    return _len_field(number, text.encode("utf-8")) if text else b""


def _any_value(value: AttributeValue) -> bytes:
    # A oneof member is written even when it holds its type's default value.
    if isinstance(value, bool):
        return _key(2, 0) + _varint(int(value))
    if isinstance(value, int):
        return _key(3, 0) + _varint(value)
    if isinstance(value, float):
        return _key(4, 1) + struct.pack("<d", value)
    if isinstance(value, str):
        return _len_field(1, value.encode("utf-8"))
    items = b"".join(_len_field(1, _any_value(v)) for v in value)
    return _len_field(5, items)


# Most attributes repeat from span to span (kinds, agent names, operation names): their encoded
# KeyValue is kept, keyed by (key, type, value) so that 1 and True stay apart. Floats are not
# cached: 0.0 == -0.0 (and NaN != NaN) would share or miss entries wrongly.
_KV_CACHE: dict[tuple[str, type, object], bytes] = {}
_KV_CACHE_LIMIT = 4096


def _key_value(key: str, value: AttributeValue) -> bytes:
    if isinstance(value, (str, bool, int)):
        ident = (key, type(value), value)
        cached = _KV_CACHE.get(ident)
        if cached is None:
            cached = remember(_KV_CACHE, ident, _str_field(1, key) + _len_field(2, _any_value(value)),
                              _KV_CACHE_LIMIT)
        return cached
    return _str_field(1, key) + _len_field(2, _any_value(value))


# The span attributes' whole fields (tag, length and KeyValue), keyed like _KV_CACHE: a span's
# attributes are mostly the same few values, so most of its bytes come from here.
_FIELD_CACHE: dict[tuple[str, type, object], bytes] = {}
_STR_FIELDS: dict[tuple[str, str], bytes] = {}
_NAME_FIELDS: dict[str, bytes] = {}  # span names repeat too ("step 3", "execute_tool fs__read")
_PACK_FIXED64 = struct.Struct("<Q").pack
# (trace id, its encoded field) of the last span: a batch is mostly one trace. One tuple, replaced
# whole, so that a thread never reads one trace's id with another's field.
_TRACE_FIELD: list[tuple[str, bytes]] = [("", b"")]
# parent span id -> its encoded field (field 4): a step's id is the parent of its LLM and tool
# calls. Looked up inline (``_PARENT_FIELDS.get(id) or _parent_field(id)``) on the span paths.
_PARENT_FIELDS: dict[str, bytes] = {}


def _parent_field(parent_span_id: str) -> bytes:
    parent = bytes.fromhex(parent_span_id)
    field = _PARENT_ID_TAG + parent if len(parent) == 8 else _len_field(4, parent)
    return remember(_PARENT_FIELDS, parent_span_id, field, _KV_CACHE_LIMIT)


def _attribute_field(key: str, value: AttributeValue) -> bytes:
    if type(value) is str:  # the common case: one lookup, no isinstance chain
        cached = _STR_FIELDS.get((key, value))
        if cached is None:
            cached = remember(_STR_FIELDS, (key, value), _len_field(9, _key_value(key, value)), _KV_CACHE_LIMIT)
        return cached
    if isinstance(value, (str, bool, int)):
        ident = (key, type(value), value)
        cached = _FIELD_CACHE.get(ident)
        if cached is None:
            cached = remember(_FIELD_CACHE, ident, _len_field(9, _key_value(key, value)), _KV_CACHE_LIMIT)
        return cached
    return _len_field(9, _key_value(key, value))


def _attributes(number: int, attributes: Mapping[str, AttributeValue]) -> bytes:
    if number == 9:
        return b"".join([_attribute_field(k, v) for k, v in attributes.items()])
    return b"".join([_len_field(number, _key_value(k, v)) for k, v in attributes.items()])


_TRACE_ID_TAG = b"\x0a\x10"  # field 1, 16 bytes
_SPAN_ID_TAG = b"\x12\x08"  # field 2, 8 bytes
_PARENT_ID_TAG = b"\x22\x08"  # field 4, 8 bytes
_START_TAG = _key(7, 1)
_END_TAG = _key(8, 1)
_KIND_FIELDS = [_key(6, 0) + _varint(kind) for kind in range(6)]


def attribute_fields(attributes: Mapping[str, AttributeValue]) -> bytes:
    """A span's ``attributes`` as encoded ``KeyValue`` fields (what :func:`span_message` takes);
    encodings concatenate, so a block of them may be cached and extended."""
    return _attributes(9, attributes)


def span_message(trace_id: str, span_id: str, parent_span_id: str | None, name: str, kind: int,
                 start_unix_nanos: int, end_unix_nanos: int, attributes: bytes,
                 status_code: int = STATUS_UNSET, status_message: str = "") -> bytes:
    """One ``Span`` message, with its attributes already encoded (:func:`attribute_fields`)."""
    last_id, trace_field = _TRACE_FIELD[0]
    if last_id != trace_id:
        trace = bytes.fromhex(trace_id)
        trace_field = _TRACE_ID_TAG + trace if len(trace) == 16 else _len_field(1, trace)
        _TRACE_FIELD[0] = (trace_id, trace_field)
    own = bytes.fromhex(span_id)
    parts = [trace_field, _SPAN_ID_TAG + own if len(own) == 8 else _len_field(2, own)]
    if parent_span_id:
        parts.append(_PARENT_FIELDS.get(parent_span_id) or _parent_field(parent_span_id))
    name_field = _NAME_FIELDS.get(name)
    if name_field is None:
        name_field = remember(_NAME_FIELDS, name, _str_field(5, name), _KV_CACHE_LIMIT)
    parts.append(name_field)
    if kind:
        parts.append(_KIND_FIELDS[kind] if 0 <= kind < len(_KIND_FIELDS) else _key(6, 0) + _varint(kind))
    if start_unix_nanos:
        parts.append(_START_TAG + _PACK_FIXED64(start_unix_nanos))
    if end_unix_nanos:
        parts.append(_END_TAG + _PACK_FIXED64(end_unix_nanos))
    parts.append(attributes)
    if status_code or status_message:
        status = _str_field(2, status_message)
        if status_code:
            status += _key(3, 0) + _varint(status_code)
        parts.append(_len_field(15, status))
    return b"".join(parts)


def encode_span(span: OtlpSpan) -> bytes:
    """One ``Span`` message."""
    return span_message(span.trace_id, span.span_id, span.parent_span_id, span.name, span.kind,
                        span.start_unix_nanos, span.end_unix_nanos, _attributes(9, span.attributes),
                        span.status_code, span.status_message)


def encode_protobuf(spans: Sequence[OtlpSpan], resource: Resource) -> bytes:
    """``ExportTraceServiceRequest`` bytes (``application/x-protobuf``) of one resource's spans."""
    return encode_protobuf_spans([encode_span(s) for s in spans], resource)


def encode_protobuf_spans(spans: Sequence[bytes], resource: Resource) -> bytes:
    """:func:`encode_protobuf` of spans already encoded as ``Span`` messages (:func:`span_message`)."""
    return encode_protobuf_span_fields([_len_field(2, s) for s in spans], resource)


def encode_protobuf_span_fields(fields: Sequence[bytes], resource: Resource) -> bytes:
    """:func:`encode_protobuf_spans` of spans already wrapped as ``ScopeSpans.spans`` fields
    (tag and length in front of each message): the request body is then one join."""
    # The nesting's tags and lengths are computed, so the spans are copied once, by one join
    # (nesting by concatenation copied the whole body four more times).
    scope_field = _len_field(1, _str_field(1, resource.scope_name) + _str_field(2, resource.scope_version))
    resource_field = _len_field(1, _attributes(1, resource.attributes))
    scope_spans_size = len(scope_field) + sum(map(len, fields))
    scope_spans_head = b"\x12" + _varint(scope_spans_size)  # ResourceSpans.scope_spans (2)
    resource_spans_size = len(resource_field) + len(scope_spans_head) + scope_spans_size
    head = b"\x0a" + _varint(resource_spans_size) + resource_field + scope_spans_head + scope_field
    return b"".join((head, *fields))  # ExportTraceServiceRequest.resource_spans (1), then the spans


# -- JSON ----------------------------------------------------------------------------------------
def _json_value(value: AttributeValue) -> dict[str, object]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        if math.isnan(value):
            return {"doubleValue": "NaN"}
        if math.isinf(value):
            return {"doubleValue": "Infinity" if value > 0 else "-Infinity"}
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"arrayValue": {"values": [_json_value(v) for v in value]}}


def _json_attributes(attributes: Mapping[str, AttributeValue]) -> list[dict[str, object]]:
    return [{"key": k, "value": _json_value(v)} for k, v in attributes.items()]


def encode_json(spans: Sequence[OtlpSpan], resource: Resource) -> bytes:
    """The same request in the OTLP/JSON encoding (``application/json``)."""
    out_spans = []
    for span in spans:
        item: dict[str, object] = {
            "traceId": span.trace_id, "spanId": span.span_id, "name": span.name,
            "kind": span.kind, "startTimeUnixNano": str(span.start_unix_nanos),
            "endTimeUnixNano": str(span.end_unix_nanos),
            "attributes": _json_attributes(span.attributes),
        }
        if span.parent_span_id:
            item["parentSpanId"] = span.parent_span_id
        if span.status_code or span.status_message:
            item["status"] = {"code": span.status_code, "message": span.status_message}
        out_spans.append(item)
    scope: dict[str, object] = {"name": resource.scope_name}
    if resource.scope_version:
        scope["version"] = resource.scope_version
    body = {"resourceSpans": [{
        "resource": {"attributes": _json_attributes(resource.attributes)},
        "scopeSpans": [{"scope": scope, "spans": out_spans}],
    }]}
    return json.dumps(body, separators=(",", ":")).encode("utf-8")
