"""The batch exporter against a real loopback HTTP server: flushed at close, bounded, configured
from the standard environment variables."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.errors import ConfigError
from goondan.otlp.encode import Resource, encode_protobuf
from goondan.runtime import events
from goondan.runtime import otlp_exporter as exporter_module
from goondan.runtime.events import (
    LlmCallEnded,
    LlmCallStarted,
    RuntimeEvent,
    ToolEnded,
    TurnEnded,
    TurnStarted,
)
from goondan.runtime.otlp_exporter import OtlpConfig, OtlpExporter, event_span
from goondan.runtime.traces import _RECORD_KEYS
from tests.support.event_strategies import end_event_classes, events_of

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

TRACE = "c" * 32


class Receiver(ThreadingHTTPServer):
    bodies: list[tuple[str, dict[str, str], bytes]]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            server.bodies.append((self.path, dict(self.headers), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = Receiver(("127.0.0.1", 0), Handler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _turn_events() -> list[Any]:
    turn, llm = "1" * 16, "2" * 16
    return [
        TurnStarted(
            trace_id=TRACE, span_id=turn, turn_id="t", agent_name="coordinator", instance_key="k"
        ),
        LlmCallStarted(
            trace_id=TRACE,
            span_id=llm,
            parent_span_id=turn,
            turn_id="t",
            step_id="s",
            model="gpt-x",
            provider="openai",
            agent_name="coordinator",
            instance_key="k",
        ),
        LlmCallEnded(
            trace_id=TRACE,
            span_id=llm,
            parent_span_id=turn,
            turn_id="t",
            step_id="s",
            model="gpt-x",
            provider="openai",
            finish_reason="stop",
            token_usage={"prompt": 10, "completion": 5, "total": 15},
            latency_ms=12.5,
            agent_name="coordinator",
            instance_key="k",
        ),
        TurnEnded(
            trace_id=TRACE,
            span_id=turn,
            turn_id="t",
            finish_reason="text_response",
            failed=True,
            error_code="E_BUDGET_EXCEEDED",
            error_message="over",
            latency_ms=20.0,
            agent_name="coordinator",
            instance_key="k",
        ),
    ]


def test_spans_are_exported_as_json_with_gen_ai_attributes(receiver: Receiver) -> None:
    port = receiver.server_address[1]
    config = OtlpConfig.from_env(
        {
            "GOONDAN_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-project-name=p%201,authorization=Bearer t",
        }
    )
    assert config is not None and config.endpoint.endswith("/v1/traces")
    exporter = OtlpExporter(config)
    for event in _turn_events():
        exporter.handle(event)
    exporter.close()  # the shutdown flush
    [(path, headers, body)] = receiver.bodies
    assert path == "/v1/traces" and headers["Content-Type"] == "application/json"
    assert headers["x-project-name"] == "p 1"
    spans = json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    by_name = {s["name"]: s for s in spans}
    llm, turn = by_name["chat gpt-x"], by_name["invoke_agent coordinator"]
    attrs = {a["key"]: a["value"] for a in llm["attributes"]}
    assert attrs["gen_ai.operation.name"] == {"stringValue": "chat"}
    assert attrs["gen_ai.provider.name"] == {"stringValue": "openai"}
    assert attrs["gen_ai.usage.input_tokens"] == {"intValue": "10"}
    assert llm["parentSpanId"] == turn["spanId"] and "parentSpanId" not in turn
    assert turn["status"] == {"code": 2, "message": "over"}
    assert int(llm["endTimeUnixNano"]) - int(llm["startTimeUnixNano"]) == 12_500_000
    assert exporter.exported == 2 and exporter.dropped == 0


def test_protobuf_is_the_default_and_a_full_queue_drops(receiver: Receiver) -> None:
    port = receiver.server_address[1]
    config = OtlpConfig.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}/"})
    assert config is not None and config.protocol == "http/protobuf"
    exporter = OtlpExporter(config, queue_limit=1)
    exporter._batcher._thread = object()  # type: ignore[assignment]  # no consumer: the queue only fills
    for event in _turn_events():
        exporter.handle(event)  # start events are never queued: 2 end events, 1 fits
    assert exporter.dropped == 1


def test_unreachable_backend_counts_dropped_spans() -> None:
    exporter = OtlpExporter(OtlpConfig(endpoint="http://127.0.0.1:9/v1/traces", timeout_s=2))
    for event in _turn_events():
        exporter.handle(event)
    exporter.close()
    assert exporter.exported == 0 and exporter.dropped == 2 and exporter.failed_batches == 1


def test_configuration_from_the_environment() -> None:
    assert OtlpConfig.from_env({}) is None
    signal = OtlpConfig.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:1/custom"})
    assert signal is not None and signal.endpoint == "http://h:1/custom"
    with pytest.raises(ConfigError) as info:
        OtlpConfig.from_env(
            {"GOONDAN_OTLP_ENDPOINT": "http://h:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        )
    assert info.value.code == "E_OTLP_PROTOCOL"
    assert "Bearer" not in repr(
        OtlpConfig.from_env(
            {
                "GOONDAN_OTLP_ENDPOINT": "http://h",
                "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s",
            }
        )
    )


def test_the_embedding_runtime_exports_one_tree_and_flushes_at_close(
    receiver: Receiver, state_root: Any
) -> None:
    import os
    from pathlib import Path

    from goondan.runtime import Runtime
    from tests.support.aio import run

    port = receiver.server_address[1]
    env = {
        **os.environ,
        "GOONDAN_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
    }
    example = Path(__file__).resolve().parents[2] / "examples" / "delegation"

    async def main() -> str:
        async with Runtime.from_bundle(example, state_root=state_root, env=env) as rt:
            result = await rt.run_turn("coordinator", "What is 17 * 23?", instance_key="k")
            return str(result.metadata["traceId"])

    trace = run(main())
    spans = [s for _, _, body in receiver.bodies
             for s in json.loads(body)["resourceSpans"][0]["scopeSpans"][0]["spans"]]
    assert {s["traceId"] for s in spans} == {trace} and len(spans) == 10
    by_id = {s["spanId"]: s for s in spans}
    worker = next(s for s in spans if s["name"] == "invoke_agent worker" and s["kind"] == 1)
    chain = []
    node = worker
    while "parentSpanId" in node:
        node = by_id[node["parentSpanId"]]
        chain.append(node["name"])
    assert chain == [
        "invoke_agent worker",
        "execute_tool agents__request",
        "step 0",
        "invoke_agent coordinator",
    ]


# -- every field of every event reaches its own span ----------------------------------------------
def _decoded_spans(body: bytes) -> list[dict[str, Any]]:
    """The spans of a protobuf request body, parsed by ``opentelemetry-proto``: attributes as a
    dict."""
    request = trace_service.ExportTraceServiceRequest.FromString(body)

    def value(any_value: Any) -> Any:
        which = any_value.WhichOneof("value")
        if which == "array_value":
            return [value(v) for v in any_value.array_value.values]
        return getattr(any_value, which)

    return [{"spanId": span.span_id.hex(), "name": span.name,
             "attributes": {kv.key: value(kv.value) for kv in span.attributes}}
            for span in request.resource_spans[0].scope_spans[0].spans]


def _expected_attributes(event: RuntimeEvent, kind: str) -> dict[str, Any]:
    """Each scalar wire field of ``event`` under its documented OTLP name (``goondan.<key>``
    unless the mapping names it)."""
    named = exporter_module._NAMED.get(kind, {})
    out = {}
    for key, value in event.to_dict().items():
        if key in _RECORD_KEYS or not isinstance(value, (str, int, float)) or value == "":
            continue
        name = named.get(key) or f"goondan.{key}"
        out[name] = [value] if name in exporter_module._LISTS else value
    return out


def _check_each_span_carries_its_own_fields(first: RuntimeEvent, second: RuntimeEvent) -> None:
    spans = [s for s in (event_span(first), event_span(second)) if s is not None]
    if len(spans) < 2:
        return  # an event without trace or span id is no span
    body = encode_protobuf(spans, Resource(attributes={"service.name": "goondan"}))
    for event, decoded in zip((first, second), _decoded_spans(body), strict=True):
        kind = decoded["attributes"]["goondan.span.kind"]
        expected = _expected_attributes(event, kind)
        assert {k: decoded["attributes"].get(k) for k in expected} == expected


_pairs = st.sampled_from(end_event_classes()).flatmap(
    lambda cls: st.tuples(events_of(cls, surrogates=False), events_of(cls, surrogates=False)))


@settings(max_examples=300, deadline=None)
@given(pair=_pairs, span_ids=st.tuples(st.just("1" * 16), st.just("2" * 16)))
def test_every_field_of_an_end_event_reaches_its_own_span(pair: tuple[RuntimeEvent, RuntimeEvent],
                                                          span_ids: tuple[str, str]) -> None:
    """Two end events of one class, exported in one request: each span has every scalar field
    of its own event (strategies generated from the dataclass fields, so a new field is covered)."""
    first, second = pair
    for event, span_id in zip(pair, span_ids, strict=True):
        event.span_id, event.trace_id, event._payload = span_id, "c" * 32, None
    second.agent_name, second.instance_key = first.agent_name, first.instance_key  # the same agent
    _check_each_span_carries_its_own_fields(first, second)


@dataclass(kw_only=True, eq=False, repr=False)
class ToolEndedWithAttempt(ToolEnded):
    """ToolEnded with one optional field added (issue 29: such a field's first value used to be
    repeated on every later span of the same tool by a prefix cache of the exporter)."""

    attempt: int | None = None


def test_a_field_added_to_tool_ended_reaches_each_span_with_its_own_value(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    # registered for this test only
    monkeypatch.setattr(events, "_REGISTRY", dict(events._REGISTRY))
    events._register(ToolEndedWithAttempt)
    assert "attempt" in {f.name for f in dataclasses.fields(ToolEndedWithAttempt)}
    exporter = OtlpExporter(OtlpConfig(endpoint=f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"))
    for index, attempt in enumerate((1, 2, 3)):
        exporter.handle(
            ToolEndedWithAttempt(
                trace_id=TRACE,
                span_id=f"{index + 1:016x}",
                parent_span_id="f" * 16,
                turn_id="t",
                step_id="s",
                step_index=0,
                tool_call_id=f"call_{index}",
                tool_name="fs__read",
                status="ok",
                latency_ms=1.0,
                agent_name="coordinator",
                instance_key="k",
                attempt=attempt,
            )
        )
    exporter.close()
    spans = [s for _, _, body in receiver.bodies for s in _decoded_spans(body)]
    assert {s["spanId"]: s["attributes"].get("goondan.attempt") for s in spans} == {
        f"{1:016x}": 1, f"{2:016x}": 2, f"{3:016x}": 3}
    assert [s["attributes"]["gen_ai.tool.call.id"] for s in spans] == ["call_0", "call_1", "call_2"]
