"""Budgets stop a runaway delegation loop; costs are exact for a scripted usage sequence."""

from __future__ import annotations

import itertools
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from goondan.commands.trace import load_spans
from goondan.llm.base import LanguageModel, ModelRequest, ModelResponse
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.runtime.traces import trace_totals
from goondan.types import TokenUsage, ToolCall
from tests.support.aio import run

HEADER = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: budgets
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "0.1.0"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: m
spec:
  provider: scripted
  model: m
{pricing}"""

AGENT = """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: {name}
spec:
  modelConfig:
    modelRef: Model/m
  prompt:
    system: "You are {name}."
  tools:
    - ref: {{kind: Tool, name: agents, package: "@goondan/base"}}
"""

SWARM = """\
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/{entry}
  agents:
{agents}
  policy:
    maxStepsPerTurn: 6
{policy}"""


def write_bundle(root: Path, agents: list[str], *, pricing: str = "", policy: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    text = HEADER.format(pricing=pricing)
    text += "".join(AGENT.format(name=a) for a in agents)
    text += SWARM.format(entry=agents[0], agents="".join(f"    - ref: Agent/{a}\n" for a in agents),
                         policy=policy)
    (root / "goondan.yaml").write_text(text)
    return root


class PingPong(LanguageModel):
    """Always asks the other agent (a fresh instance each time, so no call cycle is refused);
    answers with text once its request came back."""

    provider = "scripted"
    model = "ping-pong"
    keys = itertools.count(1)

    def __init__(self, other: str) -> None:
        self.other = other
        self.calls = 0

    async def generate(
        self, request: ModelRequest, *, stream: bool = False, on_delta: Any = None
    ) -> ModelResponse:
        self.calls += 1
        last = request.messages[-1]
        if last.get("role") == "tool":
            return ModelResponse(text="done")
        key = f"k{next(self.keys)}"
        return ModelResponse(text="", finish_reason="tool_calls", tool_calls=[ToolCall(
            id=f"call-{key}", name="agents__request",
            args={"target": self.other, "input": "ping", "instanceKey": key})])


def test_a_budget_of_two_agent_requests_stops_a_ping_pong_after_the_second(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = write_bundle(tmp_path / "b", ["ping", "pong"],
                          policy="    budget:\n      maxAgentRequestsPerTrace: 2\n")
    ping, pong = PingPong("pong"), PingPong("ping")

    async def main() -> None:
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"ping": ping, "pong": pong}
        ) as rt:
            result = await rt.run_turn("ping", "start", instance_key="root")
            assert result.finish_reason == "error"
            assert result.error is not None and result.error["code"] == "E_BUDGET_EXCEEDED"
            assert "maxAgentRequestsPerTrace 2" in result.error["message"]
            trace = result.metadata["traceId"]
            assert rt.budgets.requests(trace) == 2  # the third was refused
            # root(ping) → k1(pong) → k2(ping) asked a third time and was refused
            assert ping.calls == 2 and pong.calls == 1
            # every conversation of the chain is consistent: each tool call has its result
            for agent, key in (("ping", "root"), ("pong", "k1"), ("ping", "k2")):
                instance = await rt.instance(agent, key)
                calls = [c["toolCallId"] for m in instance.messages if m.role == "assistant"
                         for c in m.data["content"] if c.get("type") == "tool-call"]
                results = [c["toolCallId"] for m in instance.messages if m.role == "tool"
                           for c in m.data["content"]]
                assert calls and calls == results, (agent, key, instance.messages)

    run(main())
    spans = [s for s in load_spans(state_root) if s.kind == "turn"]
    assert {s.error_code for s in spans} == {"E_BUDGET_EXCEEDED"} and len(spans) == 3


def test_max_tokens_per_turn_ends_the_turn(tmp_path: Path, state_root: Path) -> None:
    bundle = write_bundle(
        tmp_path / "b", ["solo"], policy="    budget:\n      maxTokensPerTurn: 100\n"
    )
    model = ScriptedModel(
        [{"text": "long", "usage": {"inputTokens": 90, "outputTokens": 20}}], loop=True
    )

    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root, models={"solo": model}) as rt:
            result = await rt.run_turn("solo", "hi")
            assert result.error is not None and result.error["code"] == "E_BUDGET_EXCEEDED"
            assert "110 tokens, over maxTokensPerTurn 100" in result.error["message"]

    run(main())


PRICING = """\
  pricing:
    inputPerMTok: 3
    outputPerMTok: 15
    cachedInputPerMTok: 0.3
"""


def test_costs_are_exact_per_call_turn_instance_and_trace(tmp_path: Path, state_root: Path) -> None:
    bundle = write_bundle(tmp_path / "b", ["solo"], pricing=PRICING)
    usages = [(1000, 200, 400), (2500, 50, None), (7, 3, None)]
    script = [
        {"toolCalls": [{"name": "agents__catalog", "args": {}}],
         "usage": {"inputTokens": 1000, "outputTokens": 200, "cachedTokens": 400}},
        {"text": "first", "usage": {"inputTokens": 2500, "outputTokens": 50}},
        {"text": "second", "usage": {"inputTokens": 7, "outputTokens": 3}},
    ]
    model = ScriptedModel(script)

    def dollars(inp: int, out: int, cached: int | None) -> Fraction:
        c = cached or 0
        return (
            Fraction(inp - c) * 3 + Fraction(c) * Fraction("0.3") + Fraction(out) * 15
        ) / 1_000_000

    expected = [dollars(*u) for u in usages]
    assert expected == [Fraction("0.00492"), Fraction("0.00825"), Fraction("0.000066")]

    async def main() -> None:
        async with Runtime.from_bundle(bundle, state_root=state_root, models={"solo": model}) as rt:
            first = await rt.run_turn("solo", "one")
            second = await rt.run_turn("solo", "two")
            assert (first.text, second.text) == ("first", "second")
            instance = await rt.instance("solo")
            assert instance.usage == TokenUsage(3507, 253, 3760, 400)
            assert instance.cost == float(sum(expected))

    run(main())
    spans = load_spans(state_root)
    llm = [s for s in spans if s.kind == "llm"]  # in the order they ended (one instance's log)
    assert [s.cost for s in llm] == [float(e) for e in expected]
    turns = [s for s in spans if s.kind == "turn"]
    assert [s.cost for s in turns] == [float(expected[0] + expected[1]), float(expected[2])]
    first_trace = [s for s in spans if s.trace_id == turns[0].trace_id]
    totals = trace_totals(first_trace)
    assert totals["cost"] == 0.01317
    assert totals["tokenUsage"] == {"prompt": 3500, "completion": 250, "total": 3750, "cached": 400}
    assert json.dumps(totals)  # plain JSON for inspect trace --json


def test_the_usage_ledger_sums_per_instance_and_feeds_goondan_status() -> None:
    from goondan.commands.status import usage_line
    from goondan.runtime.events import TurnEnded
    from goondan.runtime.ledger import UsageLedger

    ledger = UsageLedger()
    for agent, cost, usage in (
        ("a", 0.00492, (1000, 200)),
        ("a", 0.00825, (2500, 50)),
        ("b", None, (7, 3)),
    ):
        ledger.handle(
            TurnEnded(
                trace_id="t" * 32,
                span_id="s" * 16,
                turn_id="x",
                finish_reason="text_response",
                token_usage={"prompt": usage[0], "completion": usage[1], "total": sum(usage)},
                cost=cost,
                agent_name=agent,
                instance_key="k",
            )
        )
    turns, usage, cost = ledger.instance("a", "k")
    assert (turns, usage.input_tokens, cost) == (2, 3500, 0.01317)
    doc = ledger.to_dict()
    assert doc["turns"] == 3 and doc["cost"] == 0.01317 and doc["tokenUsage"]["prompt"] == 3507
    assert usage_line(doc) == "usage: 3 turns · tokens 3507→253 · cost $0.013170"
