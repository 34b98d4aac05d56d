"""One failing bundle per diagnostic code: the code, its line and its resource are asserted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from goondan.config import validate_bundle

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "config" / "invalid"

# fixture directory (= expected code) -> (line, resource); None means "not applicable".
CASES: dict[str, tuple[int | None, str | None]] = {
    "E_CONFIG_NOT_FOUND": (None, None),
    "E_CONFIG_PARSE_ERROR": (9, None),
    "E_CONFIG_TOO_MANY_DOCUMENTS": (202, None),
    "E_CONFIG_ALIAS_LIMIT": (1, None),
    "E_CONFIG_TOO_DEEP": (1, None),
    "E_CONFIG_DUPLICATE_KEY": (13, "Model/m"),
    "E_CONFIG_UNSUPPORTED_API_VERSION": (6, "Model/m"),
    "E_CONFIG_UNKNOWN_KIND": (33, None),
    "E_CONFIG_INVALID_NAME": (35, "Model/"),
    "E_CONFIG_DUPLICATE_NAME": (35, "Model/m"),
    "E_CONFIG_PACKAGE_DOC_POSITION": (28, "Package/fixture"),
    "E_CONFIG_PACKAGE_DOC_DUPLICATED": (33, "Package/fixture"),
    "E_CONFIG_INVALID_REF": (20, "Agent/a"),
    "E_CONFIG_REF_NOT_FOUND": (20, "Agent/a"),
    "E_CONFIG_REF_AMBIGUOUS": (28, "Agent/a"),
    "E_CONFIG_SCHEMA_INVALID": (30, "Swarm/default"),
    "E_CONFIG_UNKNOWN_FIELD": (23, "Agent/a"),
    "E_CONFIG_ENTRY_NOT_FOUND": (37, "Tool/t"),
    "E_CONFIG_ENTRY_INVALID": (37, "Tool/t"),
    "E_CONFIG_PROMPT_NOT_FOUND": (22, "Agent/a"),
    "E_CONFIG_PATH_ESCAPE": (37, "Tool/t"),
    "E_CONFIG_PACKAGE_LOCK_MISSING": (7, "Package/fixture"),
    "E_CONFIG_PACKAGE_NOT_INSTALLED": (7, "Package/fixture"),
    "E_CONFIG_PACKAGE_MANIFEST_MISSING": (7, "Package/fixture"),
    "E_CONFIG_PACKAGE_CYCLE": (7, "Package/p2"),
    "E_CONFIG_UNKNOWN_PROVIDER": (11, "Model/m"),
    "E_CONFIG_CAPABILITY": (25, "Agent/a"),
    "E_CONFIG_REQUIRED_TOOL_UNKNOWN": (24, "Agent/a"),
    "E_CONFIG_NO_RESOURCES": (None, None),
    "W_CONFIG_NO_PACKAGE": (None, None),
    "W_CONFIG_NO_SWARM": (None, None),
    "W_CONFIG_NAMING_CONVENTION": (35, "Agent/Helper"),
    "W_CONFIG_SELECTOR_NO_MATCH": (25, "Agent/a"),
    "W_CONFIG_UNKNOWN_EVENT": (49, "Connection/cx"),
    "W_CONFIG_ENV_UNSET": (14, "Model/m"),
    "W_CONFIG_INLINE_SECRET": (14, "Model/m"),
    "W_CONFIG_CAPABILITY": (25, "Agent/a"),
    "W_CONFIG_REQUIRED_TOOL_UNKNOWN": (24, "Agent/a"),
}
READ_FAILURES = {
    "E_CONFIG_NOT_FOUND",
    "E_CONFIG_PARSE_ERROR",
    "E_CONFIG_TOO_MANY_DOCUMENTS",
    "E_CONFIG_ALIAS_LIMIT",
    "E_CONFIG_TOO_DEEP",
    "E_CONFIG_FILE_TOO_LARGE",
    "E_CONFIG_FILE_UNREADABLE",
}


def test_every_fixture_has_a_case() -> None:
    assert sorted(p.name for p in FIXTURES.iterdir()) == sorted(CASES)


@pytest.mark.parametrize("code", sorted(CASES))
def test_fixture_reports_code_line_and_resource(code: str, state_root: Path) -> None:
    report = validate_bundle(FIXTURES / code, env={}, state_root=state_root)
    pool = report.warnings if code.startswith("W_") else report.errors
    hits = [d for d in pool if d.code == code]
    assert hits, [d.to_dict() for d in report.errors + report.warnings]
    line, resource = CASES[code]
    assert (hits[0].line, hits[0].resource) == (line, resource)
    assert hits[0].message and hits[0].suggestion
    assert hits[0].file is not None
    if code.startswith("E_"):
        assert not report.valid
        assert report.unreadable == (code in READ_FAILURES)
        assert report.bundle is None
    else:
        assert report.valid  # warnings alone do not fail ...
        assert not validate_bundle(FIXTURES / code, env={}, strict=True).valid  # ... unless strict


def _minimal(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "goondan.yaml").write_text(
        (FIXTURES / "W_CONFIG_NO_SWARM" / "goondan.yaml").read_text()
    )
    return tmp_path


def test_file_too_large(tmp_path: Path) -> None:
    bundle = _minimal(tmp_path)
    (bundle / "tools.yaml").write_text("# padding\n" * 120_000)
    report = validate_bundle(bundle, env={})
    assert [d.code for d in report.errors] == ["E_CONFIG_FILE_TOO_LARGE"]
    assert report.errors[0].file is not None and report.errors[0].file.endswith("tools.yaml")
    assert report.unreadable


def test_binary_file(tmp_path: Path) -> None:
    bundle = _minimal(tmp_path)
    (bundle / "agents.yaml").write_bytes(b"kind: Agent\x00\x01\x02")
    report = validate_bundle(bundle, env={})
    assert [d.code for d in report.errors] == ["E_CONFIG_FILE_UNREADABLE"]


def test_invalid_utf8(tmp_path: Path) -> None:
    bundle = _minimal(tmp_path)
    (bundle / "agents.yaml").write_bytes(b"kind: \xff\xfe Agent\n")
    assert [d.code for d in validate_bundle(bundle, env={}).errors] == ["E_CONFIG_FILE_UNREADABLE"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file(tmp_path: Path) -> None:
    bundle = _minimal(tmp_path)
    path = bundle / "models.yaml"
    path.write_text("apiVersion: goondan.ai/v1\n")
    path.chmod(0)
    try:
        assert [d.code for d in validate_bundle(bundle, env={}).errors] == [
            "E_CONFIG_FILE_UNREADABLE"
        ]
    finally:
        path.chmod(0o600)


def test_symlinked_yaml_outside_the_bundle(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text("apiVersion: goondan.ai/v1\n")
    bundle = _minimal(tmp_path / "bundle")
    (bundle / "models.yaml").symlink_to(outside)
    report = validate_bundle(bundle, env={})
    assert [d.code for d in report.errors] == ["E_CONFIG_PATH_ESCAPE"]


def test_symlinked_entry_outside_the_bundle(tmp_path: Path) -> None:
    (tmp_path / "evil.py").write_text("handlers = {'run': print}\n")
    bundle = _minimal(tmp_path / "b")
    (bundle / "t.py").symlink_to(tmp_path / "evil.py")
    (bundle / "tools.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: t}\n"
        "spec:\n  entry: ./t.py\n  exports: [{name: run}]\n")
    report = validate_bundle(bundle, env={})
    assert [(d.code, d.line, d.field) for d in report.errors] == [
        ("E_CONFIG_PATH_ESCAPE", 5, "spec.entry")
    ]


def test_absolute_entry_is_refused(tmp_path: Path) -> None:
    bundle = _minimal(tmp_path)
    (bundle / "tools.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: t}\n"
        "spec:\n  entry: /etc/passwd\n  exports: [{name: run}]\n")
    assert [d.code for d in validate_bundle(bundle, env={}).errors] == ["E_CONFIG_PATH_ESCAPE"]


def test_dangling_symlink_is_unreadable(tmp_path: Path) -> None:
    bundle = _minimal(tmp_path)
    (bundle / "models.yaml").symlink_to(bundle / "gone.yaml")
    assert [d.code for d in validate_bundle(bundle, env={}).errors] == ["E_CONFIG_FILE_UNREADABLE"]
