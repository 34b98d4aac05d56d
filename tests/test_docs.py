"""Documentation stays in step with the code: every error code is documented, the README
shows the two set-up commands, and .ci/run runs the README's test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE_RE = re.compile(r"""["']((?:E|W)_[A-Z][A-Z0-9_]+)["']""")


def _codes_in_source() -> set[str]:
    codes: set[str] = set()
    for path in (ROOT / "goondan").rglob("*.py"):
        codes.update(CODE_RE.findall(path.read_text(encoding="utf-8")))
    return codes


def _documented_codes() -> set[str]:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    return set(re.findall(r"^###\s+`?((?:E|W)_[A-Z0-9_]+)`?", text, flags=re.M))


def test_errors_doc_is_generated_from_fragments() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_errors_doc.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_code_in_the_source_is_documented() -> None:
    missing = sorted(_codes_in_source() - _documented_codes())
    assert not missing, f"undocumented codes (add them to docs/errors.d/<area>.md): {missing}"


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    head = readme[: readme.find("\n## ")] if "\n## " in readme else readme
    assert "make demo" in head and "make test" in head
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci
