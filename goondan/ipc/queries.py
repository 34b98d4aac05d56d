"""Typed queries of a running agent process: its conversation, tools, usage; fold on demand.

The chat under ``goondan run`` shows the entry agent's real state (``/history``, ``/tools``,
``/usage``, ``/instance``, ``/fold``), which lives in the agent's own process. The
orchestrator sends ``runtime.inspect {what}`` with a ``replyTo``; the agent process answers
with an ``inspect.answer`` event carrying ``metadata.inReplyTo`` and ``result`` (or ``error``),
routed back like any answer (docs/orchestrator.md, "Control and queries"):

* ``what: "state"`` → ``{messages: [Message…], tools: [ToolCatalogItem…], turns, usage,
  describe: {…}}``;
* ``what: "fold"`` → ``{messages: <count>}`` after folding pending events into ``base.jsonl``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from goondan.errors import AgentError
from goondan.ipc.protocol import CONTROL_PREFIX, ORCHESTRATOR, IpcMessage
from goondan.types import AgentEvent, JsonObject, ReplyChannel, TokenUsage

__all__ = ["ANSWER_TYPE", "INSPECT_EVENT", "answer_inspect", "inspect_agent"]

INSPECT_EVENT = CONTROL_PREFIX + "inspect"  # orchestrator → agent
ANSWER_TYPE = "inspect.answer"  # agent → orchestrator (not a control report: routed as an answer)
QUERY_TIMEOUT_S = 15.0


async def inspect_agent(orchestrator: Any, agent: str, instance_key: str, what: str, *,
                        timeout_s: float = QUERY_TIMEOUT_S) -> JsonObject | None:
    """Ask the running process of (agent, instance_key); None when it is not running."""
    rec = orchestrator.records.get((agent, instance_key))
    handle = rec.handle if rec is not None else None
    if handle is None or not rec.ready:
        return None
    correlation, future = orchestrator.expect_answer((agent, instance_key))
    event = AgentEvent(type=INSPECT_EVENT, instance_key=instance_key, metadata={"what": what},
                       reply_to=ReplyChannel(target=ORCHESTRATOR, correlation_id=correlation),
                       source={"kind": "agent", "name": ORCHESTRATOR})
    try:
        await handle.transport.send(IpcMessage.event(ORCHESTRATOR, agent, event))
        async with asyncio.timeout(timeout_s):
            answer: AgentEvent = await future
    except TimeoutError:
        raise AgentError(
            f"{agent}@{instance_key} did not answer the {what} query within {timeout_s:.0f} s",
            code="E_AGENT_TIMEOUT",
        ) from None
    finally:
        future.cancel()  # no-op when answered; drops the pending entry otherwise
    error = answer.metadata.get("error")
    if isinstance(error, dict):
        raise AgentError(str(error.get("message")), code=str(error.get("code") or "E_AGENT"))
    result = answer.metadata.get("result")
    return result if isinstance(result, dict) else {}


async def _result(handler: Any, what: str) -> JsonObject:
    if what == "fold":
        return {"messages": await handler.fold()}
    if what != "state":
        raise ValueError(f"unknown inspect query {what!r}")
    messages = list(getattr(handler, "messages", []) or [])
    catalog = getattr(handler, "catalog", None)
    usage = getattr(handler, "usage", None)
    model = getattr(handler, "model", None)
    paths = getattr(getattr(handler, "store", None), "paths", None)
    describe: dict[str, str] = {
        "messages": str(len(messages)),
        "status": str(getattr(handler, "status", "-")),
    }
    if model is not None:
        describe["model"] = f"{model.provider}/{model.model}"
    directory = getattr(paths, "dir", None)
    if directory is not None:
        describe["directory"] = str(directory)
    list_providers = getattr(getattr(handler, "tools", None), "providers", None)
    providers = list_providers() if callable(list_providers) else []
    return {
        "messages": [m.to_dict() for m in messages],
        "tools": [t.to_dict() for t in (catalog() if callable(catalog) else [])],
        # MCP servers' states for /tools (docs/mcp.md "Server state").
        "mcp": [p.status() for p in providers if callable(getattr(p, "status", None))],
        "turns": int(getattr(handler, "turn_count", 0)),
        "usage": dataclasses.asdict(usage) if isinstance(usage, TokenUsage) else {},
        "describe": describe,
    }


async def answer_inspect(handler: Any, event: AgentEvent, *, agent: str) -> IpcMessage:
    """The agent side: the ``inspect.answer`` message for a ``runtime.inspect`` event."""
    assert event.reply_to is not None
    meta: JsonObject = {"inReplyTo": event.reply_to.correlation_id}
    try:
        meta["result"] = await _result(handler, str(event.metadata.get("what")))
    except Exception as exc:  # the answer must come back, or the chat waits for its timeout
        meta["error"] = {"code": getattr(exc, "code", "E_AGENT_INSPECT"), "message": str(exc)}
    answer = AgentEvent(type=ANSWER_TYPE, instance_key=event.instance_key, metadata=meta,
                        source={"kind": "agent", "name": agent})
    return IpcMessage.event(agent, ORCHESTRATOR, answer)
