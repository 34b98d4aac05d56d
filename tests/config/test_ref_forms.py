"""resources.md §3: a ref field takes ``"Kind/name"``, ``{kind, name, package?}`` or the
RefItem wrapper ``{ref: …}`` — the wrapper wherever a plain ref string is accepted
(``entryAgent``, ``modelRef``, ``connectorRef``, ``swarmRef``, ``route.agentRef``), not only
in lists (issue 28)."""

from __future__ import annotations

from pathlib import Path

from goondan.config import load_bundle, validate_bundle
from goondan.connectors.spec import connections_for_swarm

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: refs}
spec: {version: "0.1.0"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: ok, options: {loop: true, script: [ok]}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: other}
spec: {provider: scripted, model: other, options: {loop: true, script: [ok]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: {ref: "Model/other"}}
  prompts: {systemPrompt: A.}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: b}
spec:
  modelConfig: {modelRef: {ref: {kind: Model, name: m}}}
  prompts: {systemPrompt: B.}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: {ref: "Agent/b"}
  agents: [{ref: "Agent/a"}, "Agent/b"]
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: c}
spec:
  entry: ./c.py
  events: [{name: msg}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: cx}
spec:
  connectorRef: {ref: "Connector/c"}
  swarmRef: {ref: "Swarm/default"}
  ingress:
    rules:
      - match: {event: msg}
        route: {agentRef: {ref: "Agent/a"}}
"""


def _bundle(tmp_path: Path, text: str = BUNDLE) -> Path:
    (tmp_path / "goondan.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "c.py").write_text("async def run(ctx):\n    pass\n", encoding="utf-8")
    return tmp_path


def test_the_ref_wrapper_is_accepted_wherever_a_ref_string_is(
    tmp_path: Path, state_root: Path
) -> None:
    root = _bundle(tmp_path)
    report = validate_bundle(root, env={}, state_root=state_root)
    assert report.valid and not report.errors, [d.to_dict() for d in report.errors]
    bundle = load_bundle(root, state_root=state_root)
    swarm = bundle.swarm_spec(None)
    assert swarm.entry_agent == "b" and swarm.agents == ["a", "b"]
    assert bundle.agent_spec("a").model.name == "other" and bundle.agent_spec("b").model.name == "m"
    [connection] = connections_for_swarm(bundle, "default")
    assert connection.connector == "c" and connection.swarm == "default"
    assert [rule.agent for rule in connection.rules] == ["a"]


def test_a_wrapped_ref_is_checked_like_a_plain_one(tmp_path: Path, state_root: Path) -> None:
    text = BUNDLE.replace('entryAgent: {ref: "Agent/b"}', 'entryAgent: {ref: "Agent/nobody"}')
    text = text.replace('modelRef: {ref: "Model/other"}', 'modelRef: {ref: "Tool/other"}')
    text = text.replace(
        'connectorRef: {ref: "Connector/c"}', 'connectorRef: {ref: "Connector/c", package: x}'
    )
    report = validate_bundle(_bundle(tmp_path, text), env={}, state_root=state_root)
    found = {(d.code, d.field) for d in report.errors}
    assert ("E_CONFIG_REF_NOT_FOUND", "spec.entryAgent") in found
    assert ("E_CONFIG_INVALID_REF", "spec.modelConfig.modelRef.ref") in found
    assert ("E_CONFIG_UNKNOWN_FIELD", "spec.connectorRef.package") in found
