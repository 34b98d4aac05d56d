"""Extension ``context-message`` of ``@goondan/base``: runtime context for the model.

The reference's context composer (its name and config keys; docs/base-extensions.md). A turn
middleware that, before ``next()``, joins the enabled segments into one ``role: system``
message (source ``{type: extension, extensionName: context-message}``) and appends it, unless a
message with the same content (same ``promptHash``) is already in the conversation:

* ``runtime.swarm.catalog`` (``includeSwarmCatalog``): ``[runtime_catalog]`` with the swarm,
  its entry agent, this agent, available and callable agents, then ``swarmCatalogInstruction``;
* ``runtime.inbound`` (``includeInboundContext``): the Turn's input event (id, type, source,
  createdAt, instanceKey, metadata);
* ``runtime.call`` (``includeCallContext``): the calling agent, its instance, the call stack and
  reply channel, when another agent sent the event;
* ``runtime.route.summary`` (``includeRouteSummary``, needs inbound or call context): who sent it.

The Agent's own prompt (``includeAgentPrompt``, default true) differs on purpose: goondan's core
already sends it as the model's system prompt at every step, so it is not copied into the
conversation; ``includeAgentPrompt: false`` removes it from the steps (``ctx.system_prompt``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from goondan.conversation.messages import Message, MessageEvent

from ._config import boolean, text

EXTENSION_NAME = "context-message"
MARKER_KEY = "__goondanContextMessage"
EVENTS_KEY = "extension.events"
DEFAULT_INSTRUCTION = (
    "Use callableAgents above to choose whom to delegate to; when unsure, call agents__catalog "
    "for the current list."
)
SEGMENT_ORDER = (
    "agent.prompt.system", "runtime.swarm.catalog", "runtime.inbound", "runtime.call",
    "runtime.route.summary",
)


def _record(ctx: Any, name: str, data: dict[str, Any] | None = None) -> None:
    """Append ``{name, actor, at, data?}`` to ``ctx.metadata["extension.events"]``."""
    entry: dict[str, Any] = {"name": name, "actor": EXTENSION_NAME,
                             "at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
    if data:
        entry["data"] = data
    events = ctx.metadata.get(EVENTS_KEY)
    ctx.metadata[EVENTS_KEY] = [*(events if isinstance(events, list) else []), entry]


async def _catalog(ctx: Any, instruction: str) -> str | None:
    catalog = getattr(ctx.agents, "catalog", None)
    if catalog is None:  # no orchestrator (repl, embedding): no swarm view
        return None
    info = await catalog()
    lines = [
        "[runtime_catalog]",
        f"swarm={info.get('swarmName', '')}",
        f"entryAgent={info.get('entryAgent', '')}",
        f"selfAgent={info.get('selfAgent', '')}",
        f"availableAgents={', '.join(info.get('availableAgents') or [])}",
        f"callableAgents={', '.join(info.get('callableAgents') or [])}",
        "[/runtime_catalog]",
    ]
    if instruction:
        lines.append(instruction)
    return "\n".join(lines)


def _inbound(ctx: Any) -> str:
    event = ctx.input_event
    source = event.source if isinstance(event.source, dict) else {}
    lines = [
        "[runtime_inbound]",
        f"eventId={event.id}",
        f"eventType={event.type}",
        f"sourceKind={source.get('kind', '')}",
        f"sourceName={source.get('name', '')}",
        f"createdAt={event.created_at}",
    ]
    if event.instance_key:
        lines.append(f"instanceKey={event.instance_key}")
    metadata = {k: v for k, v in event.metadata.items() if not str(k).startswith("__")}
    if metadata:
        lines.append("eventMetadata=" + json.dumps(metadata, ensure_ascii=False, default=str))
    lines.append("[/runtime_inbound]")
    return "\n".join(lines)


def _caller(ctx: Any) -> dict[str, Any]:
    event = ctx.input_event
    source = event.source if isinstance(event.source, dict) else {}
    if source.get("kind") != "agent":
        return {}
    stack = event.metadata.get("__goondanAgentCallStack")
    out: dict[str, Any] = {
        "callerAgent": source.get("name"),
        "callerInstanceKey": event.metadata.get("callerInstanceKey") or source.get("instanceKey"),
        "callSource": event.type,
        "callStack": stack if isinstance(stack, list) else [],
    }
    if event.reply_to is not None:
        out["replyTo"] = (event.reply_to.target, event.reply_to.correlation_id)
    return out


def _call(ctx: Any) -> str | None:
    call = _caller(ctx)
    if not call:
        return None
    lines = ["[runtime_call]"]
    for key in ("callerAgent", "callerInstanceKey", "callSource"):
        if call.get(key):
            lines.append(f"{key}={call[key]}")
    if call["callStack"]:
        lines.append("callStack=" + " -> ".join(str(s) for s in call["callStack"]))
    if "replyTo" in call:
        lines.append(f"replyTo.target={call['replyTo'][0]}")
        lines.append(f"replyTo.correlationId={call['replyTo'][1]}")
    lines.append("[/runtime_call]")
    return "\n".join(lines)


def _route(ctx: Any) -> str:
    event = ctx.input_event
    source = event.source if isinstance(event.source, dict) else {}
    call = _caller(ctx)
    lines = [
        "[runtime_route]",
        "precedence=call>inbound",
        f"senderKind={'agent' if call else source.get('kind', '')}",
        f"senderName={call.get('callerAgent') or source.get('name', '')}",
        f"eventType={event.type}",
        f"eventId={event.id}",
    ]
    key = call.get("callerInstanceKey") or event.instance_key
    if key:
        lines.append(f"senderInstanceKey={key}")
    if call.get("callSource"):
        lines.append(f"senderSource={call['callSource']}")
    lines.append("[/runtime_route]")
    return "\n".join(lines)


def _present(ctx: Any, content: str, prompt_hash: str) -> bool:
    for message in ctx.conversation_state.next_messages:
        marker = message.metadata.get(MARKER_KEY)
        if isinstance(marker, dict) and marker.get("promptHash") == prompt_hash:
            return True
        if message.source.extension_name == EXTENSION_NAME and message.role == "system" \
                and message.data.get("content") == content:
            return True
    return False


def register(api: Any) -> None:
    """Install the turn middleware (and, with ``includeAgentPrompt: false``, a step one)."""
    include_prompt = boolean(api, "includeAgentPrompt", True)
    include_catalog = boolean(api, "includeSwarmCatalog", False)
    include_inbound = boolean(api, "includeInboundContext", False)
    include_call = boolean(api, "includeCallContext", False)
    include_route = boolean(api, "includeRouteSummary", False)
    instruction = (
        text(api, "swarmCatalogInstruction", DEFAULT_INSTRUCTION).strip() or DEFAULT_INSTRUCTION
    )

    async def context_message(ctx: Any) -> Any:
        segments: dict[str, str] = {}
        resolved: list[tuple[str, bool]] = []
        if include_prompt:  # sent by the core as the system prompt; recorded, not copied
            resolved.append(("agent.prompt.system", False))
        if include_catalog:
            catalog = await _catalog(ctx, instruction)
            if catalog is not None:
                segments["runtime.swarm.catalog"] = catalog
            resolved.append(("runtime.swarm.catalog", catalog is not None))
        if include_inbound:
            segments["runtime.inbound"] = _inbound(ctx)
            resolved.append(("runtime.inbound", True))
        if include_call:
            call = _call(ctx)
            if call is not None:
                segments["runtime.call"] = call
            resolved.append(("runtime.call", call is not None))
        if include_route and (include_inbound or include_call):
            segments["runtime.route.summary"] = _route(ctx)
            resolved.append(("runtime.route.summary", True))
        for segment_id, included in resolved:
            _record(ctx, "context.segment.resolved", {"id": segment_id, "included": included})
        ids = [s for s in SEGMENT_ORDER if s in segments]
        if not ids:
            _record(ctx, "context.message.empty")
            return await ctx.next()
        content = "\n\n".join(segments[s] for s in ids)
        prompt_hash = hashlib.sha256(content.encode("utf-8")).hexdigest()
        if _present(ctx, content, prompt_hash):
            _record(ctx, "context.message.duplicate", {"promptHash": prompt_hash})
        else:
            ctx.emit_message_event(MessageEvent.append(Message.system(
                content, extension=EXTENSION_NAME,
                metadata={MARKER_KEY: {"promptHash": prompt_hash, "segmentIds": ids}},
            )))
            _record(ctx, "context.message.appended", {"promptHash": prompt_hash, "segmentIds": ids})
        return await ctx.next()

    async def without_agent_prompt(ctx: Any) -> Any:
        ctx.system_prompt = None
        return await ctx.next()

    api.pipeline.register("turn", context_message)
    if not include_prompt:
        api.pipeline.register("step", without_agent_prompt)
