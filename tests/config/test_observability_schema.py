"""Model ``spec.pricing`` and the budgets of Swarm ``policy`` / Agent ``spec`` validate and
reach the resolved specs."""

from __future__ import annotations

from pathlib import Path

from goondan.config import load_bundle

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: m
  pricing: {inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  prompt: {system: hi}
  budget: {maxAgentRequestsPerTrace: 4}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/a
  agents: [{ref: Agent/a}]
  policy:
    budget: {maxTokensPerTurn: 1000, maxCostPerTrace: 0.5, maxAgentRequestsPerTrace: 10}
"""


def test_pricing_and_budgets_are_accepted_and_resolved(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(BUNDLE)
    bundle = load_bundle(tmp_path)
    spec = bundle.agent_spec("a")
    assert spec.model.pricing == {"inputPerMTok": 3, "outputPerMTok": 15, "cachedInputPerMTok": 0.3}
    assert spec.budget == {
        "maxTokensPerTurn": 1000,
        "maxCostPerTrace": 0.5,
        "maxAgentRequestsPerTrace": 4,
    }


def test_invalid_pricing_and_budget_are_validation_errors(tmp_path: Path) -> None:
    import pytest

    from goondan.errors import GoondanError

    bad = BUNDLE.replace("inputPerMTok: 3", "inputPerMTok: -1").replace(
        "maxTokensPerTurn: 1000", "maxTokensPerTurn: zero"
    )
    (tmp_path / "goondan.yaml").write_text(bad)
    with pytest.raises(GoondanError) as info:
        load_bundle(tmp_path)
    text = str(info.value) + " ".join(str(d) for d in getattr(info.value, "diagnostics", []))
    assert "pricing" in text and "maxTokensPerTurn" in text
