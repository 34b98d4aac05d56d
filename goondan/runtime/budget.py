"""Trace-wide budgets: agent requests and cost per trace, checked where requests are routed.

:class:`TraceBudgets` is consulted by the router of agent-to-agent events (the orchestrator for
``goondan run``, the in-process router for the embedding API) before an event is delivered:
the caller's budget (``Swarm.spec.policy.budget`` merged with ``Agent.spec.budget``) limits
``maxAgentRequestsPerTrace`` — every ``agents__request`` / ``agents__send`` of a trace counts —
and ``maxCostPerTrace`` (the LLM cost recorded so far in the trace, summed from the
``llm.completed`` events it receives as an event sink). A refused request fails with
``E_BUDGET_EXCEEDED``; the caller's turn then ends with that error and so does every turn of
the trace waiting on it (``goondan/runtime/turn.py``). ``maxTokensPerTurn`` is checked by the
turn itself. See docs/observability.md "Budgets".
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from goondan.errors import BudgetExceededError
from goondan.runtime.events import RuntimeEvent
from goondan.runtime.ledger import Budget
from goondan.runtime.observe import EventSink
from goondan.types import AgentEvent

__all__ = ["TRACE_COST_KEY", "TraceBudgets"]

# Request metadata: the trace's cost when the request was admitted, so the callee's turn can
# stop itself when its own spending takes the trace past maxCostPerTrace.
TRACE_COST_KEY = "goondanTraceCost"
_TRACES_KEPT = 10_000


class TraceBudgets(EventSink):
    """Per-trace request counts and costs, and the admission check of the routers."""

    def __init__(self, budgets: Mapping[str, Budget], *, default: Budget | None = None) -> None:
        self.budgets = dict(budgets)
        self.default = default or Budget()
        self._requests: OrderedDict[str, int] = OrderedDict()
        self._cost: OrderedDict[str, float] = OrderedDict()

    def __repr__(self) -> str:
        return f"<TraceBudgets agents={sorted(self.budgets)} traces={len(self._requests)}>"

    @property
    def active(self) -> bool:
        """Some agent has a trace-wide limit (otherwise the routers need not ask)."""
        return any(b.max_agent_requests_per_trace is not None or b.max_cost_per_trace is not None
                   for b in (self.default, *self.budgets.values()))

    def requests(self, trace_id: str) -> int:
        """Agent requests admitted so far in ``trace_id``."""
        return self._requests.get(trace_id, 0)

    def cost(self, trace_id: str) -> float:
        """LLM cost (US dollars) recorded so far in ``trace_id``."""
        return self._cost.get(trace_id, 0.0)

    def admit(self, caller: str, target: str, event: AgentEvent) -> None:
        """Count one agent request of ``caller``; raise :class:`BudgetExceededError` past a
        limit."""
        trace = event.trace_id or ""
        if not trace:
            return
        budget = self.budgets.get(caller, self.default)
        count = self.requests(trace) + 1
        limit = budget.max_agent_requests_per_trace
        if limit is not None and count > limit:
            raise BudgetExceededError(
                f"agent request {count} of trace {trace} ({caller} → {target}) exceeds "
                f"maxAgentRequestsPerTrace {limit}",
                suggestion="raise spec.policy.budget.maxAgentRequestsPerTrace (Swarm) or "
                "spec.budget (Agent), or stop the agents from delegating in a loop",
            )
        spent = self.cost(trace)
        cost_limit = budget.max_cost_per_trace
        if cost_limit is not None and spent >= cost_limit:
            raise BudgetExceededError(
                f"trace {trace} has cost ${spent:.6f}, at or over maxCostPerTrace ${cost_limit}; "
                f"request {caller} → {target} refused",
                suggestion="raise maxCostPerTrace, or use a cheaper Model",
            )
        self._remember(self._requests, trace, count)
        event.metadata[TRACE_COST_KEY] = spent

    def on_span_end(self, event: RuntimeEvent) -> None:
        """Add an ``llm.completed`` event's cost to its trace."""
        cost = getattr(event, "cost", None)
        if event.type == "llm.completed" and isinstance(cost, (int, float)) and event.trace_id:
            self._remember(self._cost, event.trace_id, self.cost(event.trace_id) + float(cost))

    @staticmethod
    def _remember(
        table: OrderedDict[str, float] | OrderedDict[str, int], key: str, value: float
    ) -> None:
        table[key] = value  # type: ignore[assignment]
        table.move_to_end(key)
        while len(table) > _TRACES_KEPT:  # old traces are forgotten, memory stays bounded
            table.popitem(last=False)
