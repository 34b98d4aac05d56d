"""A background batch exporter: runtime events → spans → OTLP/HTTP, never blocking a turn.

:class:`OtlpExporter` queues end events (and ingresses); a daemon thread maps each to its span
(:class:`~goondan.runtime.traces.SpanAssembler`, then :func:`to_otlp_span`: the GenAI semantic
conventions) and POSTs batches through ``goondan/http/``. :meth:`close` flushes what is left
within :data:`CLOSE_TIMEOUT_S` (a blackholed endpoint costs the exit that much, then the request
in flight is cut); connecting waits at most :data:`CONNECT_TIMEOUT_S`; a failing endpoint is
warned about once until an export succeeds. See docs/observability.md "OTLP export".
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from goondan.errors import ConfigError
from goondan.otlp import ENDPOINT_VARS, encode
from goondan.otlp.encode import AttributeValue, OtlpSpan
from goondan.runtime.batcher import BackgroundBatcher
from goondan.runtime.events import LlmDelta, RuntimeEvent
from goondan.runtime.observe import EventSink
from goondan.runtime.traces import SpanAssembler, SpanRecord

__all__ = ["OtlpConfig", "OtlpExporter", "event_span", "exporter_from_env", "to_otlp_span"]

_log = logging.getLogger("goondan.otlp")
_PROTOCOLS = ("http/protobuf", "http/json")
CLOSE_TIMEOUT_S = 2.0  # the shutdown flush, in all
CONNECT_TIMEOUT_S = 2.0


def _parse_headers(raw: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``key=value`` pairs, comma separated, values URL-encoded."""
    pairs = (item.split("=", 1) for item in raw.split(",") if "=" in item)
    return {unquote(key.strip()): unquote(value.strip()) for key, value in pairs if key.strip()}


@dataclass(frozen=True)
class OtlpConfig:
    """Where and how spans are sent."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: Mapping[str, str] = field(default_factory=dict)
    service_name: str = "goondan"
    timeout_s: float = 10.0

    def __repr__(self) -> str:  # header values are often API keys
        return (f"OtlpConfig(endpoint={self.endpoint!r}, protocol={self.protocol!r}, "
                f"headers={sorted(self.headers)})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> OtlpConfig | None:
        """The first of :data:`~goondan.otlp.ENDPOINT_VARS` set (``None``: export is off) and
        the other ``OTEL_*`` variables of docs/observability.md "OTLP export"."""
        for name in ENDPOINT_VARS:
            endpoint = env.get(name, "").strip()
            if endpoint:
                break
        else:
            return None
        if name != "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":  # the signal's own one is used as it is
            endpoint = endpoint.rstrip("/")
            endpoint = endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"
        protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf").strip()
        if protocol not in _PROTOCOLS:
            raise ConfigError(f"OTLP protocol {protocol!r} is not supported",
                              code="E_OTLP_PROTOCOL", suggestion="set OTEL_EXPORTER_OTLP_PROTOCOL "
                              "to http/protobuf (default) or http/json")
        headers = _parse_headers(env.get("OTEL_EXPORTER_OTLP_HEADERS", ""))
        headers.update(_parse_headers(env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "")))
        timeout = env.get("OTEL_EXPORTER_OTLP_TIMEOUT", "")
        return cls(endpoint=endpoint, protocol=protocol, headers=headers,
                   service_name=env.get("OTEL_SERVICE_NAME", "").strip() or "goondan",
                   timeout_s=int(timeout) / 1000 if timeout.isdigit() else 10.0)


_OPENINFERENCE = {"turn": "AGENT", "step": "CHAIN", "llm": "LLM", "toolCall": "TOOL",
                  "agentCall": "AGENT", "ingress": "CHAIN"}
# The span attributes (the event fields, by wire key) with a documented OTLP name, per span kind
# (docs/observability.md "OTLP export"); every other one is exported as ``goondan.<key>``.
_NAMED: dict[str, dict[str, str]] = {
    "step": {"stepIndex": "goondan.step.index"},
    "llm": {"provider": "gen_ai.provider.name", "model": "gen_ai.request.model",
            "finishReason": "gen_ai.response.finish_reasons"},
    "toolCall": {"toolName": "gen_ai.tool.name", "toolCallId": "gen_ai.tool.call.id"},
    "agentCall": {"target": "gen_ai.agent.name"},
    "ingress": {"source": "goondan.ingress.source", "eventType": "goondan.ingress.eventType",
                "eventId": "goondan.ingress.eventId"},
}
_LISTS = frozenset({"gen_ai.response.finish_reasons"})  # arrays by the conventions


def to_otlp_span(record: SpanRecord) -> OtlpSpan:
    """A span with the OpenTelemetry GenAI semantic conventions (``gen_ai.*``), ``goondan.*``."""
    a = record.attributes
    attrs: dict[str, AttributeValue] = {
        "goondan.span.kind": record.kind,
        "goondan.agent.name": record.agent_name,
        "goondan.instance.key": record.instance_key,
        # Phoenix (and other OpenInference viewers) group spans by this attribute.
        "openinference.span.kind": _OPENINFERENCE.get(record.kind, "CHAIN"),
    }
    name, kind = record.name, encode.SPAN_KIND_INTERNAL
    if record.kind == "turn":
        name = f"invoke_agent {record.agent_name}"
        attrs.update({"gen_ai.operation.name": "invoke_agent",
                      "gen_ai.agent.name": record.agent_name,
                      "gen_ai.conversation.id": record.instance_key})
    elif record.kind == "llm":
        name, kind = f"chat {a.get('model') or ''}".strip(), encode.SPAN_KIND_CLIENT
        attrs["gen_ai.operation.name"] = "chat"
    elif record.kind == "toolCall":
        tool = str(a.get("toolName") or record.name)
        name = f"execute_tool {tool}"
        attrs.update({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                      "gen_ai.tool.type": "function"})
    elif record.kind == "agentCall":
        name, kind = f"invoke_agent {a.get('target') or ''}".strip(), encode.SPAN_KIND_CLIENT
        attrs["gen_ai.operation.name"] = "invoke_agent"
    elif record.kind == "ingress":
        kind = encode.SPAN_KIND_SERVER
    named = _NAMED.get(record.kind, {})
    for key, value in a.items():
        if value == "":
            continue
        attribute = named.get(key) or f"goondan.{key}"
        attrs[attribute] = [str(value)] if attribute in _LISTS else value
    usage = record.token_usage
    if usage and record.kind in ("turn", "llm"):
        attrs["gen_ai.usage.input_tokens"] = int(usage.get("prompt") or 0)
        attrs["gen_ai.usage.output_tokens"] = int(usage.get("completion") or 0)
    if record.cost is not None:
        attrs["goondan.cost.usd"] = float(record.cost)
    if record.error_code:
        attrs["error.type"] = record.error_code
    start, failed = max(record.start_unix_nanos, 0), record.status == "error"
    return OtlpSpan(
        trace_id=record.trace_id, span_id=record.span_id, parent_span_id=record.parent_span_id,
        name=name, kind=kind, start_unix_nanos=start,
        end_unix_nanos=max(record.end_unix_nanos, start), attributes=attrs,
        status_code=encode.STATUS_ERROR if failed else 0,
        status_message=(record.error_message or "") if failed else "")


def event_span(event: RuntimeEvent) -> OtlpSpan | None:
    """The span an end event (or an ingress) describes whole; ``None`` for any other event."""
    record = SpanAssembler().feed(event.to_dict())
    return None if record is None else to_otlp_span(record)


class OtlpExporter(EventSink):
    """Exports the spans of the events it receives, in batches, from a background thread."""

    # An end event describes its whole span: start events are not needed (nor streamed text).
    skips = frozenset({"turn.started", "step.started", "llm.started", "tool.called",
                       "agent.requested", "llm.delta"})

    def __init__(self, config: OtlpConfig, *,
                 resource_attributes: Mapping[str, AttributeValue] | None = None,
                 queue_limit: int = 20_000, batch_size: int = 512, interval_s: float = 1.0) -> None:
        self.config = config
        attributes = {"service.name": config.service_name, **(resource_attributes or {})}
        self.resource = encode.Resource(attributes)
        self.batch_size = batch_size
        # spans delivered, batches failed, spans of the failed batches
        self.exported = self.failed_batches = self.undelivered = 0
        self._pool: Any = None  # the HTTP layer's pool, made at the first post
        self._abort: Any = None  # its AbortHandle: close() cuts the request in flight
        self._warned = False  # a failure was warned about (until an export succeeds)
        self._batcher = BackgroundBatcher("goondan-otlp", self._export, limit=queue_limit,
                                          interval_s=interval_s)

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

    def handle(self, event: RuntimeEvent) -> None:
        """Queue an end event or an ingress (never blocks; a full queue drops it and counts it)."""
        if event.phase != "start" and type(event) is not LlmDelta:
            self._batcher.start()
            self._batcher.put(event)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Export everything queued (spans still open are dropped), then stop the thread; after
        ``timeout_s`` (most of it) the request in flight is cut and what is left is dropped."""
        self._batcher.close(timeout_s * 0.8)
        if self._batcher.running and self._abort is not None:
            # the thread's failure below is not warned again
            warned, self._warned = self._warned, True
            self._abort.abort()  # the thread's request (and any retry) fails at once
            self._batcher.close(timeout_s * 0.2)
            if not warned:
                _log.warning("OTLP export to %s did not answer within %.1f s at exit; the spans "
                             "not sent are dropped", self.config.endpoint, timeout_s)
        if self._pool is not None and not self._batcher.running:
            self._pool.clear()
            self._pool = None

    def flush(self, timeout_s: float = 15.0) -> None:
        """Export every span finished so far (blocks until sent)."""
        self._batcher.flush(timeout_s)

    # -- background thread ---------------------------------------------------------------------
    def _export(self, events: list[RuntimeEvent]) -> None:
        pending: list[OtlpSpan] = []
        for event in events:
            try:
                span = event_span(event)
            except Exception as exc:  # one malformed event must not lose the batch
                _log.warning("OTLP export: event %s skipped: %s", event.type, exc)
                continue
            if span is not None:
                pending.append(span)
        for start in range(0, len(pending), self.batch_size):
            self._send(pending[start:start + self.batch_size])

    def _send(self, spans: list[OtlpSpan]) -> None:
        import goondan.http as http  # urllib3 only once something is exported

        status = None
        try:
            as_json = self.config.protocol == "http/json"
            body = (encode.encode_json if as_json else encode.encode_protobuf)(spans, self.resource)
            content_type = "application/json" if as_json else "application/x-protobuf"
            if self._pool is None:
                self._pool, self._abort = http.new_pool(abortable=True), http.AbortHandle()
            # Any batch is re-sent, POST or not: at worst a backend sees the same span twice.
            policy = http.RetryPolicy(max_retries=2, base_delay=0.2, retry_server_errors=False,
                                      retry_statuses=frozenset({429, 502, 503, 504}),
                                      retry_non_idempotent=True)
            limit = self.config.timeout_s
            timeout = http.timeout(limit, connect_s=min(limit, CONNECT_TIMEOUT_S), total_s=limit)
            headers = {**self.config.headers, "Content-Type": content_type}
            with http.abortable(self._abort):
                response = http.send(self._pool, "POST", self.config.endpoint, body=body,
                                     policy=policy, headers=headers, timeout=timeout)
            status = int(response.status)
        except Exception as exc:  # the exporter must never take a turn down
            failure = http.failure_of(exc)  # a network failure's safe reason
            self._failed(f"failed: {failure.reason if failure is not None else exc}", len(spans))
            return
        if status is not None and 200 <= status < 300:
            self.exported += len(spans)
            self._warned = False
        else:
            self._failed(f"answered HTTP {status}", len(spans))

    def _failed(self, what: str, spans: int) -> None:
        """A batch was not delivered: counted; warned about once while the endpoint fails."""
        self.failed_batches += 1
        self.undelivered += spans
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        _log.log(level, "OTLP export to %s %s; %d span(s) dropped (later failures are logged at "
                 "debug level until an export succeeds)", self.config.endpoint, what, spans)


def exporter_from_env(env: Mapping[str, str] = os.environ, *,
                      resource_attributes: Mapping[str, AttributeValue] | None = None,
                      ) -> OtlpExporter | None:
    """An :class:`OtlpExporter` when an OTLP endpoint is configured, else ``None``."""
    config = OtlpConfig.from_env(env)
    return None if config is None else OtlpExporter(config, resource_attributes=resource_attributes)
