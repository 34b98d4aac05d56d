"""The batch exporter against a real loopback HTTP server: flushed at close, bounded, configured
from the standard environment variables."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.errors import ConfigError
from goondan.otlp.encode import Resource, _len_field, encode_protobuf, encode_span
from goondan.otlp.exporter import (
    OtlpConfig,
    OtlpExporter,
    event_span_field,
    event_span_message,
    event_to_otlp_span,
    to_otlp_span,
)
from goondan.runtime.events import (
    AgentAnswered,
    IngressReceived,
    LlmCallEnded,
    LlmCallStarted,
    StepEnded,
    ToolEnded,
    TurnEnded,
    TurnStarted,
)
from goondan.runtime.traces import SpanAssembler

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
        TurnStarted(trace_id=TRACE, span_id=turn, turn_id="t", agent_name="coordinator", instance_key="k"),
        LlmCallStarted(trace_id=TRACE, span_id=llm, parent_span_id=turn, turn_id="t", step_id="s",
                       model="gpt-x", provider="openai", agent_name="coordinator", instance_key="k"),
        LlmCallEnded(trace_id=TRACE, span_id=llm, parent_span_id=turn, turn_id="t", step_id="s",
                     model="gpt-x", provider="openai", finish_reason="stop", token_usage={"prompt": 10, "completion": 5, "total": 15},
                     latency_ms=12.5, agent_name="coordinator", instance_key="k"),
        TurnEnded(trace_id=TRACE, span_id=turn, turn_id="t", finish_reason="text_response",
                  failed=True, error_code="E_BUDGET_EXCEEDED", error_message="over",
                  latency_ms=20.0, agent_name="coordinator", instance_key="k"),
    ]


def test_spans_are_exported_as_json_with_gen_ai_attributes(receiver: Receiver) -> None:
    port = receiver.server_address[1]
    config = OtlpConfig.from_env({"GOONDAN_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                                  "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                                  "OTEL_EXPORTER_OTLP_HEADERS": "x-project-name=p%201,authorization=Bearer t"})
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
        OtlpConfig.from_env({"GOONDAN_OTLP_ENDPOINT": "http://h:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert info.value.code == "E_OTLP_PROTOCOL"
    assert "Bearer" not in repr(OtlpConfig.from_env({"GOONDAN_OTLP_ENDPOINT": "http://h",
                                                     "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s"}))


def test_the_embedding_runtime_exports_one_tree_and_flushes_at_close(receiver: Receiver, state_root: Any) -> None:
    import os
    from pathlib import Path

    from goondan.runtime import Runtime
    from tests.support.aio import run

    port = receiver.server_address[1]
    env = {**os.environ, "GOONDAN_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
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
    assert chain == ["invoke_agent worker", "execute_tool agents__request", "step 0", "invoke_agent coordinator"]


# -- the exporter's direct path equals the general one ---------------------------------------------
_maybe_text = st.none() | st.sampled_from(["", "gpt-x", "fs__read", "worker", "é✓"])
_ids = st.sampled_from(["", "a" * 16, "0123456789abcdef", "abcd", "0123456789abcdef0123"])  # 8 bytes, or not
_end_events = st.one_of(
    st.builds(TurnEnded, turn_id=st.just("t"), finish_reason=st.just("text_response"), failed=st.booleans(),
              token_usage=st.none() | st.just({}) | st.just({"prompt": 3, "completion": 2, "total": 5}),
              cost=st.none() | st.floats(0, 1) | st.just(0), error_code=_maybe_text, error_message=_maybe_text,
              latency_ms=st.floats(0, 5_000)),
    st.builds(StepEnded, turn_id=st.just("t"), step_id=st.just("s"), step_index=st.integers(0, 40),
              failed=st.booleans(), cost=st.none() | st.floats(0, 1), error_message=_maybe_text,
              latency_ms=st.floats(0, 5_000)),
    st.builds(LlmCallEnded, turn_id=st.just("t"), step_id=st.just("s"), model=_maybe_text, provider=_maybe_text,
              finish_reason=_maybe_text, failed=st.booleans(), error_message=_maybe_text,
              token_usage=st.none() | st.just({"prompt": 7, "completion": 1}), cost=st.none() | st.floats(0, 1),
              latency_ms=st.floats(0, 5_000)),
    st.builds(ToolEnded, turn_id=st.just("t"), step_id=st.just("s"), step_index=st.integers(0, 40),
              tool_call_id=st.sampled_from(["", "call_1", "c" * 200]) | st.text(max_size=40),
              tool_name=st.sampled_from(["", "fs__read"]),
              status=st.sampled_from(["ok", "error"]), failed=st.booleans(), error_code=_maybe_text,
              error_message=_maybe_text, latency_ms=st.floats(0, 5_000)),
    st.builds(AgentAnswered, target=st.sampled_from(["", "worker"]), failed=st.booleans(),
              error_code=_maybe_text, error_message=_maybe_text, latency_ms=st.floats(0, 5_000)),
    st.builds(IngressReceived, source=st.sampled_from(["", "slack"]), event_id=_maybe_text, event_type=_maybe_text),
    st.builds(TurnStarted, turn_id=st.just("t")),
)


@settings(max_examples=300, deadline=None)
@given(event=_end_events, trace_id=st.sampled_from(["", TRACE]), span_id=_ids,
       parent=st.none() | _ids, agent=_maybe_text.map(lambda v: v or ""),
       moment=st.integers(1_600_000_000_000, 1_900_000_000_000))
def test_the_direct_span_equals_the_assembled_one(event: Any, trace_id: str, span_id: str, parent: str | None,
                                                  agent: str, moment: int) -> None:
    """``event_to_otlp_span`` (the exporter thread's path) builds exactly the span that the
    general path — the payload through ``SpanAssembler`` and ``to_otlp_span`` — builds."""
    event.trace_id, event.span_id, event.parent_span_id = trace_id, span_id, parent
    event.agent_name, event.instance_key = agent, "k"
    seconds, millis = divmod(moment, 1000)
    event.timestamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis:03d}Z"
    record = SpanAssembler().feed(event.to_dict())
    expected = to_otlp_span(record) if record is not None else None
    assert event_to_otlp_span(event) == expected
    if expected is None:
        assert event_span_message(event) is None
    else:
        resource = Resource(attributes={"service.name": "goondan"})
        assert encode_protobuf([event_to_otlp_span(event)], resource) == encode_protobuf([expected], resource)
        # The exporter's encoding with cached leading attributes: the same bytes, first time
        # (cache miss) and again (hit); as a ScopeSpans field, with its tag and length.
        assert event_span_message(event) == encode_span(expected)
        assert event_span_message(event) == encode_span(expected)
        assert event_span_field(event) == _len_field(2, encode_span(expected))


def test_timestamps_made_here_are_looked_up_not_parsed_with_the_same_time() -> None:
    """An event stamped by ``now_iso`` in this process: the exporter takes its time from the
    memo (``iso_millis``), and the span is the one the general path (parsing the text) builds."""
    from goondan.runtime.traces import iso_to_unix_nanos
    from goondan.types import iso_millis

    event = StepEnded(trace_id=TRACE, span_id="a" * 16, parent_span_id="b" * 16, agent_name="plain",
                      instance_key="k", turn_id="t", step_id="s", step_index=3, latency_ms=1.5)
    millis = iso_millis(event.timestamp)
    assert millis is not None and millis * 1_000_000 == iso_to_unix_nanos(event.timestamp)
    assert iso_millis("2020-01-01T00:00:00.000Z") is None  # not made here: parsed instead
    record = SpanAssembler().feed(event.to_dict())
    assert record is not None
    assert event_span_message(event) == encode_span(to_otlp_span(record))
