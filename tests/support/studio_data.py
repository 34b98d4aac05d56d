"""A large state root for measuring the studio: a 10,000-message conversation and a
2,000-span trace (issue 35: both render in under 1 s, measured by the browser test).

``build_large_state(directory)`` writes the files the studio reads — an instance made by
:class:`~goondan.workspace.store.InstanceStore` whose ``base.jsonl`` holds the messages, and its
``runtime-events.jsonl`` holding the runtime events of one trace across two agents (turn →
steps → LLM calls and tool calls → a request to a worker → its turn …), with some failed tool
calls — and returns where to find them. Runs in about a second.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from goondan.conversation.codec import encode_message
from goondan.conversation.messages import Message, MessageSource
from goondan.workspace.store import InstanceStore

__all__ = ["build_large_state"]

WORKSPACE = "studio-large"
AGENT = "coordinator"
WORKER = "worker"
KEY = "big"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
_START = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _messages(count: int) -> list[Message]:
    out: list[Message] = []
    index = 0
    while len(out) < count:
        call = f"call_{index}"
        at = _iso(_START + timedelta(seconds=index))
        batch = [
            Message.user(f"question {index}: what is {index} * 7?"),
            Message.create("assistant", [
                {"type": "text", "text": f"Let me compute {index} * 7."},
                {"type": "tool-call", "toolCallId": call, "toolName": "calc__multiply",
                 "input": {"a": index, "b": 7}},
            ], source=MessageSource("assistant", step_id=f"turn-{index}-step-0")),
            Message.create("tool", [
                {"type": "tool-result", "toolCallId": call, "toolName": "calc__multiply",
                 "output": {"type": "json", "value": {"product": index * 7}}},
            ], source=MessageSource("tool", tool_call_id=call, tool_name="calc__multiply")),
            Message.create("assistant", f"{index} * 7 = {index * 7}",
                           source=MessageSource("assistant", step_id=f"turn-{index}-step-1")),
        ]
        for message in batch:
            message.created_at = at
        out.extend(batch)
        index += 1
    return out[:count]


class _Trace:
    """Runtime-event payloads of one trace, with increasing times."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.clock = _START
        self.count = 0

    def span(self, kind: str, parent: str | None, agent: str, fields: dict[str, Any],
             body: Any = None, *, duration_ms: float = 40.0, failed: bool = False) -> str:
        """A span of ``kind`` (``turn``/``step``/``llm``/``tool``/``agent``); ``body(span_id)``
        adds its children between its start and its end."""
        self.count += 1
        span_id = f"{self.count:016x}"
        start_type, end_type = {
            "tool": ("tool.called", "tool.failed" if failed else "tool.completed"),
            "agent": ("agent.requested", "agent.answered"),
        }.get(kind, (f"{kind}.started", f"{kind}.completed"))
        common = {"traceId": TRACE_ID, "spanId": span_id, "parentSpanId": parent,
                  "agentName": agent, "instanceKey": KEY, **fields}
        started = self.clock
        self.lines.append({"type": start_type, "timestamp": _iso(started), **common})
        if body is not None:
            body(span_id)
        self.clock += timedelta(milliseconds=duration_ms)
        end: dict[str, Any] = {"type": end_type, "timestamp": _iso(self.clock), **common,
                               "latencyMs": (self.clock - started) / timedelta(milliseconds=1)}
        if kind in ("turn", "llm"):
            end["tokenUsage"] = {"prompt": 120, "completion": 30, "total": 150}
            end["cost"] = 0.00042
        if failed:
            end.update(errorCode="E_TOOL_FAILED", errorMessage="division by zero")
        self.lines.append(end)
        return span_id


def _trace(spans: int) -> list[dict[str, Any]]:
    trace = _Trace()
    # one step = step + llm + 3 tools (5 spans); every 10th step also asks the worker
    # (request + worker turn + step + llm: 4 more)

    def step_body(step_id: str, index: int) -> None:
        if trace.count < spans:
            trace.span("llm", step_id, AGENT, {"model": "fake-large"}, duration_ms=300)
        for tool in range(3):
            if trace.count < spans:
                trace.span("tool", step_id, AGENT,
                           {"toolName": "calc__multiply", "toolCallId": f"c{index}_{tool}"},
                           duration_ms=15, failed=(index % 25 == 3 and tool == 1))
        if index % 10 == 0 and trace.count + 4 <= spans:
            trace.span("agent", step_id, AGENT, {"target": WORKER}, worker)

    def worker(request_id: str) -> None:
        trace.span("turn", request_id, WORKER, {"turnId": f"w{trace.count}"}, lambda t: trace.span(
            "step", t, WORKER, {"stepIndex": 0},
            lambda s: trace.span("llm", s, WORKER, {"model": "fake-worker"}, duration_ms=120)))

    def coordinator_turn(turn_id: str) -> None:
        step = 0
        while trace.count < spans:
            trace.span("step", turn_id, AGENT, {"stepIndex": step},
                       lambda s, i=step: step_body(s, i), duration_ms=5)
            step += 1

    trace.span("turn", None, AGENT, {"turnId": "t0"}, coordinator_turn)
    return trace.lines


def build_large_state(directory: Path, *, messages: int = 10_000,
                      spans: int = 2_000) -> dict[str, Any]:
    """Write the state root under ``directory``; returns ``{stateRoot, workspaceId, agent,
    instanceKey, href, traceId, messages, spans}`` (``href``: the conversation's page path,
    ``/traces/<traceId>`` is the trace's)."""
    root = Path(directory)
    with InstanceStore.open(root, WORKSPACE, AGENT, KEY, fsync=False) as store:
        paths = store.paths
    with InstanceStore.open(root, WORKSPACE, WORKER, KEY, fsync=False) as worker_store:
        worker_paths = worker_store.paths
    paths.base.write_bytes(b"".join(encode_message(m) for m in _messages(messages)))
    lines = _trace(spans)
    own = [e for e in lines if e["agentName"] == AGENT]
    theirs = [e for e in lines if e["agentName"] == WORKER]
    for target, events in ((paths.dir, own), (worker_paths.dir, theirs)):
        (target / "runtime-events.jsonl").write_text(
            "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    return {"stateRoot": str(root), "workspaceId": WORKSPACE, "agent": AGENT,
            "instanceKey": KEY, "href": f"/conversations/{WORKSPACE}/{AGENT}/{KEY}",
            "traceId": TRACE_ID, "messages": messages, "spans": len(lines) // 2}
