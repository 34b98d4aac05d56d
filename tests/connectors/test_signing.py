"""The start-up check of listening Connections (goondan/connectors/signing.py): which
Connections pass, and that the error names variables, never values."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan.config import load_bundle
from goondan.connectors.signing import check_connections_signed
from goondan.connectors.spec import ConnectionSpec, connections_for_swarm
from goondan.errors import ConnectorError
from tests.support.connector_e2e import base_bundle


def _connections(tmp_path: Path, connector: str, spec: str) -> list[ConnectionSpec]:
    document = (
        "apiVersion: goondan.ai/v1\nkind: Connection\nmetadata: {name: inbound}\nspec:\n"
        f'  connectorRef: {{kind: Connector, name: {connector}, package: "@goondan/base"}}\n{spec}'
    )
    root = base_bundle(tmp_path / "bundle", None, {"assistant": ""}, document)
    return connections_for_swarm(load_bundle(root, state_root=tmp_path / "state"), "default")


@pytest.mark.parametrize(("connector", "spec", "env"), [
    ("webhook", "  secrets: {SIGNING_SECRET: {valueFrom: {env: HOOK_KEY}}}\n", {"HOOK_KEY": "k"}),
    ("webhook", "  secrets: {WEBHOOK_SECRET: {valueFrom: {env: HOOK_KEY}}}\n", {"HOOK_KEY": "k"}),
    ("github", "  verify: {webhook: {signingSecret: {value: legacy}}}\n", {}),
    ("slack", "  config: {SLACK_SIGNING_SECRET: {value: from-config}}\n", {}),
    ("webhook", "  config: {ALLOW_UNSIGNED: {value: \"TRUE\"}}\n", {}),
    ("discord", "  config: {DISCORD_PUBLIC_KEY: {value: " + "ab" * 32 + "}}\n", {}),
    ("telegram-polling", "", {}),  # not a listening connector
    ("mcp-server", "  secrets: {AUTH_TOKEN: {valueFrom: {env: MCP_TOKEN}}}\n", {"MCP_TOKEN": "t"}),
    ("mcp-server", "  config: {ALLOW_UNAUTHENTICATED: {value: \"true\"}}\n", {}),
    ("a2a", "  secrets: {AUTH_TOKEN: {valueFrom: {env: A2A_TOKEN}}}\n", {"A2A_TOKEN": "t"}),
    ("a2a", "  config: {ALLOW_UNAUTHENTICATED: {value: \"true\"}}\n", {}),
])
def test_connections_that_start(
    tmp_path: Path, connector: str, spec: str, env: dict[str, str]
) -> None:
    check_connections_signed(_connections(tmp_path, connector, spec), env)


@pytest.mark.parametrize("connector", ["webhook", "github", "slack", "discord"])
def test_an_unset_secret_stops_the_start_and_names_the_variable(
    tmp_path: Path, connector: str
) -> None:
    name = "DISCORD_PUBLIC_KEY" if connector == "discord" else "SIGNING_SECRET"
    spec = (f"  secrets: {{{name}: {{valueFrom: {{env: HOOK_KEY}}}}}}\n"
            "  config: {ALLOW_UNSIGNED: {value: \"false\"}}\n")
    with pytest.raises(ConnectorError) as info:
        check_connections_signed(_connections(tmp_path, connector, spec), {"HOOK_KEY": "  "})
    assert info.value.code == "E_CONNECTOR_UNSIGNED"
    assert "'inbound'" in info.value.message and "HOOK_KEY" in info.value.message
    assert info.value.location == "Connection/inbound"


@pytest.mark.parametrize("connector", ["mcp-server", "a2a"])
def test_an_mcp_or_a2a_server_without_a_token_stops_the_start_and_names_its_own_switch(
        tmp_path: Path, connector: str) -> None:
    # ALLOW_UNSIGNED is the signing connectors' switch: it does not open an MCP or A2A server
    spec = ("  secrets: {AUTH_TOKEN: {valueFrom: {env: MCP_TOKEN}}}\n"
            "  config: {ALLOW_UNSIGNED: {value: \"true\"}}\n")
    with pytest.raises(ConnectorError) as info:
        check_connections_signed(_connections(tmp_path, connector, spec), {"MCP_TOKEN": ""})
    assert info.value.code == "E_CONNECTOR_UNSIGNED"
    assert "no auth token" in info.value.message and "MCP_TOKEN" in info.value.message
    assert "ALLOW_UNAUTHENTICATED" in str(info.value.suggestion)
