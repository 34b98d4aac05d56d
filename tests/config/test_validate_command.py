"""``goondan validate``: formats, exit codes, colour, excerpts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from goondan.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SHOWCASE = ROOT / "examples" / "showcase"
INVALID = ROOT / "tests" / "fixtures" / "config" / "invalid"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["validate", *args])
    return result.exit_code, result.output


def test_valid_bundle_text() -> None:
    code, out = run(str(SHOWCASE))
    assert code == 0
    assert "✓ schema" in out and "✓ references" in out
    assert out.rstrip().endswith("Summary: errors=0, warnings=0")


def test_invalid_bundle_text_has_excerpt_and_caret() -> None:
    code, out = run(str(INVALID / "E_CONFIG_UNKNOWN_FIELD"))
    assert code == 4
    assert "✗ schema (1 error)" in out
    assert "error[E_CONFIG_UNKNOWN_FIELD] unknown field 'tool' in spec" in out
    assert "did you mean 'tools'?" in out
    lines = out.splitlines()
    index = next(i for i, line in enumerate(lines) if "23 |   tool: []" in line)
    assert lines[index + 1].index("^") == lines[index].index("tool:")
    assert "\x1b[" not in out  # NO_COLOR is set by the test environment


@pytest.mark.parametrize("case", sorted(p.name for p in INVALID.iterdir()))
def test_json_is_valid_on_every_failure(case: str) -> None:
    code, out = run(str(INVALID / case), "--format", "json")
    data = json.loads(out)
    assert set(data) == {"valid", "errors", "warnings"}
    found = [d["code"] for d in data["errors"] + data["warnings"]]
    assert case in found
    if case.startswith("W_"):
        assert code == 0 and data["valid"] is True
    else:
        assert code in (3, 4) and data["valid"] is False


def test_json_success_and_strict() -> None:
    code, out = run(str(SHOWCASE), "--format", "json")
    assert code == 0 and json.loads(out) == {"valid": True, "errors": [], "warnings": []}
    code, out = run(str(INVALID / "W_CONFIG_NO_SWARM"), "--format", "json", "--strict")
    assert code == 4 and json.loads(out)["valid"] is False


def test_exit_3_when_unreadable() -> None:
    assert run(str(INVALID / "E_CONFIG_PARSE_ERROR"))[0] == 3
    code, out = run("/definitely/not/here", "--format", "json")
    assert code == 3 and json.loads(out)["errors"][0]["code"] == "E_CONFIG_NOT_FOUND"


def test_github_annotations() -> None:
    code, out = run(str(INVALID / "E_CONFIG_REF_NOT_FOUND"), "--format", "github")
    assert code == 4
    [line] = out.splitlines()
    assert line.startswith("::error file=")
    assert ",line=20,col=15::[E_CONFIG_REF_NOT_FOUND] Model/mm not found" in line
    assert run(str(SHOWCASE), "--format", "github") == (0, "::notice::validation passed\n")


def test_usage_error_is_exit_2() -> None:
    assert run(str(SHOWCASE), "--format", "yaml")[0] == 2


def test_whole_process(tmp_path: Path) -> None:
    """The console entry point maps the command's exit codes (no traceback)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "validate",
            str(INVALID / "E_CONFIG_TOO_DEEP"),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["errors"][0]["code"] == "E_CONFIG_TOO_DEEP"
    assert "Traceback" not in proc.stderr
