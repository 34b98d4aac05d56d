"""The Ray engine is an optional extra: the core never imports Ray, and asking for the engine
without it fails with a message naming the extra (docs/scaling.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from goondan.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "delegation"


def test_import_goondan_never_imports_ray() -> None:
    code = ("import sys, goondan, goondan.cli, goondan.swarm.service, goondan.engines.ray.spawner; "
            "assert 'ray' not in sys.modules, 'ray imported'")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode == 0, result.stderr


def test_require_ray_names_the_extra_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from goondan.engines.ray import require_ray

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import raises
    with pytest.raises(ConfigError) as info:
        require_ray()
    assert info.value.code == "E_ENGINE_RAY_MISSING"
    assert "pip install 'pygoondan[ray]'" in (info.value.suggestion or "")


@pytest.mark.slow
def test_run_engine_ray_without_the_extra_fails_clearly(state_root: Path) -> None:
    code = ("import sys; sys.modules['ray'] = None; from goondan.cli import main; "
            f"sys.argv = ['goondan', '--state-root', {str(state_root)!r}, 'run', '--bundle', "
            f"{str(EXAMPLE)!r}, '--engine', 'ray', '--input', 'hi']; main()")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert result.returncode != 0
    assert "E_ENGINE_RAY_MISSING" in result.stderr
    assert "pip install 'pygoondan[ray]'" in result.stderr


def test_ray_address_needs_the_ray_engine(state_root: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(state_root),
            "run",
            "--bundle",
            str(EXAMPLE),
            "--ray-address",
            "auto",
            "--input",
            "hi",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert result.returncode == 2 and "--ray-address needs --engine ray" in result.stderr
