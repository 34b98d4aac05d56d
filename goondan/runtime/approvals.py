"""Which tool calls wait for a person, and what a decision means for the call (docs/approvals.md).

A call needs approval when its export (or the Agent's reference to its Tool, or the MCP server's
reference) says ``approval: required``, or when a toolCall middleware called
``ctx.require_approval(...)`` before ``next()``. Such a call is not run: its request is written
first (turn journal, then the workspace's :class:`~goondan.workspace.approvals.ApprovalStore`),
the step's other calls run, and the turn parks. The decision resumes the turn; this module turns
it into what the call gets (run with the approved arguments, or an error result the model sees).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from goondan.tools.catalog import attr
from goondan.tools.naming import build_tool_name
from goondan.types import ToolCallResult

__all__ = [
    "APPROVAL_DENIED",
    "APPROVAL_EXPIRED",
    "APPROVAL_PENDING",
    "ApprovalRule",
    "ApprovalRules",
    "approval_rules",
    "decision_result",
]

APPROVAL_PENDING = "approval_pending"  # the turn's finish reason while it is parked
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
