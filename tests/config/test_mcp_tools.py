"""``spec.mcp`` on a Tool: schema rules, values and the AgentSpec it yields (docs/mcp.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from goondan.config import load_bundle, validate_bundle

HEAD = [
    {"apiVersion": "goondan.ai/v1", "kind": "Model", "metadata": {"name": "m"},
     "spec": {"provider": "scripted", "model": "x", "options": {"script": ["hi"]}}},
]


def _bundle(
    tmp_path: Path, tool_spec: dict[str, Any], agent_extra: dict[str, Any] | None = None
) -> Path:
    docs = [*HEAD,
            {"apiVersion": "goondan.ai/v1", "kind": "Tool", "metadata": {"name": "time"},
             "spec": tool_spec},
            {"apiVersion": "goondan.ai/v1", "kind": "Agent", "metadata": {"name": "a"},
             "spec": {"prompt": {"system": "s"}, "modelConfig": {"modelRef": "Model/m"},
                      "tools": ["Tool/time"], **(agent_extra or {})}},
            {"apiVersion": "goondan.ai/v1", "kind": "Swarm", "metadata": {"name": "default"},
             "spec": {"entryAgent": "Agent/a", "agents": ["Agent/a"]}}]
    (tmp_path / "goondan.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return tmp_path


def _codes(tmp_path: Path, tool_spec: dict[str, Any], **kw: Any) -> tuple[list[str], list[str]]:
    report = validate_bundle(_bundle(tmp_path, tool_spec, kw.get("agent")), env=kw.get("env", {}))
    return [d.code for d in report.errors], [d.code for d in report.warnings]


def test_a_valid_mcp_tool_yields_a_server_spec(tmp_path: Path) -> None:
    spec = {"mcp": {"command": ["python", "-m", "mcp_server_time"], "env": {"TZ": {"value": "UTC"}},
                    "timeoutMs": 5000}, "exports": ["get_current_time"]}
    errors, _ = _codes(tmp_path, spec, agent={"requiredTools": ["time__get_current_time"]})
    assert errors == []
    agent = load_bundle(tmp_path).agent_spec("a")
    assert agent.tools == []
    [server] = agent.mcp_servers
    assert server.name == "time" and server.command == ["python", "-m", "mcp_server_time"]
    assert server.timeout_ms == 5000 and server.exports == ["get_current_time"]
    assert server.resolve_env({}) == ({"TZ": "UTC"}, [])


def test_url_server_without_exports_accepts_any_required_tool(tmp_path: Path) -> None:
    spec = {"mcp": {"url": "http://127.0.0.1:9/mcp",
                    "headers": {"Authorization": {"valueFrom": {"env": "TIME_TOKEN"}}}}}
    errors, warnings = _codes(tmp_path, spec, agent={"requiredTools": ["time__anything"]})
    assert errors == []
    assert "W_CONFIG_ENV_UNSET" in warnings


def test_mcp_block_errors(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"mcp": {"command": ["x"]}, "entry": "./t.py", "exports": [{"name": "a"}]},
            "E_CONFIG_MCP",
        ),
        ({"exports": ["a"]}, "E_CONFIG_MCP"),
        ({"mcp": {"command": ["x"], "url": "http://h/mcp"}}, "E_CONFIG_MCP"),
        ({"mcp": {}}, "E_CONFIG_MCP"),
        ({"mcp": {"command": "python -m server"}}, "E_CONFIG_MCP"),
        ({"mcp": {"url": "ftp://h"}}, "E_CONFIG_MCP"),
        ({"mcp": {"command": ["x"], "headers": {"A": {"value": "b"}}}}, "E_CONFIG_MCP"),
        ({"mcp": {"url": "http://h/mcp", "env": {"A": {"value": "b"}}}}, "E_CONFIG_MCP"),
        ({"mcp": {"command": ["x"], "comand": 1}}, "E_CONFIG_UNKNOWN_FIELD"),
        ({"mcp": {"command": ["x"], "env": {"A": "bare"}}}, "E_CONFIG_SCHEMA_INVALID"),
        ({"mcp": {"command": ["x"]}, "exports": [{"name": "a"}]}, "E_CONFIG_MCP"),
    ]
    for i, (spec, code) in enumerate(cases):
        root = tmp_path / str(i)
        root.mkdir()
        errors, _ = _codes(root, spec)
        assert code in errors, (spec, errors)


def test_entry_tools_still_need_exports(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("handlers = {}\n", encoding="utf-8")
    errors, _ = _codes(tmp_path, {"entry": "./t.py"})
    assert "E_CONFIG_SCHEMA_INVALID" in errors


def test_entry_and_exports_errors_name_the_mcp_exception(tmp_path: Path) -> None:
    # Seed 002 §2.7.1 (entry is required) and §2.7.3 (at least one export): an MCP Tool is the
    # documented exception to both (docs/tools.md), and the errors say so.
    (tmp_path / "t.py").write_text("handlers = {}\n", encoding="utf-8")
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "entry"),
        ({"exports": [{"name": "a"}]}, "entry"),
        ({"entry": "./t.py"}, "exports"),
        ({"entry": "./t.py", "exports": []}, "exports"),
        ({"mcp": {"command": ["x"]}, "exports": []}, "exports"),
    ]
    for spec, field in cases:
        report = validate_bundle(_bundle(tmp_path, spec), env={})
        [error] = [d for d in report.errors if field in d.message]
        text = f"{error.message} {error.suggestion}"
        assert "mcp" in text, (spec, text)
        if field == "exports":
            assert "omit" in text or "leave" in text, (spec, text)
