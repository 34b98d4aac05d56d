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
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

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
    from goondan.runtime.turn import TurnRunner
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
    "decision_result",
    "park_call",
    "parked_result",
    "parked_turn",
    "parked_turn_of",
    "resume_open_calls",
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
            tool_call_id, tool_name, "nobody approved this tool call in time (the approval expired)",
            code=APPROVAL_EXPIRED, suggestion="tell the user the action needs an approval, or "
            "ask again later")
    return None


APPROVAL_PENDING_CODE = "E_APPROVAL_PENDING"
# AgentEvent metadata: the caller waits for the final answer, not for the park (send --wait).
WAIT_KEY = "goondan.waitForApproval"


class ApprovalGate:
    """The approvals of one instance: requests written before a call runs, decisions read back.

    ``journal`` is the instance's :class:`~goondan.workspace.journal.TurnJournal` (None for a
    store without one: the request is then only in the approval store)."""

    def __init__(self, *, rules: ApprovalRules, store: ApprovalStore, journal: Any,
                 agent: str, instance_key: str) -> None:
        self.rules = rules
        self.store = store
        self.journal = journal
        self.agent = agent
        self.instance_key = instance_key
        self.pending: dict[str, Approval] = {}  # toolCallId -> requested in this run of the turn
        self.approved: dict[str, Approval] = {}  # toolCallId -> approved, run by the resumed turn
        self.input: AgentEvent | None = None  # the running turn's input event

    def __repr__(self) -> str:
        return f"<ApprovalGate {self.agent}@{self.instance_key} pending={len(self.pending)}>"

    def reset(self, event: AgentEvent) -> None:
        """A turn (or its resumption) for input ``event`` starts: forget the last one's calls."""
        self.pending.clear()
        self.approved.clear()
        self.input = event

    # -- the turn journal's records of a parked turn (docs/approvals.md "Durability") ------------
    def open_turn(self) -> OpenTurn | None:
        """The journal's open turn, if any."""
        return self.journal.open_turn() if self.journal is not None else None

    def _ensure_started(self, turn_id: str) -> None:
        opened = self.journal.open_turn()
        if opened is None or opened.turn_id != turn_id:
            event = self.input.to_dict() if self.input is not None else {}
            self.journal.append({"type": "turn.started", "turnId": turn_id, "input": event, "at": now_iso()})

    def mark(self, kind: str, turn_id: str, **fields: Any) -> None:
        """Append ``turn.parked`` / ``turn.resumed`` for the open turn ``turn_id``."""
        if self.journal is not None:
            self.journal.append({"type": kind, "turnId": turn_id, **fields, "at": now_iso()})

    def end(self, turn_id: str, finish_reason: str) -> None:
        """The turn ``turn_id`` ended and is committed: ``turn.ended``, then the journal is emptied."""
        if self.journal is None:
            return
        opened = self.journal.open_turn()
        if opened is not None and opened.turn_id == turn_id:
            self.journal.append({"type": "turn.ended", "turnId": turn_id, "finishReason": finish_reason,
                                 "at": now_iso()})
            self.journal.clear()

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
            self._ensure_started(ctx.turn_id)
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


async def resume_open_calls(runner: TurnRunner) -> TurnResult | None:
    """Give each call of the turn's last assistant message without a result its result: a
    decided approval decides (approved: it runs, with the approver's arguments; denied or
    expired: an error result), a call without one runs. Returns the parked result when an
    approval is still pending, else None (the step loop goes on)."""
    from goondan.conversation.messages import Message, MessageEvent
    from goondan.pipeline.context import Step

    gate, messages = runner.env.approvals, runner.state.next_messages
    last_index = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)
    prefix = f"{runner.turn_id}-step-"
    runner.first_step = sum(1 for m in messages if m.role == "assistant" and m.source is not None
                            and (m.source.step_id or "").startswith(prefix))
    if last_index is None:
        return None
    last = messages[last_index]
    answered = {m.source.tool_call_id for m in messages[last_index + 1:]
                if m.role == "tool" and m.source is not None}
    open_calls = [c for c in last.tool_calls if c.id not in answered]
    if not open_calls:
        return None
    journal = gate.journal if gate is not None else None
    opened = await asyncio.to_thread(journal.open_turn) if journal is not None else None
    records = opened.approvals if opened is not None and opened.turn_id == runner.turn_id else {}
    index = max(runner.first_step - 1, 0)
    step = Step(id=(last.source.step_id if last.source is not None else None) or f"{prefix}{index}",
                index=index, status="tool_exec")
    span = runner.span.child(f"step {step.index}", "step")
    catalog = await runner.env.step_catalog(runner.turn_id)
    for call in open_calls:
        record = records.get(call.id)
        if gate is not None and record is not None:
            found = gate.settle(await asyncio.to_thread(gate.lookup, record))
            if found.status == "pending":
                gate.pending[call.id] = found
                continue
            decision = found.decision or {}
            runner.env.observer.emit(ApprovalDecided(
                **span_ids(span), turn_id=runner.turn_id, approval_id=found.id, tool_call_id=call.id,
                tool_name=call.name, status=found.status, decided_by=decision.get("decidedBy"),
                via=decision.get("via")))
            denied = decision_result(found.status, call.id, call.name, decision.get("reason"))
            if denied is not None:
                runner.emit(MessageEvent.append(Message.tool_result(denied)))
                continue
            gate.approved[call.id] = found
        runner.tool_call_count += 1
        result = await runner._run_tool_call(cast(Any, None), step, span, call, last, catalog)
        if not runner._parked(result):
            runner.emit(MessageEvent.append(Message.tool_result(result)))
    span.finish()
    return parked_turn(runner.turn_id, gate) if gate is not None and gate.pending else None


def parked_turn_of(store: Any) -> OpenTurn | None:
    """The store's open turn when it is parked on approvals (blocking: call it in a thread)."""
    journal = getattr(store, "journal", None)
    opened = journal.open_turn() if journal is not None else None
    return opened if opened is not None and opened.parked else None


def any_decided(gate: ApprovalGate, parked: OpenTurn) -> bool:
    """True when an approval of the parked turn is decided (or expired): it can go on."""
    return any(gate.settle(gate.lookup(record)).status != "pending" for record in parked.approvals.values())


def answers(event: AgentEvent, result: TurnResult, resumed: bool) -> bool:
    """Whether ``result`` answers ``event``'s caller: a park answers (with the approvals) unless
    the caller waits for the final answer (``send --wait``); a resumed turn answers only such a
    caller, since the others were answered when it parked."""
    parks = result.finish_reason == APPROVAL_PENDING
    waits = bool(event.metadata.get(WAIT_KEY))
    if resumed:
        return waits and not parks
    return not (parks and waits)


class RuntimeApprovals:
    """``Runtime.approvals``: list and decide the approvals of an embedded runtime's workspace.

    A decision is stored first (first decision wins), then the parked turn resumes in this
    process; ``approve``/``deny`` return the resumed turn's result (``approval_pending`` while
    another approval of the turn still waits), or None when this decision was not the first."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime
        self.store = ApprovalStore(runtime.state_root, runtime.workspace_id)

    def __repr__(self) -> str:
        return f"<RuntimeApprovals {self.store.dir}>"

    def list(self, *, status: str | None = "pending", agent: str | None = None,
             instance_key: str | None = None) -> list[Approval]:
        """The approvals (pending ones by default; ``status=None``: all), oldest first."""
        return self.store.list(status=status, agent=agent, instance_key=instance_key)

    def get(self, approval: str) -> Approval | None:
        """One approval, or None."""
        return self.store.get(approval)

    async def approve(self, approval: str, *, args: JsonObject | None = None, note: str | None = None,
                      by: str = "api") -> TurnResult | None:
        """Approve (with edited ``args`` if given) and resume the turn."""
        return await self._decide(approval, approve=True, args=args, note=note, reason=None, by=by)

    async def deny(self, approval: str, *, reason: str | None = None, by: str = "api") -> TurnResult | None:
        """Deny (the model sees ``E_APPROVAL_DENIED`` with ``reason``) and resume the turn."""
        return await self._decide(approval, approve=False, args=None, note=None, reason=reason, by=by)

    async def _decide(self, approval: str, *, approve: bool, args: JsonObject | None, note: str | None,
                      reason: str | None, by: str) -> TurnResult | None:
        found, mine = await asyncio.to_thread(self.store.decide, approval, approve=approve, by=by, via="api",
                                              args=args, note=note, reason=reason)
        if not mine and found.status != "expired":
            return None
        agent, key = str(found.request.get("agent")), str(found.request.get("instanceKey"))
        event = AgentEvent(type=APPROVAL_DECIDED_EVENT, instance_key=key, metadata={"approvalId": approval})
        result: TurnResult = await self._runtime.run_event(agent, event)
        return result


MAX_WATCH_S = 5.0  # how often the orchestrator looks for approvals that expired meanwhile


def approvals_due(state_root: Path, workspace_id: str, *, startup: bool) -> tuple[list[Approval], float]:
    """What an orchestrator must wake: approvals whose parked turn can go on, and the seconds
    until it should look again (the next expiry, at most :data:`MAX_WATCH_S`).

    At ``startup`` the parked turns of the workspace's instances are read (decisions taken while
    the swarm was stopped); afterwards only pending approvals that expired are due."""
    from datetime import UTC, datetime

    from goondan.workspace.files import read_bytes
    from goondan.workspace.journal import JOURNAL_FILE, open_turn_of, parse_records
    from goondan.workspace.paths import StateLayout

    store = ApprovalStore(state_root, workspace_id)
    now = datetime.now(UTC)
    due: list[Approval] = []
    if startup:
        instances = StateLayout(state_root).instances_dir(workspace_id)
        for journal in sorted(instances.glob(f"*/{JOURNAL_FILE}")):
            try:
                opened = open_turn_of(parse_records(read_bytes(journal), str(journal)))
            except GoondanError:
                continue
            if opened is None or not opened.parked:
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
