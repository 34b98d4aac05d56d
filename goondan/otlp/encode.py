"""OTLP trace payloads for goondan's spans: ``http/protobuf`` and ``http/json``.

The protobuf encoder writes the fixed part of ``ExportTraceServiceRequest`` goondan sends, with
the standard library (no protobuf runtime at run time):

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

Fields are written in field-number order and proto3 defaults (0, "", empty bytes) are left
out, as ``SerializeToString()`` of the official classes does; a message field that is set is
written even when empty, and so is a ``oneof`` member. ``tests/otlp/test_encode.py`` proves the
bytes identical to ``opentelemetry-proto``'s with a property test. The JSON form follows the
OTLP/JSON rules: hex ids, enum numbers, 64-bit integers as decimal strings.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["SPAN_KIND_CLIENT", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "STATUS_ERROR",
           "STATUS_OK", "STATUS_UNSET", "AttributeValue", "OtlpSpan", "Resource", "encode_json",
           "encode_protobuf", "encode_span"]

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
_VARINT, _FIXED64, _LEN = 0, 1, 2  # wire types


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:  # tags, most lengths and small numbers: one byte
        return bytes((value,))
    value &= (1 << 64) - 1  # a negative int64 is its ten-byte two's complement
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(number: int, wire_type: int) -> bytes:
    return bytes((number << 3 | wire_type,))  # field numbers here are at most 15: one byte


def _message(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a nested message, bytes or a string), written even when empty."""
    return _tag(number, _LEN) + _varint(len(payload)) + payload


def _bytes(number: int, payload: bytes) -> bytes:
    """A ``bytes`` or ``string`` field: left out when empty (its default)."""
    return _message(number, payload) if payload else b""


def _string(number: int, text: str) -> bytes:
    return _bytes(number, text.encode("utf-8"))


def _uint(number: int, value: int) -> bytes:
    return _tag(number, _VARINT) + _varint(value) if value else b""


def _fixed64(number: int, value: int) -> bytes:
    return _tag(number, _FIXED64) + struct.pack("<Q", value) if value else b""


def _any_value(value: AttributeValue) -> bytes:
    if isinstance(value, bool):
        return _tag(2, _VARINT) + _varint(int(value))
    if isinstance(value, int):
        return _tag(3, _VARINT) + _varint(value)
    if isinstance(value, float):
        return _tag(4, _FIXED64) + struct.pack("<d", value)
    if isinstance(value, str):
        return _message(1, value.encode("utf-8"))
    return _message(5, b"".join(_message(1, _any_value(item)) for item in value))


def _attributes(number: int, attributes: Mapping[str, AttributeValue]) -> bytes:
    return b"".join(_message(number, _string(1, key) + _message(2, _any_value(value)))
                    for key, value in attributes.items())


def encode_span(span: OtlpSpan) -> bytes:
    """One ``Span`` message."""
    parts = [
        _bytes(1, bytes.fromhex(span.trace_id)),
        _bytes(2, bytes.fromhex(span.span_id)),
        _bytes(4, bytes.fromhex(span.parent_span_id or "")),
        _string(5, span.name),
        _uint(6, span.kind),
        _fixed64(7, span.start_unix_nanos),
        _fixed64(8, span.end_unix_nanos),
        _attributes(9, span.attributes),
    ]
    if span.status_code or span.status_message:
        parts.append(_message(15, _string(2, span.status_message) + _uint(3, span.status_code)))
    return b"".join(parts)


def encode_protobuf(spans: Sequence[OtlpSpan], resource: Resource) -> bytes:
    """``ExportTraceServiceRequest`` bytes (``application/x-protobuf``) of one resource's spans."""
    scope = _message(1, _string(1, resource.scope_name) + _string(2, resource.scope_version))
    scope_spans = _message(2, scope + b"".join(_message(2, encode_span(s)) for s in spans))
    resource_spans = _message(1, _attributes(1, resource.attributes)) + scope_spans
    return _message(1, resource_spans)


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
