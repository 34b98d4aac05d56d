"""Issue 32 item 10: a distribution name we can publish. The project is the distribution
``pygoondan`` (import package and commands stay ``goondan``/``gdn``), the README says so, and
``goondan doctor`` reports another distribution named ``goondan`` in the same environment."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]


def _dist_info(site: Path, name: str, version: str, summary: str) -> None:
    """A distribution's metadata as pip leaves it in site-packages."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n",
        encoding="utf-8",
    )


def _doctor(tmp_path: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    return subprocess.run(
        [sys.executable, "-m", "goondan", "doctor", "--no-color"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )


def test_the_distribution_is_pygoondan_with_the_goondan_package_and_commands() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == "pygoondan"
    assert project["scripts"] == {"goondan": "goondan.__main__:run", "gdn": "goondan.__main__:run"}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "pip install pygoondan" in readme and "import package `goondan`" in readme


def test_doctor_reports_another_goondan_distribution(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist_info(site, "pygoondan", "0.1.0", "Declarative agent-swarm runtime: YAML bundles")
    _dist_info(site, "goondan", "0.2.0", "Goondan agent host for Python")
    done = _doctor(tmp_path, site)
    assert done.returncode == 1, done.stdout  # a failed check
    assert "✓ [Goondan] pygoondan: 0.1.0" in done.stdout
    line = next(line for line in done.stdout.splitlines() if "[Goondan] goondan:" in line)
    assert (
        line.startswith("✗") and "another distribution named 'goondan'" in line and "0.2.0" in line
    )


def test_doctor_tells_this_project_under_its_old_name_apart(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist_info(
        site, "goondan", "0.1.0", "Declarative agent-swarm runtime: YAML bundles, onion middleware"
    )
    done = _doctor(tmp_path, site)
    line = next(line for line in done.stdout.splitlines() if "[Goondan] goondan:" in line)
    assert line.startswith("⚠") and "old distribution name" in line
