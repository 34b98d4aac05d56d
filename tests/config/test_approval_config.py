"""``approval`` / ``approvalTimeoutMs`` on a Tool export and on an Agent's Tool reference
(docs/approvals.md "Declaring it"): accepted by the validator, carried into the AgentSpec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from goondan.config import load_bundle, validate_bundle
from goondan.runtime.approvals import approval_rules

HEAD = [
    {"apiVersion": "goondan.ai/v1", "kind": "Model", "metadata": {"name": "m"},
     "spec": {"provider": "scripted", "model": "x", "options": {"script": ["hi"]}}},
]


def _bundle(tmp_path: Path, exports: list[dict[str, Any]], tool_ref: Any = "Tool/shell",
            mcp_ref: Any = None) -> Path:
    tools: list[Any] = [tool_ref]
    docs: list[dict[str, Any]] = [*HEAD,
            {"apiVersion": "goondan.ai/v1", "kind": "Tool", "metadata": {"name": "shell"},
             "spec": {"entry": "./tool.py", "exports": exports}}]
    if mcp_ref is not None:
        tools.append(mcp_ref)
        docs.append({"apiVersion": "goondan.ai/v1", "kind": "Tool", "metadata": {"name": "time"},
                     "spec": {"mcp": {"command": ["python", "-m", "mcp_server_time"]}}})
    docs += [
        {
            "apiVersion": "goondan.ai/v1",
            "kind": "Agent",
            "metadata": {"name": "a"},
            "spec": {
                "prompt": {"system": "s"},
                "modelConfig": {"modelRef": "Model/m"},
                "tools": tools,
            },
        },
        {
            "apiVersion": "goondan.ai/v1",
            "kind": "Swarm",
            "metadata": {"name": "default"},
            "spec": {"entryAgent": "Agent/a", "agents": ["Agent/a"]},
        },
    ]
    (tmp_path / "goondan.yaml").write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    (tmp_path / "tool.py").write_text(
        "handlers = {'exec': lambda c, i: 1, 'read': lambda c, i: 2}\n"
    )
    return tmp_path


def _errors(root: Path) -> list[tuple[str, str]]:
    report = validate_bundle(root, env={})
    return [(d.code, d.message) for d in report.errors]


EXPORTS = [{"name": "exec", "approval": "required", "approvalTimeoutMs": 60000}, {"name": "read"}]


def test_export_approval_is_accepted_and_carried_into_the_rules(tmp_path: Path) -> None:
    root = _bundle(tmp_path, EXPORTS)
    assert _errors(root) == []
    agent = load_bundle(root).agent_spec("a")
    rules = approval_rules(agent)
    assert rules.rule("shell__exec") is not None
    assert rules.rule("shell__exec").timeout_ms == 60000  # type: ignore[union-attr]
    assert rules.rule("shell__read") is None  # default: never


def test_agent_reference_overrides_every_export(tmp_path: Path) -> None:
    root = _bundle(tmp_path, EXPORTS, tool_ref={"ref": "Tool/shell", "approval": "never"})
    assert _errors(root) == []
    assert approval_rules(load_bundle(root).agent_spec("a")).rule("shell__exec") is None
    root2 = _bundle(tmp_path, EXPORTS, tool_ref={"ref": "Tool/shell", "approval": "required",
                                                 "approvalTimeoutMs": 5000})
    rules = approval_rules(load_bundle(root2).agent_spec("a"))
    assert rules.rule("shell__read") is not None and rules.rule("shell__read").timeout_ms == 5000  # type: ignore[union-attr]
    assert rules.rule("shell__exec").timeout_ms == 5000  # type: ignore[union-attr]


def test_mcp_tools_take_the_agent_reference_approval(tmp_path: Path) -> None:
    root = _bundle(
        tmp_path, [{"name": "read"}], mcp_ref={"ref": "Tool/time", "approval": "required"}
    )
    assert _errors(root) == []
    rules = approval_rules(load_bundle(root).agent_spec("a"))
    assert rules.rule("time__get_current_time") is not None
    assert rules.rule("shell__read") is None


def test_bad_approval_values_are_validation_errors(tmp_path: Path) -> None:
    root = _bundle(tmp_path, [{"name": "exec", "approval": "always", "approvalTimeoutMs": -1}])
    messages = " ".join(m for _, m in _errors(root))
    assert "always" in messages and "approvalTimeoutMs" in messages
    root2 = _bundle(tmp_path, [{"name": "exec"}], tool_ref={"ref": "Tool/shell", "approval": "yes",
                                                            "approvalTimeout": 5})
    errors = _errors(root2)
    assert any("approval must be 'required' or 'never'" in m for _, m in errors)
    assert any(code == "E_CONFIG_UNKNOWN_FIELD" for code, _ in errors)


def test_extension_references_do_not_take_approval(tmp_path: Path) -> None:
    root = _bundle(tmp_path, [{"name": "exec"}])
    text = (root / "goondan.yaml").read_text()
    docs = list(yaml.safe_load_all(text))
    docs.append({"apiVersion": "goondan.ai/v1", "kind": "Extension", "metadata": {"name": "e"},
                 "spec": {"entry": "./tool.py"}})
    docs[2]["spec"]["extensions"] = [{"ref": "Extension/e", "approval": "required"}]
    (root / "goondan.yaml").write_text(yaml.safe_dump_all(docs))
    assert any(code == "E_CONFIG_UNKNOWN_FIELD" for code, _ in _errors(root))
