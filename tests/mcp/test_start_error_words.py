"""Issue 32 item 6: an MCP server that fails to start shows its own error at the default
verbosity — in the error itself, not only in a log — through the real CLI (``validate
--check-mcp``, quiet too, and ``doctor``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]

BUNDLE = f"""\
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: mcp-words}}
spec: {{version: "0.1.0"}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: time}}
spec:
  mcp:
    command: ["{sys.executable}", -m, no_such_mcp_server_module]
"""


def goondan(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "goondan", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, check=False)


def test_the_servers_own_error_is_in_the_reported_failure(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(BUNDLE, encoding="utf-8")
    words = "No module named no_such_mcp_server_module"
    checked = goondan("validate", "--check-mcp", cwd=tmp_path)
    assert checked.returncode == 4
    error = next(line for line in checked.stdout.splitlines() if "error[E_MCP" in line)
    assert f"the server said: {sys.executable}: {words}" in error, checked.stdout
    quiet = goondan("-q", "validate", "--check-mcp", cwd=tmp_path)  # no log lines at all
    assert quiet.returncode == 4 and words in quiet.stdout and quiet.stderr == "", quiet.stderr
    doctor = goondan("doctor", cwd=tmp_path)
    assert doctor.returncode == 1
    assert words in next(line for line in doctor.stdout.splitlines() if "[MCP] Tool/time" in line)
    assert f"Python: {sys.version_info.major}.{sys.version_info.minor}" in doctor.stdout
    assert f"({sys.executable})" in doctor.stdout  # which interpreter goondan runs in
