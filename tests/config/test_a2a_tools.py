"""``spec.a2a`` on a Tool: schema rules, values and the AgentSpec it yields (docs/tools.md
"A2A agents")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goondan.config import load_bundle
from tests.config.test_mcp_tools import _codes


def test_a_valid_a2a_tool_yields_a_remote_agent_spec(tmp_path: Path) -> None:
    spec = {"a2a": {"url": "http://127.0.0.1:8100/a2a", "timeoutMs": 5000,
                    "headers": {"Authorization": {"valueFrom": {"env": "PEER_AUTH"}}}},
            "exports": ["assistant"]}
    errors, warnings = _codes(tmp_path, spec, agent={"requiredTools": ["time__assistant"]},
                              env={"PEER_AUTH": "Bearer t"})
    assert errors == [] and "W_CONFIG_ENV_UNSET" not in warnings
    agent = load_bundle(tmp_path).agent_spec("a")
    assert agent.tools == [] and agent.mcp_servers == []
    [remote] = agent.a2a_agents
    assert remote.name == "time" and remote.url == "http://127.0.0.1:8100/a2a"
    assert remote.timeout_ms == 5000 and remote.exports == ["assistant"]
    assert remote.resolve_headers({"PEER_AUTH": "Bearer t"}) == ({"Authorization": "Bearer t"}, [])


def test_an_a2a_tool_without_exports_accepts_any_required_skill_and_warns_on_unset_headers(
        tmp_path: Path) -> None:
    spec = {
        "a2a": {
            "url": "http://127.0.0.1:8100",
            "headers": {"Authorization": {"valueFrom": {"env": "X"}}},
        }
    }
    errors, warnings = _codes(tmp_path, spec, agent={"requiredTools": ["time__anything"]})
    assert errors == []
    assert "W_CONFIG_ENV_UNSET" in warnings


def test_a2a_block_errors(tmp_path: Path) -> None:
    cases: list[dict[str, Any]] = [
        {"a2a": {}},                                                    # no url
        {"a2a": {"url": "ftp://host/x"}},                              # not http(s)
        {"a2a": {"url": "http://h/a2a"}, "mcp": {"url": "http://h/mcp"}},   # two sources
        {"a2a": {"url": "http://h/a2a"}, "exports": [{"name": "x"}]},       # not skill ids
    ]
    for i, spec in enumerate(cases):
        root = tmp_path / str(i)
        root.mkdir()
        errors, _ = _codes(root, spec)
        assert "E_CONFIG_A2A" in errors, (spec, errors)
    errors, _ = _codes(tmp_path, {"a2a": {"url": "http://h/a2a", "timeoutMs": 0}})
    assert errors == ["E_CONFIG_SCHEMA_INVALID"]  # a positive integer
