"""Spans rebuilt from runtime events, and the span tree of one trace.

Runtime events come in pairs (``turn.started`` … ``turn.completed``); :class:`SpanAssembler`
pairs them by ``spanId`` into :class:`SpanRecord` objects, whichever process or file they came
from. :func:`build_tree` links the spans of a trace by ``parentSpanId`` into one tree (coordinator
turn → step → ``agents__request`` tool call → agent request → worker turn → …), and
:func:`format_tree` draws it. The wait for a person is a span of kind ``approval`` under the
waiting tool call, from ``approval.requested`` to ``approval.decided`` (paired by
``approvalId``: the decision is applied by the resumed turn, in another span), still
``waiting`` while undecided (docs/approvals.md "Events"). The exporter (``goondan/otlp/``)
sends the same records. See docs/observability.md "Span tree".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from goondan.runtime.ledger import usage_from_dict
from goondan.types import JsonObject, TokenUsage

__all__ = [
    "SpanAssembler",
    "SpanRecord",
    "TraceSummary",
    "approval_span_id",
    "build_tree",
    "format_tree",
    "iso_to_unix_nanos",
    "summarize_traces",
    "touched_span_id",
]

# event type prefix -> span kind
_KINDS = {"turn": "turn", "step": "step", "llm": "llm", "tool": "toolCall", "agent": "agentCall"}
_SKIPPED = ("llm.delta",)


def iso_to_unix_nanos(value: str) -> int:
    """``2026-03-04T08:05:09.120Z`` → nanoseconds since the epoch."""
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    # round, not int: 1764000000.12 * 1000 is 1764000000119.9999 in floating point.
    return round(moment.timestamp() * 1000) * 1_000_000


@dataclass
class SpanRecord:
    """One finished (or still open) span, as shown by ``inspect trace`` and exported over OTLP."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: str
    agent_name: str
    instance_key: str
    start_time: str
    start_unix_nanos: int
    duration_ms: float | None = None
    status: str = "running"  # running | ok | error
    error_code: str | None = None
    error_message: str | None = None
    attributes: JsonObject = field(default_factory=dict)
    token_usage: JsonObject | None = None
    cost: float | None = None
    children: list[SpanRecord] = field(default_factory=list, repr=False)

    @property
    def end_unix_nanos(self) -> int:
        """Start plus the duration (the start itself while running)."""
        return self.start_unix_nanos + int((self.duration_ms or 0.0) * 1_000_000)

    def to_dict(self, *, nested: bool = False) -> JsonObject:
        """The ``inspect trace --json`` span object (``parentSpanId`` is null only for a root)."""
        out: JsonObject = {
            "traceId": self.trace_id, "spanId": self.span_id, "parentSpanId": self.parent_span_id,
            "name": self.name, "kind": self.kind, "agentName": self.agent_name,
            "instanceKey": self.instance_key, "startTime": self.start_time,
            "durationMs": self.duration_ms, "status": self.status,
            "attributes": dict(self.attributes),
        }
        if self.token_usage is not None:
            out["tokenUsage"] = self.token_usage
        if self.cost is not None:
            out["cost"] = self.cost
        if self.error_code or self.error_message:
            out["error"] = {"code": self.error_code, "message": self.error_message}
        if nested:
            out["children"] = [child.to_dict(nested=True) for child in self.children]
        return out

    @classmethod
    def from_dict(cls, doc: JsonObject, start_unix_nanos: int) -> SpanRecord:
        """The record of a :meth:`to_dict` object (without ``children``), as a store keeps it;
        ``start_unix_nanos`` is kept beside it (``startTime`` is the end of a span whose start
        event is not logged)."""
        found = doc.get("error")
        error: JsonObject = found if isinstance(found, dict) else {}
        duration = doc.get("durationMs")
        usage = doc.get("tokenUsage")
        cost = doc.get("cost")
        attributes = doc.get("attributes")
        return cls(
            trace_id=str(doc["traceId"]), span_id=str(doc["spanId"]),
            parent_span_id=doc.get("parentSpanId") or None, name=str(doc.get("name") or ""),
            kind=str(doc.get("kind") or ""), agent_name=str(doc.get("agentName") or ""),
            instance_key=str(doc.get("instanceKey") or ""),
            start_time=str(doc.get("startTime") or ""), start_unix_nanos=start_unix_nanos,
            duration_ms=float(duration) if isinstance(duration, (int, float)) else None,
            status=str(doc.get("status") or "running"),
            error_code=error.get("code") or None, error_message=error.get("message") or None,
            attributes=dict(attributes) if isinstance(attributes, dict) else {},
            token_usage=usage if isinstance(usage, dict) else None,
            cost=float(cost) if isinstance(cost, (int, float)) else None,
        )


def _name(kind: str, payload: JsonObject) -> str:
    if kind == "turn":
        return f"turn {payload.get('agentName', '')}".strip()
    if kind == "step":
        return f"step {payload.get('stepIndex', '')}".strip()
    if kind == "llm":
        return f"llm {payload.get('model') or ''}".strip()
    if kind == "toolCall":
        return str(payload.get("toolName") or "tool")
    return f"request {payload.get('target', '')}".strip()


# Wire keys a SpanRecord keeps in fields of its own (ids, times, usage, cost, errors). Every other
# scalar field of a span's events is one of its ``attributes``, under its wire key: a field added
# to an event class shows up here (and in the OTLP export) without a list to update.
_RECORD_KEYS = frozenset(
    {
        "type",
        "timestamp",
        "agentName",
        "instanceKey",
        "traceId",
        "spanId",
        "parentSpanId",
        "latencyMs",
        "duration",
        "tokenUsage",
        "cost",
        "errorCode",
        "errorMessage",
    }
)


def _merge_attributes(attributes: JsonObject, payload: JsonObject) -> None:
    for key, value in payload.items():
        if key not in _RECORD_KEYS and isinstance(value, (str, int, float)):  # bool is an int
            attributes[key] = value


class SpanAssembler:
    """Pairs start and end events (wire payloads) by ``spanId`` into :class:`SpanRecord` objects."""

    def __init__(self) -> None:
        self.open: dict[str, SpanRecord] = {}

    def __repr__(self) -> str:
        return f"<SpanAssembler open={len(self.open)}>"

    def feed(self, payload: JsonObject) -> SpanRecord | None:
        """Take one event; returns the span it finished (``None`` for a start or a point event)."""
        event_type = str(payload.get("type") or "")
        if event_type in _SKIPPED:
            return None
        if event_type == "ingress.received":
            return self._ingress(payload)
        if event_type in ("approval.requested", "approval.decided"):
            return self._approval(event_type, payload)
        kind = _KINDS.get(event_type.split(".", 1)[0])
        span_id = payload.get("spanId")
        trace_id = payload.get("traceId")
        if kind is None or not isinstance(span_id, str) or not isinstance(trace_id, str):
            return None
        record = self.open.get(span_id)
        if record is None:
            record = self._start(kind, payload)
        self._merge(record, payload)
        if event_type.endswith(".started") or event_type in ("tool.called", "agent.requested"):
            self.open[span_id] = record
            return None
        self.open.pop(span_id, None)
        latency = payload.get("latencyMs")
        record.duration_ms = float(latency) if isinstance(latency, (int, float)) else 0.0
        if record.start_unix_nanos == _end_only_marker:
            end = iso_to_unix_nanos(str(payload.get("timestamp")))
            record.start_unix_nanos = end - int(record.duration_ms * 1_000_000)
        failed = event_type.endswith(".failed")
        record.status = "error" if failed else "ok"
        usage = payload.get("tokenUsage")
        if isinstance(usage, dict):
            record.token_usage = usage
        cost = payload.get("cost")
        if isinstance(cost, (int, float)):
            record.cost = float(cost)
        if failed:
            record.error_code = payload.get("errorCode") or None
            record.error_message = payload.get("errorMessage") or None
        return record

    @staticmethod
    def _ingress(payload: JsonObject) -> SpanRecord | None:
        """An ingress is a zero-length span: the parent of the turn its event starts."""
        if not payload.get("traceId") or not payload.get("spanId"):
            return None
        timestamp = str(payload.get("timestamp") or "")
        record = SpanRecord(
            trace_id=str(payload["traceId"]), span_id=str(payload["spanId"]), parent_span_id=None,
            name=f"ingress {payload.get('source', '')}".strip(), kind="ingress",
            agent_name=str(payload.get("agentName") or ""),
            instance_key=str(payload.get("instanceKey") or ""), start_time=timestamp,
            start_unix_nanos=iso_to_unix_nanos(timestamp) if timestamp else 0,
            duration_ms=0.0, status="ok",
        )
        _merge_attributes(record.attributes, payload)
        return record

    def _approval(self, event_type: str, payload: JsonObject) -> SpanRecord | None:
        """The wait for a decision: opened by ``approval.requested`` (a child of the waiting
        tool call), closed by the ``approval.decided`` of the same ``approvalId``."""
        ident = payload.get("approvalId")
        if not isinstance(ident, str) or not ident:
            return None
        span_id = approval_span_id(ident)
        timestamp = str(payload.get("timestamp") or "")
        if event_type == "approval.requested":
            if not payload.get("traceId") or not payload.get("spanId") or not timestamp:
                return None
            record = SpanRecord(
                trace_id=str(payload["traceId"]), span_id=span_id,
                parent_span_id=str(payload["spanId"]),
                name=f"approval {payload.get('toolName') or ''}".strip(), kind="approval",
                agent_name=str(payload.get("agentName") or ""),
                instance_key=str(payload.get("instanceKey") or ""), start_time=timestamp,
                start_unix_nanos=iso_to_unix_nanos(timestamp))
            _merge_attributes(record.attributes, payload)
            self.open[span_id] = record
            return None
        waiting = self.open.pop(span_id, None)
        if waiting is None or not timestamp:  # its request is not in these events
            return None
        _merge_attributes(waiting.attributes, payload)
        waited = iso_to_unix_nanos(timestamp) - waiting.start_unix_nanos
        waiting.duration_ms = max(waited, 0) / 1_000_000
        waiting.status = "ok"
        return waiting

    def _start(self, kind: str, payload: JsonObject) -> SpanRecord:
        timestamp = str(payload.get("timestamp") or "")
        is_start = str(payload.get("type")).endswith(".started") or payload.get("type") in (
            "tool.called", "agent.requested")
        return SpanRecord(
            trace_id=str(payload["traceId"]),
            span_id=str(payload["spanId"]),
            parent_span_id=payload.get("parentSpanId") or None,
            name=_name(kind, payload),
            kind=kind,
            agent_name=str(payload.get("agentName") or ""),
            instance_key=str(payload.get("instanceKey") or ""),
            start_time=timestamp,
            start_unix_nanos=iso_to_unix_nanos(timestamp)
            if is_start and timestamp
            else _end_only_marker,
        )

    @staticmethod
    def _merge(record: SpanRecord, payload: JsonObject) -> None:
        _merge_attributes(record.attributes, payload)
        if record.kind == "llm" and payload.get("model") and record.name == "llm":
            record.name = f"llm {payload['model']}"


def approval_span_id(approval_id: str) -> str:
    """The span id of the wait for approval ``approval_id`` (OTLP-shaped: 16 hex digits)."""
    return hashlib.sha256(approval_id.encode()).hexdigest()[:16]


def touched_span_id(payload: JsonObject) -> str | None:
    """The id of the span an event (a wire payload) starts, ends or is (an ingress)."""
    if payload.get("type") in ("approval.requested", "approval.decided"):
        ident = payload.get("approvalId")
        return approval_span_id(ident) if isinstance(ident, str) and ident else None
    span_id = payload.get("spanId")
    return span_id if isinstance(span_id, str) and span_id else None


_end_only_marker = -1  # a span whose start event was rotated away: start = end - duration


def build_tree(spans: Iterable[SpanRecord]) -> list[SpanRecord]:
    """Link ``spans`` by ``parentSpanId``; returns the roots (a span whose parent is missing is
    a root too), children ordered by start time."""
    by_id = {span.span_id: span for span in spans}
    roots: list[SpanRecord] = []
    for span in by_id.values():
        span.children = []
    for span in sorted(by_id.values(), key=lambda s: s.start_unix_nanos):
        parent = by_id.get(span.parent_span_id or "")
        (parent.children if parent is not None else roots).append(span)
    return roots


def _usage_text(usage: JsonObject | None) -> str:
    if not usage:
        return ""
    text = f"{usage.get('prompt', 0)}→{usage.get('completion', 0)} tok"
    if usage.get("unknownCalls"):
        text += f" (+{usage['unknownCalls']} unknown)"
    return text


def _approval_text(span: SpanRecord) -> str:
    """``waited 1.2 s: approved by U2 via slack:U2``, or ``waiting`` (no decision yet)."""
    if span.duration_ms is None:
        return "waiting for a decision"
    attrs = span.attributes
    text = f"waited {span.duration_ms / 1000:.1f} s: {attrs.get('status', 'decided')}"
    if attrs.get("decidedBy"):
        text += f" by {attrs['decidedBy']}"
    if attrs.get("via"):
        text += f" via {attrs['via']}"
    return text


def format_tree(roots: list[SpanRecord]) -> list[str]:
    """The indented tree, one line per span: name, agent, duration, tokens, cost, error."""
    lines: list[str] = []

    def walk(span: SpanRecord, depth: int) -> None:
        parts = [("  " * depth) + span.name]
        if span.kind == "turn":
            parts.append(f"[{span.agent_name}@{span.instance_key}]")
        if span.kind == "approval":
            parts.append(_approval_text(span))
        else:
            parts.append(
                f"{span.duration_ms:.1f} ms" if span.duration_ms is not None else "running"
            )
        if span.kind in ("turn", "llm"):
            usage = _usage_text(span.token_usage)
            if usage:
                parts.append(usage)
            if span.cost is not None:
                parts.append(f"${span.cost:.6f}")
        if span.status == "error":
            parts.append(f"ERROR {span.error_code or ''} {span.error_message or ''}".rstrip())
        lines.append("  ".join(parts))
        for child in span.children:
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return lines


@dataclass
class TraceSummary:
    """One trace of a set of spans: its root, totals over every agent of the trace."""

    trace_id: str
    start_time: str
    root_name: str
    agents: list[str]
    span_count: int
    duration_ms: float | None
    usage: TokenUsage
    cost: float | None
    errors: int

    def to_dict(self) -> JsonObject:
        """The camelCase row of ``inspect instance --traces --json``."""
        return {"traceId": self.trace_id, "startTime": self.start_time, "root": self.root_name,
                "agents": self.agents, "spanCount": self.span_count, "durationMs": self.duration_ms,
                "tokenUsage": self.usage.to_dict(), "cost": self.cost, "errors": self.errors}


def summarize_traces(spans: Iterable[SpanRecord]) -> list[TraceSummary]:
    """One :class:`TraceSummary` per trace id, oldest first. Usage and cost are summed over the
    trace's *turn* spans (a turn's usage already includes its steps and LLM calls)."""
    by_trace: dict[str, list[SpanRecord]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    out: list[TraceSummary] = []
    for trace_id, members in by_trace.items():
        roots = build_tree(members)
        root = min(roots, key=lambda s: s.start_unix_nanos)
        turns = [s for s in members if s.kind == "turn"]
        costs = [s.cost for s in turns if s.cost is not None]
        usage = TokenUsage()
        for turn in turns:
            usage = usage + usage_from_dict(turn.token_usage)
        out.append(TraceSummary(
            trace_id=trace_id, start_time=root.start_time, root_name=root.name,
            agents=sorted({s.agent_name for s in members if s.agent_name}),
            span_count=len(members), duration_ms=root.duration_ms, usage=usage,
            cost=round(math.fsum(costs), 9) if costs else None,
            errors=sum(1 for s in members if s.status == "error"),
        ))
    out.sort(key=lambda t: t.start_time)
    return out


def trace_totals(spans: Iterable[SpanRecord]) -> dict[str, Any]:
    """``{tokenUsage, cost}`` summed over the turn spans of ``spans``."""
    turns = [s for s in spans if s.kind == "turn"]
    usage = TokenUsage()
    for turn in turns:
        usage = usage + usage_from_dict(turn.token_usage)
    costs = [s.cost for s in turns if s.cost is not None]
    return {"tokenUsage": usage.to_dict(), "cost": round(math.fsum(costs), 9) if costs else None}
