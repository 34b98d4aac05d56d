"""Tool and Extension resource rules as ``validate_bundle`` enforces them (seed 002 §2.7, §4.3,
§5.2; seed 004 §13.5.3). The checks live in the config layer; these tests pin the seed rules
that concern tools and extensions so docs/conformance.md can cite them."""

from __future__ import annotations

from pathlib import Path

import pytest

from goondan.config import validate_bundle

BUNDLE = """apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: t}}
spec:
  entry: {entry}
  exports: {exports}
---
apiVersion: {api}
kind: Extension
metadata: {{name: e}}
spec:
  entry: ./e.py
"""


def _errors(tmp_path: Path, *, exports: str = "[{name: run}]", entry: str = "./t.py",
            api: str = "goondan.ai/v1") -> list[tuple[str, str]]:
    (tmp_path / "goondan.yaml").write_text(BUNDLE.format(exports=exports, entry=entry, api=api))
    (tmp_path / "t.py").write_text(
        "handlers = {'run': lambda ctx, i: 1, 'a__b': lambda ctx, i: 1}\n"
    )
    (tmp_path / "e.py").write_text("def register(api):\n    pass\n")
    report = validate_bundle(tmp_path, env={}, state_root=tmp_path / "state")
    return [(d.code, d.message) for d in report.errors]


def test_valid_tool_and_extension_resources(tmp_path: Path) -> None:
    """seed 002 §2.7 rules 1-4 / §4.3: a Tool with an entry and one export is valid."""
    assert _errors(tmp_path) == []


@pytest.mark.parametrize(("exports", "entry", "code", "text"), [
    ("[]", "./t.py", "E_CONFIG_SCHEMA_INVALID", "at least 1"),
    ("[{name: run}, {name: run}]", "./t.py", "E_CONFIG_SCHEMA_INVALID", "duplicate export name"),
    ("[{name: a__b}]", "./t.py", "E_CONFIG_SCHEMA_INVALID", "must not contain '__'"),
    ("[{name: run}]", "./missing.py", "E_CONFIG_ENTRY_NOT_FOUND", ""),
])
def test_tool_resource_rules(
    tmp_path: Path, exports: str, entry: str, code: str, text: str
) -> None:
    """seed 002 §2.7 rules 1, 3, 4, §2.2 rule 3 / §4.3 (MUST, MUST NOT): spec.entry must exist,
    at least one export, unique export names, no '__' inside an export name."""
    errors = _errors(tmp_path, exports=exports, entry=entry)
    assert any(c == code and text in m for c, m in errors), errors


def test_extension_api_version_is_checked_at_load(tmp_path: Path) -> None:
    """seed 004 §13.5.3 (SHOULD): apiVersion goondan.ai/v1 is checked when the bundle loads."""
    errors = _errors(tmp_path, api="goondan.ai/v2")
    assert [c for c, _ in errors] == ["E_CONFIG_UNSUPPORTED_API_VERSION"]
