"""Events whose sender waits for the answer of their Turn (docs/connectors.md "Waiting for the
answer").

A connector that serves a request/answer protocol (the base ``mcp-server``) calls
``await ctx.ask(event)`` instead of ``ctx.emit``. The event takes the path of every event —
durable append to the Connection's inbox, the Connection's routing rules, the queue of its
(agent, instanceKey) — and the call returns a :class:`TurnAnswer` once the Turn ended: the
agent's final text, or the error that ended it. On the way the Turn's step and tool events reach
``on_progress``; cancelling the call cancels the Turn (a queued event is dropped, a running
Turn is aborted, as :meth:`Orchestrator.request` does for the chat).

:func:`goondan.swarm.asking.ask_ingress` is the orchestrator side, shared by connector processes
(over IPC: ``runtime.emit {answer: true}``, progress as ``runtime.delta``, a ``runtime.cancel`` from
the connector cancels) and by in-process front-ends (``goondan serve mcp``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from goondan.connectors.event import EmitReceipt
from goondan.types import JsonObject

__all__ = ["APPROVAL_PENDING", "PROGRESS_EVENT_TYPES", "ProgressFn", "TurnAnswer",
           "approval_wait_text", "progress_text"]

# The runtime events worth a progress report: one per step and per tool call (text deltas are
# too many and say nothing a progress bar could show).
# ``approval.requested`` as well: a Turn that starts waiting for a person (docs/approvals.md).
PROGRESS_EVENT_TYPES = frozenset({"step.started", "tool.called", "tool.completed", "tool.failed",
                                  "approval.requested"})
APPROVAL_PENDING = "approval_pending"  # TurnAnswer.finish_reason of a parked Turn

ProgressFn = Callable[[JsonObject], None]


def progress_text(payload: JsonObject) -> str:
    """One line for a progress report of a runtime event: ``step 2``, ``tool bash__exec``,
    ``tool bash__exec done`` / ``failed`` (names only: arguments and results stay private)."""
    kind = payload.get("type")
    if kind == "approval.requested":
        return f"tool {payload.get('toolName')} waits for approval {payload.get('approvalId')}"
    if kind == "step.started":
        index = payload.get("stepIndex")
        return f"step {index + 1}" if isinstance(index, int) else "step"
    tool = payload.get("toolName")
    suffix = {"tool.completed": " done", "tool.failed": " failed"}.get(str(kind), "")
    return f"tool {tool}{suffix}" if isinstance(tool, str) else str(kind)


def approval_wait_text(approvals: Any) -> str:
    """What a caller is told when its Turn parked (docs/serving.md): which tool calls wait, their
    approval ids, how to decide. Names only: the arguments stay in ``goondan approvals list``."""
    rows = [a for a in approvals or () if isinstance(a, dict)]
    lines = [f"Waiting for approval: the turn stopped before running {len(rows)} tool "
             f"call{'s' if len(rows) != 1 else ''} that a person must approve first."]
    for row in rows:
        reason = f" ({row['reason']})" if row.get("reason") else ""
        lines.append(f"- approval {row.get('id')}: tool {row.get('tool')}{reason}")
    first = str(rows[0].get("id")) if rows else "ID"
    lines.append(
        f"Decide with `goondan approvals approve {first}` or `goondan approvals deny {first} "
        "--reason TEXT` (`goondan approvals list` shows the arguments). The turn then resumes "
        "and its answer is added to this conversation: send the next message in the same "
        "conversation to go on from it."
    )
    return "\n".join(lines)


@dataclass(frozen=True)
class TurnAnswer:
    """The outcome of an asked event: its receipt, where it went and what the Turn answered.

    ``error_code``/``error_message`` are set when the Turn failed, was cancelled or could not be
    delivered; a duplicate or dropped event (see :class:`EmitReceipt`) ran no Turn. A Turn that
    parked waiting for approval (docs/approvals.md) has ``finish_reason`` ``approval_pending``
    and its pending ``approvals`` (rows ``{id, tool, args, reason, ...}``), and no text."""

    receipt: EmitReceipt
    agent: str | None = None
    instance_key: str | None = None
    text: str = ""
    error_code: str | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    approvals: tuple[JsonObject, ...] = ()

    @property
    def parked(self) -> bool:
        """The Turn waits for a person's decision on :attr:`approvals`."""
        return self.finish_reason == APPROVAL_PENDING and self.error_code is None

    def to_dict(self) -> JsonObject:
        """Wire form (``runtime.answer`` result)."""
        return {"id": self.receipt.id, "duplicate": self.receipt.duplicate,
                "dropped": self.receipt.dropped, "agent": self.agent,
                "instanceKey": self.instance_key, "text": self.text,
                "finishReason": self.finish_reason, "approvals": list(self.approvals),
                "error": None if self.error_code is None
                else {"code": self.error_code, "message": self.error_message or ""}}

    @classmethod
    def from_dict(cls, data: Any, event_id: str) -> TurnAnswer:
        """Parse :meth:`to_dict`'s form (missing fields read as empty)."""
        data = data if isinstance(data, dict) else {}
        error = data.get("error") if isinstance(data.get("error"), dict) else None
        agent, key, text = data.get("agent"), data.get("instanceKey"), data.get("text")
        finish, approvals = data.get("finishReason"), data.get("approvals")
        return cls(
            EmitReceipt(str(data.get("id") or event_id), duplicate=bool(data.get("duplicate")),
                        dropped=bool(data.get("dropped"))),
            agent=agent if isinstance(agent, str) else None,
            instance_key=key if isinstance(key, str) else None,
            text=text if isinstance(text, str) else "",
            error_code=str(error.get("code") or "E_AGENT_REQUEST_FAILED") if error else None,
            error_message=str(error.get("message") or "") if error else None,
            finish_reason=finish if isinstance(finish, str) else None,
            approvals=tuple(a for a in approvals if isinstance(a, dict))
            if isinstance(approvals, list) else (),
        )

    def outcome_text(self) -> tuple[str, bool]:
        """``(text, is_error)`` for a caller that shows one text: the final answer, or what
        went wrong (a duplicate or dropped event ran no Turn)."""
        if self.error_code is not None:
            return f"[{self.error_code}] {self.error_message or ''}".strip(), True
        if self.parked:
            return approval_wait_text(self.approvals), False
        if self.receipt.dropped:
            return "no ingress rule of the Connection matches this call: dropped", True
        if self.receipt.duplicate:
            return "this event id was already accepted: not run again", True
        return self.text, False
