"""The hand-written OTLP protobuf encoder is byte-identical to ``opentelemetry-proto``'s
``SerializeToString()`` for every span goondan can produce (a property test), and the JSON
encoding parses with the official JSON mapping to the same message."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.otlp.encode import OtlpSpan, Resource, encode_json, encode_protobuf

pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
common = pytest.importorskip("opentelemetry.proto.common.v1.common_pb2")
resource_pb2 = pytest.importorskip("opentelemetry.proto.resource.v1.resource_pb2")
trace_pb2 = pytest.importorskip("opentelemetry.proto.trace.v1.trace_pb2")
json_format = pytest.importorskip("google.protobuf.json_format")

hex16 = st.binary(min_size=8, max_size=8).map(bytes.hex)
hex32 = st.binary(min_size=16, max_size=16).map(bytes.hex)
scalars = st.one_of(
    st.text(max_size=20), st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4))
attributes = st.dictionaries(st.text(max_size=12), values, max_size=6)
nanos = st.integers(min_value=0, max_value=2**64 - 1)
spans = st.builds(
    OtlpSpan, trace_id=hex32, span_id=hex16, name=st.text(max_size=30),
    start_unix_nanos=nanos, end_unix_nanos=nanos,
    parent_span_id=st.one_of(st.none(), hex16), kind=st.integers(min_value=0, max_value=5),
    attributes=attributes, status_code=st.integers(min_value=0, max_value=2),
    status_message=st.text(max_size=20),
)
resources = st.builds(Resource, attributes=attributes, scope_name=st.text(max_size=10),
                      scope_version=st.text(max_size=6))


def _any(value: object) -> object:
    if isinstance(value, bool):
        return common.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common.AnyValue(int_value=value)
    if isinstance(value, float):
        return common.AnyValue(double_value=value)
    if isinstance(value, str):
        return common.AnyValue(string_value=value)
    assert isinstance(value, list)
    return common.AnyValue(array_value=common.ArrayValue(values=[_any(v) for v in value]))


def _kvs(attrs: dict[str, object]) -> list[object]:
    return [common.KeyValue(key=k, value=_any(v)) for k, v in attrs.items()]


def official(spans_: list[OtlpSpan], resource: Resource) -> object:
    """The same request built with the official generated classes."""
    out = []
    for s in spans_:
        span = trace_pb2.Span(
            trace_id=bytes.fromhex(s.trace_id), span_id=bytes.fromhex(s.span_id),
            parent_span_id=bytes.fromhex(s.parent_span_id or ""), name=s.name, kind=s.kind,
            start_time_unix_nano=s.start_unix_nanos, end_time_unix_nano=s.end_unix_nanos,
            attributes=_kvs(dict(s.attributes)),
        )
        if s.status_code or s.status_message:
            span.status.CopyFrom(trace_pb2.Status(code=s.status_code, message=s.status_message))
        out.append(span)
    return pb.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource_pb2.Resource(attributes=_kvs(dict(resource.attributes))),
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=common.InstrumentationScope(
                            name=resource.scope_name, version=resource.scope_version
                        ),
                        spans=out,
                    )
                ],
            )
        ]
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(spans, max_size=5), resources)
def test_protobuf_bytes_identical_to_opentelemetry_proto(
    spans_: list[OtlpSpan], resource: Resource
) -> None:
    assert encode_protobuf(spans_, resource) == official(spans_, resource).SerializeToString()


@pytest.mark.parametrize("count", [0, 1, 60, 600])
def test_a_full_batch_is_identical_too(count: int) -> None:
    """Bodies whose nesting lengths take one, two and three varint bytes (600 spans: > 16 KiB),
    as the exporter posts them (up to 512 spans a request)."""
    spans_ = [
        OtlpSpan(
            trace_id=f"{i % 7 + 1:032x}",
            span_id=f"{i + 1:016x}",
            name=f"step {i}",
            start_unix_nanos=1_700_000_000_000_000_000 + i,
            end_unix_nanos=1_700_000_000_000_000_500 + i,
            parent_span_id=None if i % 5 == 0 else f"{i:016x}",
            kind=i % 4,
            attributes={
                "goondan.agent.name": "coordinator",
                "goondan.step.index": i,
                "gen_ai.usage.input_tokens": 10 * i,
                "goondan.cost.usd": i / 1000,
            },
        )
        for i in range(count)
    ]
    resource = Resource(
        attributes={"service.name": "goondan", "goondan.swarm": "s" * 200}, scope_name="goondan"
    )
    assert encode_protobuf(spans_, resource) == official(spans_, resource).SerializeToString()


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


@settings(max_examples=100, deadline=None)
@given(st.lists(spans, max_size=3), resources)
def test_json_parses_to_the_same_message(spans_: list[OtlpSpan], resource: Resource) -> None:
    request = pb.ExportTraceServiceRequest()
    # The official JSON mapping wants ids in base64; OTLP/JSON uses hex, so compare the rest.
    body = encode_json(spans_, resource)
    import json

    data = json.loads(body)
    for item in data["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in item:
                import base64

                item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
    json_format.ParseDict(data, request)
    expected = official(spans_, resource)
    if all(_finite(v) for s in spans_ for v in s.attributes.values()) and all(
            _finite(v) for v in resource.attributes.values()):
        assert request.SerializeToString() == expected.SerializeToString()
