"""Tool export ``idempotent`` (docs/tools.md "Idempotency"): the value reaches the registered tool,
and the base tools declare the values docs/tools.md lists."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from goondan.config.bundle import ToolBinding, ToolExport
from goondan.tools.providers import EntryModuleProvider
from goondan.tools.registry import ToolRegistry, build_tool

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "goondan" / "builtin_packages" / "@goondan" / "base" / "goondan.yaml"


def _base_values() -> dict[str, bool]:
    values: dict[str, bool] = {}
    for doc in yaml.safe_load_all(BASE.read_text(encoding="utf-8")):
        if doc and doc.get("kind") == "Tool":
            for export in doc["spec"]["exports"]:
                values[f"{doc['metadata']['name']}__{export['name']}"] = export.get(
                    "idempotent", False
                )
    return values


def test_every_base_tool_export_declares_idempotent_and_the_docs_list_it() -> None:
    text = BASE.read_text(encoding="utf-8")
    values = _base_values()
    assert text.count("idempotent:") == len(values), "every base export states its value"
    assert values["file-system__read"] is True and values["bash__exec"] is False
    assert values["file-system__write"] is False and values["http-fetch__get"] is True
    docs = (REPO / "docs" / "tools.md").read_text(encoding="utf-8")
    listed = dict(re.findall(r"^\| `([a-z-]+__[a-z_]+)` \| (yes|no) \|", docs, flags=re.M))
    assert {name: value == "yes" for name, value in listed.items()} == values


def test_the_export_value_reaches_the_registered_tool(tmp_path: Path) -> None:
    entry = tmp_path / "t.py"
    entry.write_text("handlers = {'safe': print, 'risky': print}\n")
    binding = ToolBinding(
        "t", None, entry, [ToolExport("safe", idempotent=True), ToolExport("risky")]
    )
    tools = {tool.name: tool.idempotent for tool in EntryModuleProvider(binding).load()}
    assert tools == {"t__safe": True, "t__risky": False}
    assert build_tool({"name": "t__run"}, print).idempotent is False
    assert ToolRegistry().register({"name": "t__x"}, print, idempotent=True).idempotent is True
