"""Which tool calls wait for a person, and what a decision means for the call (docs/approvals.md).

A call needs approval when its export (or the Agent's reference to its Tool, or the MCP server's
reference) says ``approval: required``, or when a toolCall middleware called
``ctx.require_approval(...)`` before ``next()``. Such a call is not run: its request is written
first (turn journal, then the workspace's :class:`~goondan.workspace.approvals.ApprovalStore`),
the step's other calls run, and the turn parks. The decision resumes the turn; this module turns
it into what the call gets (run with the approved arguments, or an error result the model sees).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.errors import GoondanError
from goondan.pipeline.context import ToolCallContext, TurnResult
from goondan.runtime.events import ApprovalDecided, ApprovalRequested, span_ids
from goondan.tools.catalog import attr
from goondan.tools.naming import build_tool_name
from goondan.types import AgentEvent, JsonObject, ToolCallResult, now_iso
from goondan.workspace.approvals import (
    Approval,
    ApprovalStore,
    approval_id,
    format_time,
    parse_time,
)

if TYPE_CHECKING:
    from goondan.conversation.messages import Message
    from goondan.pipeline.context import Step
    from goondan.pipeline.tracing import Span
    from goondan.runtime.resume import ResumePoint
    from goondan.runtime.turn import TurnRunner
    from goondan.storage.contract import ApprovalIndex, StorageBackend
    from goondan.types import ToolCall, ToolCatalogItem
    from goondan.workspace.journal import OpenTurn

__all__ = [
    "APPROVAL_DECIDED_EVENT",
    "APPROVAL_DENIED",
    "APPROVAL_EXPIRED",
    "APPROVAL_PENDING",
    "WAITING_STATUS",
    "ApprovalRule",
    "ApprovalRules",
    "RuntimeApprovals",
    "answers",
    "any_decided",
    "approval_rules",
    "approvals_due",
    "decided_call",
    "decision_result",
    "park",
    "park_call",
    "parked_result",
    "parked_turn",
    "parked_turn_of",
    "resumable",
]

APPROVAL_PENDING = "approval_pending"  # the turn's finish reason while it is parked
# The event that tells an instance a decision was stored: it resumes the parked turn.
APPROVAL_DECIDED_EVENT = "approval.decided"
WAITING_STATUS = "waitingForApproval"
APPROVAL_DENIED = "E_APPROVAL_DENIED"
APPROVAL_EXPIRED = "E_APPROVAL_EXPIRED"


@dataclass(frozen=True)
class ApprovalRule:
    """A tool that needs approval, and how long a request may wait (None: forever)."""

    timeout_ms: int | None = None


@dataclass(frozen=True)
class ApprovalRules:
    """Tool name → rule, plus MCP server prefixes whose every tool needs approval."""

    tools: dict[str, ApprovalRule]
    prefixes: dict[str, ApprovalRule]

    def rule(self, tool_name: str) -> ApprovalRule | None:
        """The rule of ``tool_name``; None when it runs without asking."""
        found = self.tools.get(tool_name)
        if found is not None:
            return found
        prefix, sep, _ = tool_name.partition("__")
        return self.prefixes.get(prefix) if sep else None


def approval_rules(spec: Any) -> ApprovalRules:
    """The rules of an AgentSpec: its Tool bindings' exports and its MCP servers."""
    tools: dict[str, ApprovalRule] = {}
    for binding in _items(attr(spec, "tools", None)):
        for export in _items(attr(binding, "exports", None)):
            if attr(export, "approval", "never") == "required":
                name = build_tool_name(str(attr(binding, "name")), str(attr(export, "name")))
                tools[name] = ApprovalRule(attr(export, "approval_timeout_ms", None))
    prefixes = {
        str(attr(server, "name")): ApprovalRule(attr(server, "approval_timeout_ms", None))
        for server in _items(attr(spec, "mcp_servers", None))
        if attr(server, "approval", "never") == "required"
    }
    return ApprovalRules(tools, prefixes)


def _items(value: Any) -> Iterable[Any]:
    return value if isinstance(value, list | tuple) else ()


def decision_result(status: str, tool_call_id: str, tool_name: str,
                    reason: str | None = None) -> ToolCallResult | None:
    """The result a denied or expired call gets (what the model sees); None for ``approved``."""
    if status == "denied":
        why = f": {reason}" if reason else ""
        return ToolCallResult.failure(
            tool_call_id, tool_name, f"a person denied this tool call{why}", code=APPROVAL_DENIED,
            suggestion="do not retry the same call; ask the user or take another way")
    if status == "expired":
        return ToolCallResult.failure(
            tool_call_id,
            tool_name,
            "nobody approved this tool call in time (the approval expired)",
            code=APPROVAL_EXPIRED,
            suggestion="tell the user the action needs an approval, or ask again later",
        )
    return None


APPROVAL_PENDING_CODE = "E_APPROVAL_PENDING"


class ApprovalGate:
    """The approvals of one instance: requests written before a call runs, decisions read back.

    ``journal`` is the instance's :class:`~goondan.workspace.journal.TurnJournal` (None for a
    store without one: the request is then only in the approval store)."""

    def __init__(self, *, rules: ApprovalRules, store: ApprovalIndex, journal: Any,
                 agent: str, instance_key: str) -> None:
        self.rules = rules
        self.store = store
        self.journal = journal
        self.agent = agent
        self.instance_key = instance_key
        self.pending: dict[str, Approval] = {}  # toolCallId -> requested in this run of the turn
        self.approved: dict[str, Approval] = {}  # toolCallId -> approved, run by the resumed turn

    def __repr__(self) -> str:
        return f"<ApprovalGate {self.agent}@{self.instance_key} pending={len(self.pending)}>"

    @classmethod
    def of(cls, spec: Any, store: Any, approvals: ApprovalIndex) -> ApprovalGate:
        """The gate of an instance: ``spec``'s rules, ``store``'s journal, the workspace's index."""
        return cls(
            rules=approval_rules(spec),
            store=approvals,
            journal=getattr(store, "journal", None),
            agent=spec.name,
            instance_key=store.instance_key,
        )

    def reset(self) -> None:
        """A turn (or its resumption) starts: forget the last one's calls."""
        self.pending.clear()
        self.approved.clear()

    def mark(self, kind: str, turn_id: str, **fields: Any) -> None:
        """Append ``turn.parked`` / ``turn.resumed`` for the open turn ``turn_id``."""
        if self.journal is not None:
            self.journal.append({"type": kind, "turnId": turn_id, **fields, "at": now_iso()})

    def needed(self, ctx: ToolCallContext) -> ApprovalRule | None:
        """The rule that makes this call wait; None when it runs now."""
        if ctx.approved:
            return None
        rule = self.rules.rule(ctx.tool_name)
        if ctx.approval_required:
            return rule or ApprovalRule()
        return rule

    def request(self, ctx: ToolCallContext, rule: ApprovalRule) -> Approval:
        """Record the request: the journal's ``approval.requested`` first, then the store."""
        ident = approval_id(self.agent, self.instance_key, ctx.turn_id, ctx.tool_call_id)
        at = now_iso()
        timeout = rule.timeout_ms
        expires = format_time(parse_time(at) + timedelta(milliseconds=timeout)) if timeout else None
        reason = ctx.approval_reason
        if self.journal is not None:
            self.journal.append({
                "type": "approval.requested", "turnId": ctx.turn_id, "approvalId": ident,
                "toolCallId": ctx.tool_call_id, "toolName": ctx.tool_name, "args": ctx.args,
                "reason": reason, "expiresAt": expires, "approvalTimeoutMs": timeout, "at": at,
            })
        found = self.store.request(
            agent=self.agent, instance_key=self.instance_key, turn_id=ctx.turn_id,
            tool_call_id=ctx.tool_call_id, tool=ctx.tool_name, args=ctx.args, reason=reason,
            timeout_ms=timeout, requested_at=at)
        self.pending[ctx.tool_call_id] = found
        return found

    def lookup(self, record: JsonObject) -> Approval:
        """The stored approval of a journal ``approval.requested`` record; written again (same
        id, same times) when a crash came between the journal and the store."""
        found = self.store.get(str(record.get("approvalId")))
        if found is not None:
            return found
        timeout, args = record.get("approvalTimeoutMs"), record.get("args")
        return self.store.request(
            agent=self.agent, instance_key=self.instance_key, turn_id=str(record.get("turnId")),
            tool_call_id=str(record.get("toolCallId")), tool=str(record.get("toolName")),
            args=args if isinstance(args, dict) else {},
            reason=record.get("reason") if isinstance(record.get("reason"), str) else None,
            timeout_ms=timeout if isinstance(timeout, int) else None,
            requested_at=str(record.get("at")) if record.get("at") else None)

    def settle(self, found: Approval) -> Approval:
        """``found`` with an expiry recorded (the first decision) when it passed its time."""
        if found.status == "expired" and found.decision is None:
            found, _ = self.store.decide(found.id, approve=False, by="system", via="expiry")
        return found


def parked_result(ctx: ToolCallContext, found: Approval) -> ToolCallResult:
    """What the toolCall chain returns for a parked call (never recorded as a tool message)."""
    return ToolCallResult.failure(ctx.tool_call_id, ctx.tool_name,
                                  f"waiting for approval {found.id}", code=APPROVAL_PENDING_CODE)


async def park_call(gate: ApprovalGate, ctx: ToolCallContext, rule: ApprovalRule,
                    observer: Any, span: Any) -> ToolCallResult:
    """Request approval for the call of ``ctx`` (durably) instead of running it."""
    found = await asyncio.to_thread(gate.request, ctx, rule)
    observer.emit(ApprovalRequested(
        **span_ids(span), turn_id=ctx.turn_id, approval_id=found.id, tool_call_id=ctx.tool_call_id,
        tool_name=ctx.tool_name, reason=ctx.approval_reason,
        expires_at=found.request.get("expiresAt")))
    return parked_result(ctx, found)


def parked_turn(turn_id: str, gate: ApprovalGate) -> TurnResult:
    """The result of a turn that parks on ``gate``'s pending approvals."""
    return TurnResult(turn_id, "approval_pending",
                      metadata={"approvals": [a.to_dict() for a in gate.pending.values()]})


async def decided_call(
    runner: TurnRunner,
    step: Step,
    span: Span,
    call: ToolCall,
    assistant: Message,
    catalog: list[ToolCatalogItem],
    record: JsonObject,
) -> ToolCallResult | None:
    """The result of a resumed call that asked for approval (``record``: its journal
    ``approval.requested``): approved → it runs (with the approver's arguments); denied or
    expired → an error result; None while still pending (the turn parks again)."""
    gate = runner.env.approvals
    if gate is None:
        raise GoondanError(f"tool call {call.id} waits for an approval decision that this runtime "
                           "cannot apply", code="E_TURN_FAILED", suggestion="decide the approval, "
                           "or cancel the turn")
    found = gate.settle(await asyncio.to_thread(gate.lookup, record))
    if found.status == "pending":
        gate.pending[call.id] = found
        return None
    decision = found.decision or {}
    runner.env.observer.emit(ApprovalDecided(
        **span_ids(span), turn_id=runner.turn_id, approval_id=found.id, tool_call_id=call.id,
        tool_name=call.name, status=found.status, decided_by=decision.get("decidedBy"),
        via=decision.get("via")))
    denied = decision_result(found.status, call.id, call.name, decision.get("reason"))
    if denied is not None:
        return denied
    gate.approved[call.id] = found
    return await runner.run_tool_call(step, span, call, assistant, catalog)


def park(gate: ApprovalGate | None, store: Any, turn_id: str, parks: bool) -> OpenTurn | None:
    """After the fold-commit: a parking turn writes ``turn.parked`` and is the instance's parked
    turn (returned); any other turn leaves none (blocking: call it in a thread)."""
    if gate is None or not parks:
        return None
    gate.mark("turn.parked", turn_id, reason=APPROVAL_PENDING)
    return parked_turn_of(store)


def parked_turn_of(store: Any) -> OpenTurn | None:
    """The store's open turn when it is parked on approvals (blocking: call it in a thread)."""
    journal = getattr(store, "journal", None)
    opened = journal.open_turn() if journal is not None else None
    return opened if opened is not None and opened.parked else None


def any_decided(gate: ApprovalGate, parked: OpenTurn) -> bool:
    """True when an approval of the parked turn is decided (or expired): it can go on."""
    return any(
        gate.settle(gate.lookup(record)).status != "pending" for record in parked.approvals.values()
    )


async def resumable(gate: ApprovalGate | None, store: Any, messages: Sequence[Message],
                    recorder: Any) -> tuple[OpenTurn | None, ResumePoint | TurnResult]:
    """The store's parked turn, and where it goes on after a decision (``turn.resumed`` is
    written) — or the result to return when it cannot: nothing is parked, or every approval of
    the turn is still pending."""
    from goondan.runtime.resume import plan_resume

    parked = await asyncio.to_thread(parked_turn_of, store)
    if gate is None or parked is None:
        return parked, TurnResult(parked.turn_id if parked else "", "text_response")
    if not await asyncio.to_thread(any_decided, gate, parked):
        return parked, TurnResult(parked.turn_id, "approval_pending")
    recorder.turn_resumed(parked.turn_id, parked.resumes + 1, cause="decision")
    return parked, plan_resume(messages, parked)


def answers(event: AgentEvent, result: TurnResult, resumed: bool) -> bool:
    """Whether ``result`` answers ``event``'s caller: a park answers (with the approvals) unless
    the caller waits for the final answer (``send --wait``); a resumed turn answers only such a
    caller, since the others were answered when it parked."""
    parks = result.finish_reason == APPROVAL_PENDING
    waits = event.wait_for_final
    if resumed:
        return waits and not parks
    return not (parks and waits)


class RuntimeApprovals:
    """``Runtime.approvals``: list and decide the approvals of an embedded runtime's workspace.

    A decision is stored first (first decision wins; one taken elsewhere, by the CLI, stays),
    then the parked turn resumes in this process; ``approve``/``deny`` return the resumed turn's
    result (``approval_pending`` while another approval of the turn still waits), or None when
    no turn was parked on it (already resumed)."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime
        storage = getattr(runtime, "storage", None)
        self.store: ApprovalIndex = (
            ApprovalStore(runtime.state_root, runtime.workspace_id) if storage is None
            else storage.approvals(runtime.workspace_id))

    def __repr__(self) -> str:
        return f"<RuntimeApprovals {getattr(self.store, 'dir', self.store)}>"

    def list(self, *, status: str | None = "pending", agent: str | None = None,
             instance_key: str | None = None) -> list[Approval]:
        """The approvals (pending ones by default; ``status=None``: all), oldest first."""
        return self.store.list(status=status, agent=agent, instance_key=instance_key)

    def get(self, approval: str) -> Approval | None:
        """One approval, or None."""
        return self.store.get(approval)

    async def approve(
        self,
        approval: str,
        *,
        args: JsonObject | None = None,
        note: str | None = None,
        by: str = "api",
    ) -> TurnResult | None:
        """Approve (with edited ``args`` if given) and resume the turn."""
        return await self._decide(approval, approve=True, args=args, note=note, reason=None, by=by)

    async def deny(
        self, approval: str, *, reason: str | None = None, by: str = "api"
    ) -> TurnResult | None:
        """Deny (the model sees ``E_APPROVAL_DENIED`` with ``reason``) and resume the turn."""
        return await self._decide(
            approval, approve=False, args=None, note=None, reason=reason, by=by
        )

    async def _decide(
        self,
        approval: str,
        *,
        approve: bool,
        args: JsonObject | None,
        note: str | None,
        reason: str | None,
        by: str,
    ) -> TurnResult | None:
        found, _ = await asyncio.to_thread(
            self.store.decide,
            approval,
            approve=approve,
            by=by,
            via="api",
            args=args,
            note=note,
            reason=reason,
        )
        agent, key = str(found.request.get("agent")), str(found.request.get("instanceKey"))
        event = AgentEvent(
            type=APPROVAL_DECIDED_EVENT, instance_key=key, metadata={"approvalId": approval}
        )
        result: TurnResult = await self._runtime.run_event(agent, event)
        if result.turn_id:
            return result
        # Not parked any more: the runtime may have resumed it as the instance opened.
        resumed = (await self._runtime.instance(agent, key)).resumed
        return (
            resumed
            if resumed is not None and resumed.turn_id == found.request.get("turnId")
            else None
        )


MAX_WATCH_S = 5.0  # how often the orchestrator looks for approvals that expired meanwhile


def approvals_due(
    state_root: Path, workspace_id: str, *, startup: bool, storage: StorageBackend | None = None
) -> tuple[list[Approval], float]:
    """What an orchestrator must wake: approvals whose parked turn can go on, and the seconds
    until it should look again (the next expiry, at most :data:`MAX_WATCH_S`).

    At ``startup`` the parked turns of the workspace's instances are read (decisions taken while
    the swarm was stopped); afterwards only pending approvals that expired are due. ``storage``:
    the store holding them (None: the JSONL state root)."""
    from datetime import UTC, datetime

    from goondan.workspace.journal import open_turns

    store: ApprovalIndex = (ApprovalStore(state_root, workspace_id) if storage is None
                            else storage.approvals(workspace_id))
    now = datetime.now(UTC)
    due: list[Approval] = []
    if startup:
        turns = (open_turns(state_root, workspace_id) if storage is None
                 else storage.open_turns(workspace_id))
        for _agent, _key, opened in turns:
            if not opened.parked:
                continue
            stored = [store.get(str(r.get("approvalId"))) for r in opened.approvals.values()]
            ready = [a for a in stored if a is not None and a.status != "pending"]
            due.extend(ready[:1])  # one event resumes the turn
    wait = MAX_WATCH_S
    for pending in store.list(status="pending", now=now):
        expires = pending.request.get("expiresAt")
        if isinstance(expires, str):
            wait = min(wait, max((parse_time(expires) - now).total_seconds(), 0.01))
    due.extend(a for a in store.list(status="expired", now=now) if a.decision is None)
    return due, wait
