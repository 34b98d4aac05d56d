"""Token and cost ledger: a Model's price table, the cost of a usage, and budgets.

A Model may declare ``spec.pricing`` (``inputPerMTok``, ``outputPerMTok``,
``cachedInputPerMTok``: US dollars per million tokens). The cost of a usage is computed from
the token counts the provider reported: cached input tokens at the cached price (the input
price when none is given), the rest of the input at the input price, output at the output
price. A usage with unknown calls (a stream without a usage chunk) has a known *lower bound*
only, and says so. See docs/observability.md "Token and cost ledger" and "Budgets".

Costs are kept in micro-dollars internally (integers) so that sums over many calls are exact,
then shown as dollars rounded to 6 decimals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from goondan.runtime.events import RuntimeEvent
from goondan.runtime.observe import EventSink
from goondan.types import JsonObject, TokenUsage

__all__ = ["Budget", "Pricing", "UsageLedger", "cost_of", "sum_usage", "usage_from_dict"]

_MILLION = 1_000_000


@dataclass(frozen=True)
class Pricing:
    """US dollars per million tokens (``spec.pricing`` of a Model)."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Pricing | None:
        """The pricing of a Model spec's ``pricing`` mapping (``None`` when absent)."""
        if not data:
            return None
        cached = data.get("cachedInputPerMTok")
        return cls(
            input_per_mtok=float(data.get("inputPerMTok") or 0.0),
            output_per_mtok=float(data.get("outputPerMTok") or 0.0),
            cached_input_per_mtok=float(cached) if cached is not None else None,
        )

    def to_dict(self) -> JsonObject:
        """The camelCase ``spec.pricing`` form."""
        out: JsonObject = {
            "inputPerMTok": self.input_per_mtok,
            "outputPerMTok": self.output_per_mtok,
        }
        if self.cached_input_per_mtok is not None:
            out["cachedInputPerMTok"] = self.cached_input_per_mtok
        return out


def usage_from_dict(data: Mapping[str, Any] | None) -> TokenUsage:
    """A :class:`TokenUsage` from its wire form ``{prompt, completion, total, cached?,
    unknownCalls?}``."""
    if not data:
        return TokenUsage()
    cached = data.get("cached")
    return TokenUsage(
        input_tokens=int(data.get("prompt") or 0),
        output_tokens=int(data.get("completion") or 0),
        total_tokens=int(data.get("total") or 0),
        cached_tokens=int(cached) if cached is not None else None,
        unknown_calls=int(data.get("unknownCalls") or 0),
    )


def sum_usage(usages: list[TokenUsage]) -> TokenUsage:
    """The sum of ``usages`` (an empty usage for none)."""
    total = TokenUsage()
    for usage in usages:
        total = total + usage
    return total


def cost_of(usage: TokenUsage | Mapping[str, Any] | None, pricing: Pricing | None) -> float | None:
    """The cost in US dollars of ``usage`` under ``pricing`` (``None`` without a price table).

    Exact to the micro-dollar: the arithmetic is done with fractions, then rounded once.
    """
    if pricing is None or usage is None:
        return None
    from fractions import Fraction  # only priced models pay for the import (with decimal)

    if not isinstance(usage, TokenUsage):
        usage = usage_from_dict(usage)
    cached = min(usage.cached_tokens or 0, usage.input_tokens)
    cached_price = pricing.cached_input_per_mtok
    if cached_price is None:
        cached_price = pricing.input_per_mtok
    dollars = (
        Fraction(usage.input_tokens - cached) * Fraction(str(pricing.input_per_mtok))
        + Fraction(cached) * Fraction(str(cached_price))
        + Fraction(usage.output_tokens) * Fraction(str(pricing.output_per_mtok))
    ) / _MILLION
    return round(float(dollars), 9)


@dataclass(frozen=True)
class Budget:
    """Limits of ``Swarm.spec.policy.budget`` merged with ``Agent.spec.budget`` (the agent wins)."""

    max_tokens_per_turn: int | None = None
    max_cost_per_trace: float | None = None
    max_agent_requests_per_trace: int | None = None

    @classmethod
    def from_dicts(cls, *layers: Mapping[str, Any] | None) -> Budget:
        """Merge budget mappings, later ones overriding earlier ones key by key."""
        merged: dict[str, Any] = {}
        for layer in layers:
            merged.update({k: v for k, v in (layer or {}).items() if v is not None})
        cost = merged.get("maxCostPerTrace")
        return cls(
            max_tokens_per_turn=merged.get("maxTokensPerTurn"),
            max_cost_per_trace=float(cost) if cost is not None else None,
            max_agent_requests_per_trace=merged.get("maxAgentRequestsPerTrace"),
        )

    @property
    def empty(self) -> bool:
        """No limit is set."""
        return (self.max_tokens_per_turn is None and self.max_cost_per_trace is None
                and self.max_agent_requests_per_trace is None)

    def to_dict(self) -> JsonObject:
        """The camelCase form (only the limits that are set)."""
        out: JsonObject = {}
        if self.max_tokens_per_turn is not None:
            out["maxTokensPerTurn"] = self.max_tokens_per_turn
        if self.max_cost_per_trace is not None:
            out["maxCostPerTrace"] = self.max_cost_per_trace
        if self.max_agent_requests_per_trace is not None:
            out["maxAgentRequestsPerTrace"] = self.max_agent_requests_per_trace
        return out


class UsageLedger(EventSink):
    """Token usage and cost summed per agent instance and per trace from ``turn.*`` events.

    The orchestrator of ``goondan run`` keeps one for ``goondan status`` and ``/usage``
    (docs/observability.md "Token and cost ledger").
    """

    def __init__(self, *, traces_kept: int = 1000) -> None:
        # (agent, key) -> [turns, usage, cost]
        self.instances: dict[tuple[str, str], list[Any]] = {}
        self.traces: dict[str, list[Any]] = {}
        self.traces_kept = traces_kept

    def __repr__(self) -> str:
        return f"<UsageLedger instances={len(self.instances)} traces={len(self.traces)}>"

    def handle(self, event: RuntimeEvent) -> None:
        """Count a ``turn.completed`` / ``turn.failed`` event."""
        if event.type not in ("turn.completed", "turn.failed"):
            return
        usage = usage_from_dict(getattr(event, "token_usage", None))
        cost = getattr(event, "cost", None)
        rows = (
            self.instances.setdefault(
                (event.agent_name, event.instance_key), [0, TokenUsage(), None]
            ),
            self.traces.setdefault(event.trace_id, [0, TokenUsage(), None]),
        )
        for row in rows:
            row[0] += 1
            row[1] = row[1] + usage
            if cost is not None:
                row[2] = round((row[2] or 0.0) + cost, 9)
        while len(self.traces) > self.traces_kept:  # bounded: the oldest trace goes first
            self.traces.pop(next(iter(self.traces)))

    def instance(self, agent: str, instance_key: str) -> tuple[int, TokenUsage, float | None]:
        """``(turns, usage, cost)`` of one agent instance (zeros when it ran no turn)."""
        turns, usage, cost = self.instances.get((agent, instance_key), [0, TokenUsage(), None])
        return turns, usage, cost

    def to_dict(self) -> JsonObject:
        """``{tokenUsage, cost, turns, instances: [{agent, instanceKey, turns, tokenUsage,
        cost}]}``."""
        total, cost, turns = TokenUsage(), None, 0
        rows = []
        for (agent, key), (n, usage, spent) in sorted(self.instances.items()):
            total, turns = total + usage, turns + n
            if spent is not None:
                cost = round((cost or 0.0) + spent, 9)
            rows.append({"agent": agent, "instanceKey": key, "turns": n,
                         "tokenUsage": usage.to_dict(), "cost": spent})
        return {"turns": turns, "tokenUsage": total.to_dict(), "cost": cost, "instances": rows}
