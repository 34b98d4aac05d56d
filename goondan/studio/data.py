"""The JSON documents of the studio API (docs/studio.md "API"), read from the state root.

Everything here reads with the functions the commands use — ``inspect workspace`` and
``inspect instance`` (:mod:`goondan.workspace.catalog`), ``status``
(:func:`goondan.commands.status.swarm_status`), ``inspect trace``
(:func:`goondan.commands.trace.load_spans`) and ``approvals``
(:mod:`goondan.commands.approvals`) — and takes no lock. Every document leaves through
:func:`masked`, the masking ``inspect`` prints through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.state import fold
from goondan.errors import GoondanError
from goondan.secrets import mask
from goondan.studio.tail import cursor
from goondan.types import JsonObject
from goondan.workspace.catalog import InstanceInfo, iter_instances, iter_messages
from goondan.workspace.catalog import read_pending_events as _read_pending
from goondan.workspace.record import iter_workspace_records

__all__ = [
    "ApiError",
    "approval_doc",
    "approval_list",
    "bundle_dirs",
    "conversation",
    "decide",
    "find_instance",
    "instance_doc",
    "masked",
    "masked_doc",
    "matches",
    "message_doc",
    "overview",
    "studio_actor",
    "swarm_names",
    "swarms",
    "trace_doc",
    "trace_list",
]

NO_AGENT = "-"  # the agent part of a conversation path for an instance without an agent name
_STATUS_TIMEOUT_S = 2.0  # one orchestrator that does not answer must not stall the page


class ApiError(Exception):
    """An error answer: HTTP ``status`` with ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def to_dict(self) -> JsonObject:
        return {"error": {"code": self.code, "message": mask(self.message)}}


def masked(value: Any) -> Any:
    """``value`` with every registered secret masked in every string (keys included)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {mask(k) if isinstance(k, str) else k: masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [masked(v) for v in value]
    return value


def masked_doc(doc: JsonObject) -> JsonObject:
    """:func:`masked` for a JSON object."""
    out: JsonObject = masked(doc)
    return out


# -- overview ---------------------------------------------------------------------------------

def bundle_dirs(root: Path) -> dict[str, str]:
    """workspace id → recorded bundle directory."""
    return {r["workspaceId"]: r["bundleRoot"] for r in iter_workspace_records(root)}


def _same_dir(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def instance_doc(info: InstanceInfo) -> JsonObject:
    """The ``Instance`` object (docs/studio.md)."""
    agent = info.agent_name or NO_AGENT
    href = "/conversations/" + "/".join(
        quote(part, safe="") for part in (info.workspace_id, agent, info.instance_key)
    )
    out: JsonObject = {
        "workspaceId": info.workspace_id, "agent": info.agent_name,
        "instanceKey": info.instance_key, "status": info.status,
        "messageCount": info.message_count() if not info.error else 0,
        "updatedAt": info.updated_at, "href": href,
    }
    if info.error:
        out["error"] = info.error
    return out


def swarms(root: Path, bundles: dict[str, str]) -> list[JsonObject]:
    from goondan.commands.status import swarm_status
    from goondan.swarm.state import running_records

    out: list[JsonObject] = []
    for active in running_records(root):
        doc = swarm_status(active, timeout_s=_STATUS_TIMEOUT_S)
        bundle_dir = doc["bundle"]
        workspace = next((ws for ws, b in bundles.items() if _same_dir(b, bundle_dir)), None)
        processes = [
            {"agent": p.get("agentName") or p.get("process"), "instanceKey": p.get("instanceKey"),
             "pid": p.get("pid"), "state": p.get("status"), "restarts": p.get("restarts"),
             "queued": p.get("queued"), "kind": p.get("kind"), "process": p.get("process")}
            for p in doc.get("processes") or []
        ]
        out.append({
            "name": doc["swarm"], "workspaceId": workspace, "bundleDir": bundle_dir,
            "pid": doc["pid"], "status": "running" if doc["reachable"] else "unreachable",
            "startedAt": doc["startedAt"], "instanceKey": doc["instanceKey"],
            "processes": processes, "pendingApprovals": len(doc.get("approvals") or []),
            "usage": doc.get("usage"), **({"error": doc["error"]} if "error" in doc else {}),
        })
    return out


def overview(root: Path) -> JsonObject:
    """``GET /api/overview``: running swarms and every workspace's instances."""
    bundles = bundle_dirs(root)
    workspaces: dict[str, JsonObject] = {}
    for info in iter_instances(root):
        entry = workspaces.setdefault(info.workspace_id, {
            "workspaceId": info.workspace_id, "bundleDir": bundles.get(info.workspace_id),
            "instances": [],
        })
        entry["instances"].append(instance_doc(info))
    return masked_doc({"stateRoot": str(root), "swarms": swarms(root, bundles),
                   "workspaces": list(workspaces.values())})


# -- conversations ----------------------------------------------------------------------------

def find_instance(root: Path, workspace_id: str, agent: str, instance_key: str) -> InstanceInfo:
    """The instance of a conversation path (404 ``E_STUDIO_NOT_FOUND`` when there is none)."""
    wanted = None if agent == NO_AGENT else agent
    for info in iter_instances(root, workspace_id=workspace_id):
        if info.agent_name == wanted and info.instance_key == instance_key:
            return info
    raise ApiError(404, "E_STUDIO_NOT_FOUND",
                   f"no instance {agent}:{instance_key} in workspace {workspace_id}")


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def message_doc(message: Message, *, pending: bool) -> JsonObject:
    """The ``Msg`` object: text, tool calls (call/result pairs share ``toolCallId``), source."""
    out: JsonObject = {"id": message.id, "role": message.role, "text": message.text or None,
                       "createdAt": message.created_at, "source": message.source.to_dict(),
                       "pending": pending}
    if message.metadata:
        out["metadata"] = message.metadata
    content = message.data.get("content")
    calls: list[JsonObject] = []
    results: list[str] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "tool-call":
            args = part.get("input", part.get("args"))
            calls.append({"id": part.get("toolCallId"), "name": part.get("toolName"),
                          "arguments": args if isinstance(args, dict) else {"value": args}})
        elif part.get("type") == "tool-result":
            output = part.get("output")
            value = output.get("value") if isinstance(output, dict) else output
            out["toolCallId"] = part.get("toolCallId")
            out["toolName"] = part.get("toolName")
            out["isError"] = isinstance(output, dict) and output.get("type") == "error-json"
            results.append(_compact(value))
    if calls:
        out["toolCalls"] = calls
    if results and out["text"] is None:
        out["text"] = "\n".join(results)
    return out


def matches(doc: JsonObject, needle: str) -> bool:
    if needle in (doc.get("text") or "").lower():
        return True
    calls = doc.get("toolCalls")
    return bool(calls) and needle in json.dumps(calls, ensure_ascii=False).lower()


def conversation_messages(info: InstanceInfo) -> list[JsonObject]:
    """The folded conversation: ``base.jsonl`` plus the pending events of a running turn."""
    base = [message for _, message in iter_messages(info.paths)]
    events, _ = _read_pending(info.paths)
    if not events:
        return [message_doc(m, pending=False) for m in base]
    pending = {e.message.id for e in events if e.message is not None}
    folded, _ = fold(base, events)
    return [message_doc(m, pending=m.id in pending) for m in folded]


def conversation(root: Path, workspace_id: str, agent: str, instance_key: str, *,
                 q: str | None = None, offset: int = 0, limit: int | None = None) -> JsonObject:
    """``GET /api/conversations/<ws>/<agent>/<key>``: a page of the folded message list."""
    info = find_instance(root, workspace_id, agent, instance_key)
    if info.error:
        raise ApiError(422, "E_WORKSPACE_CORRUPT", f"{info.paths.dir}: {info.error}")
    position = cursor(info.paths)  # before reading: what is written meanwhile is streamed
    try:
        docs = conversation_messages(info)
    except GoondanError as err:
        raise ApiError(422, err.code, err.message) from None
    if q:
        needle = q.lower()
        docs = [d for d in docs if matches(d, needle)]
    total = len(docs)
    page = docs[offset:] if limit is None else docs[offset:offset + limit]
    return masked_doc({"instance": instance_doc(info), "total": total, "offset": offset,
                       "messages": page, "cursor": position})


def event_doc(event: MessageEvent) -> tuple[str, JsonObject] | None:
    """One pending event as a stream event: ``message`` (append / replace), ``remove`` or
    ``reset`` (truncate: the page reloads the list)."""
    if event.type in ("append", "replace") and event.message is not None:
        doc = message_doc(event.message, pending=True)
        if event.type == "replace":
            doc["replaces"] = event.target_id
        return "message", masked(doc)
    if event.type == "remove":
        return "remove", {"id": event.target_id}
    if event.type == "truncate":
        return "reset", {}
    return None


# -- traces -----------------------------------------------------------------------------------

_KINDS = {"toolCall": "tool", "agentCall": "request"}


def _span_doc(span: Any) -> JsonObject:
    attributes = dict(span.attributes)
    usage = span.token_usage or {}
    if "prompt" in usage:
        attributes["inputTokens"] = usage["prompt"]
    if "completion" in usage:
        attributes["outputTokens"] = usage["completion"]
    if span.cost is not None:
        attributes["costUsd"] = span.cost
    out: JsonObject = {
        "spanId": span.span_id, "parentSpanId": span.parent_span_id, "name": span.name,
        "kind": _KINDS.get(span.kind, span.kind), "agent": span.agent_name,
        "instanceKey": span.instance_key, "startMs": span.start_unix_nanos / 1_000_000,
        "durationMs": span.duration_ms, "status": span.status, "attributes": attributes,
    }
    if span.error_code or span.error_message:
        out["error"] = ": ".join(str(p) for p in (span.error_code, span.error_message) if p)
    return out


def trace_list(root: Path, limit: int = 100, spans: list[Any] | None = None) -> JsonObject:
    """``GET /api/traces``: the most recent traces, newest first (of ``spans`` when given:
    a PostgreSQL store's, :mod:`goondan.studio.store`)."""
    from goondan.commands.trace import load_spans
    from goondan.runtime.traces import summarize_traces

    summaries = summarize_traces(load_spans(root) if spans is None else spans)
    summaries.reverse()
    rows = [{"traceId": t.trace_id, "rootName": t.root_name, "startedAt": t.start_time,
             "durationMs": t.duration_ms, "spanCount": t.span_count, "error": t.errors > 0,
             "agents": t.agents, "tokenUsage": t.usage.to_dict(), "cost": t.cost}
            for t in summaries[:limit]]
    return masked_doc({"traces": rows})


def trace_doc(root: Path, trace_id: str, spans: list[Any] | None = None) -> JsonObject:
    """``GET /api/traces/<id>`` (a unique prefix is enough, as for ``inspect trace``; among
    ``spans`` when given)."""
    from goondan.commands.trace import load_spans, trace_spans
    from goondan.runtime.traces import trace_totals

    try:
        chosen, members = trace_spans(load_spans(root) if spans is None else spans, trace_id)
    except GoondanError as err:
        raise ApiError(404, "E_STUDIO_NOT_FOUND", err.message) from None
    members.sort(key=lambda s: (s.start_unix_nanos, s.span_id))
    return masked_doc({"traceId": chosen, **trace_totals(members),
                   "spans": [_span_doc(s) for s in members]})


# -- approvals --------------------------------------------------------------------------------

def studio_actor() -> str:
    """``studio:<local user>``: who decided, as recorded in the approval store."""
    from goondan.commands.approvals import local_user

    return f"studio:{local_user()}"


def approval_doc(approval: Any, workspace_id: str, swarm: str | None) -> JsonObject:
    row = approval.to_dict()
    return {
        "id": row["id"], "workspaceId": workspace_id, "swarm": swarm, "agent": row["agent"],
        "instanceKey": row["instanceKey"], "toolName": row["tool"],
        "arguments": row["args"] if isinstance(row["args"], dict) else {},
        "requestedAt": row["requestedAt"], "status": row["status"], "reason": row["reason"],
        "denyReason": row.get("denyReason"), "decidedBy": row["decidedBy"],
        "decidedAt": row["decidedAt"], "via": row["via"], "expiresAt": row["expiresAt"],
        "turnId": row["turnId"], "toolCallId": row["toolCallId"],
    }


def swarm_names(root: Path) -> dict[str, str]:
    """workspace id → name of the swarm running it."""
    from goondan.swarm.state import running_records

    bundles = bundle_dirs(root)
    out: dict[str, str] = {}
    for active in running_records(root):
        bundle_dir = str(Path(active.bundle_path).parent)
        for ws, recorded in bundles.items():
            if _same_dir(recorded, bundle_dir):
                out[ws] = active.swarm
    return out


def approval_list(root: Path, *, status: str | None = None) -> JsonObject:
    """``GET /api/approvals``: every approval (``status`` filters), oldest first."""
    from goondan.commands.approvals import approval_stores

    names = swarm_names(root)
    rows = [approval_doc(a, store.dir.parent.name, names.get(store.dir.parent.name))
            for store in approval_stores(root, None) for a in store.list(status=status)]
    return masked_doc({"approvals": rows})


def decide(root: Path, approval_id: str, *, approve: bool, reason: str | None,
           backend: Any = None) -> JsonObject:
    """``POST /api/approvals/<id>``: the path of ``goondan approvals approve|deny`` (in
    ``backend``, a PostgreSQL store, when given), recorded as ``studio:<local user>`` via
    ``studio``; 409 when it was already decided."""
    from goondan.commands.approvals import decide_approval

    try:
        found, mine, notified, workspace = decide_approval(
            root, approval_id, approve=approve, by=studio_actor(), via="studio",
            reason=reason if not approve else None, backend=backend)
    except GoondanError as err:
        if err.code == "E_APPROVAL_NOT_FOUND":
            raise ApiError(404, "E_STUDIO_NOT_FOUND", err.message) from None
        raise
    doc = approval_doc(found, workspace, swarm_names(root).get(workspace))
    if not mine:
        raise ApiError(409, "E_STUDIO_ALREADY_DECIDED",
                       f"{approval_id} was already {found.status}"
                       + (f" by {doc['decidedBy']}" if doc.get("decidedBy") else ""))
    return masked_doc({"approval": doc, "notified": notified})
