"""Connections of a bundle: which Swarm they belong to, their rules and resolved values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from goondan.config import load_bundle
from goondan.connectors.routing import IngressRule
from goondan.connectors.spec import (
    connections_for_swarm,
    other_connections,
    resolve_connection_values,
)
from goondan.secrets import mask

BUNDLE = """
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: m, options: {script: ["ok"]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec: {modelConfig: {modelRef: Model/m}, prompts: {systemPrompt: x}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: b}
spec: {modelConfig: {modelRef: Model/m}, prompts: {systemPrompt: x}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: first}
spec: {entryAgent: Agent/a, agents: [{ref: Agent/a}, {ref: Agent/b}]}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: second}
spec: {entryAgent: Agent/b, agents: [{ref: Agent/b}]}
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: c}
spec: {entry: ./c.py, events: [{name: e}]}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: implicit}
spec:
  connectorRef: Connector/c
  config:
    PORT: {value: "8080"}
    MISSING: {valueFrom: {env: GOONDAN_TEST_UNSET_VALUE}}
  secrets:
    TOKEN: {valueFrom: {env: GOONDAN_TEST_CONN_TOKEN}}
  verify: {webhook: {signingSecret: {value: legacy-signing-secret}}}
  ingress:
    rules:
      - match: {event: e, properties: {n: 1}}
        route: {agentRef: Agent/b, instanceKeyProperty: chat, instanceKeyPrefix: "c:"}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: explicit}
spec: {connectorRef: Connector/c, swarmRef: Swarm/second}
"""


def test_connections_belong_to_their_swarm_and_resolve_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "goondan.yaml").write_text(BUNDLE)
    (tmp_path / "c.py").write_text("async def run(ctx):\n    pass\n")
    monkeypatch.setenv("GOONDAN_TEST_CONN_TOKEN", "tok-123456789")
    monkeypatch.delenv("GOONDAN_TEST_UNSET_VALUE", raising=False)
    bundle = load_bundle(tmp_path, state_root=tmp_path / "state")
    first = connections_for_swarm(bundle, "first")
    assert [c.name for c in first] == ["implicit"]  # no swarmRef: the package's first Swarm
    assert [c.name for c in other_connections(bundle, "first")] == ["explicit"]
    assert [c.name for c in connections_for_swarm(bundle, "second")] == ["explicit"]
    spec = first[0]
    assert (spec.connector, spec.connector_package, spec.events, spec.is_cli) == (
        "c",
        None,
        ("e",),
        False,
    )
    assert spec.entry == (tmp_path / "c.py").absolute()
    assert spec.rules == (
        IngressRule(
            event="e",
            properties={"n": "1"},
            agent="b",
            instance_key_property="chat",
            instance_key_prefix="c:",
        ),
    )
    config, secrets, unset = resolve_connection_values(
        spec, {"GOONDAN_TEST_CONN_TOKEN": "tok-123456789"}
    )
    assert config == {"PORT": "8080"}
    assert secrets == {"TOKEN": "tok-123456789", "signingSecret": "legacy-signing-secret"}
    assert unset == ["config.MISSING"]
    assert mask("token tok-123456789") == "token ***" and "8080" in mask("port 8080")


def test_a_route_with_both_instance_key_and_instance_key_property_is_rejected(
    tmp_path: Path,
) -> None:
    """connectors.md §4 step 4: ``route.instanceKey`` together with ``route.instanceKeyProperty``
    is invalid (MUST NOT); ``goondan validate`` reports it on the route, either one alone is
    valid."""
    from goondan.config import validate_bundle

    def report(route: str) -> Any:
        (tmp_path / "goondan.yaml").write_text(
            BUNDLE.replace(
                'route: {agentRef: Agent/b, instanceKeyProperty: chat, instanceKeyPrefix: "c:"}',
                route,
            )
        )
        return validate_bundle(
            tmp_path, env={"GOONDAN_TEST_CONN_TOKEN": "t"}, state_root=tmp_path / "state"
        )

    (tmp_path / "c.py").write_text("async def run(ctx):\n    pass\n")
    both = report("route: {instanceKey: fixed, instanceKeyProperty: chat}")
    [error] = both.errors
    assert "instanceKey or instanceKeyProperty, not both" in error.message
    assert error.resource == "Connection/implicit" and "route" in str(error.path)
    assert report("route: {instanceKey: fixed}").valid
    assert report("route: {instanceKeyProperty: chat}").valid
