"""OTLP trace payloads for goondan's spans: ``http/protobuf`` and ``http/json``.

The protobuf encoder writes, with the standard library, the part of opentelemetry-proto's
``ExportTraceServiceRequest`` goondan sends (each message's field numbers are named where it is
written): fields in field-number order, proto3 defaults (0, "", empty bytes) left out, a set
message field or ``oneof`` member written even when empty — the bytes of ``SerializeToString()``
(``tests/otlp/test_encode.py`` proves it). JSON follows OTLP/JSON: hex ids, enum numbers, 64-bit
integers as decimal strings.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["SPAN_KIND_CLIENT", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER", "STATUS_ERROR",
           "AttributeValue", "OtlpSpan", "Resource", "encode_json", "encode_protobuf"]

AttributeValue = str | bool | int | float | Sequence[str | bool | int | float]

SPAN_KIND_INTERNAL, SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 1, 2, 3
STATUS_ERROR = 2  # 0: unset (the default), 1: ok


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
    status_code: int = 0
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


def _bytes(number: int, payload: bytes | str) -> bytes:
    """A ``bytes`` or ``string`` field: left out when empty (its default)."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    return _message(number, payload) if payload else b""


def _uint(number: int, value: int) -> bytes:
    return _tag(number, _VARINT) + _varint(value) if value else b""


def _fixed64(number: int, value: int) -> bytes:
    return _tag(number, _FIXED64) + struct.pack("<Q", value) if value else b""


def _any_value(value: AttributeValue) -> bytes:
    """``AnyValue``: string 1, bool 2, int64 3, double 4, ArrayValue 5 (``values = 1``)."""
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
    """Repeated ``KeyValue`` (``string key = 1; AnyValue value = 2``) as field ``number``."""
    return b"".join(_message(number, _bytes(1, key) + _message(2, _any_value(value)))
                    for key, value in attributes.items())


def _span(span: OtlpSpan) -> bytes:
    """``Span``: the fields below by number; ``Status`` 15 is ``message = 2; code = 3``."""
    parts = [
        _bytes(1, bytes.fromhex(span.trace_id)),
        _bytes(2, bytes.fromhex(span.span_id)),
        _bytes(4, bytes.fromhex(span.parent_span_id or "")),
        _bytes(5, span.name),
        _uint(6, span.kind),
        _fixed64(7, span.start_unix_nanos),
        _fixed64(8, span.end_unix_nanos),
        _attributes(9, span.attributes),
    ]
    if span.status_code or span.status_message:
        parts.append(_message(15, _bytes(2, span.status_message) + _uint(3, span.status_code)))
    return b"".join(parts)


def encode_protobuf(spans: Sequence[OtlpSpan], resource: Resource) -> bytes:
    """``ExportTraceServiceRequest`` bytes (``application/x-protobuf``) of one resource's spans:
    ``ResourceSpans`` 1 {``Resource`` 1 {attributes 1}, ``ScopeSpans`` 2 {``InstrumentationScope``
    1 {name 1, version 2}, spans 2}}."""
    scope = _message(1, _bytes(1, resource.scope_name) + _bytes(2, resource.scope_version))
    scope_spans = _message(2, scope + b"".join(_message(2, _span(s)) for s in spans))
    resource_spans = _message(1, _attributes(1, resource.attributes)) + scope_spans
    return _message(1, resource_spans)


# -- JSON ----------------------------------------------------------------------------------------
def _json_value(value: AttributeValue) -> dict[str, object]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return {"doubleValue": value}
        return {"doubleValue": {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]}
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
