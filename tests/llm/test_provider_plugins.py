"""Third-party model providers from installed distributions (entry point group
``goondan.providers``, docs/packages.md "Model providers"): validation accepts their names,
the registry builds them, a turn runs on them, doctor lists them; unknown names stay errors."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from goondan.commands.doctor import run_checks
from goondan.config import validate_bundle
from goondan.config.cache import entry_path, load_bundle_cached
from goondan.errors import BundleError, ConfigError
from goondan.llm.base import ModelSpec
from goondan.llm.registry import create_model
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.runtime_harness import BASIC

SCRIPTED = "  provider: scripted\n  model: fake\n  options:\n    script: [\"unused\"]\n"

# A provider that answers every request with the model name and the last user message.
PROVIDER_MODULE = '''
from goondan.llm.base import LanguageModel, ModelResponse


class EchoModel(LanguageModel):
    provider = "acme-echo"

    def __init__(self, spec):
        self.model = spec.model

    async def generate(self, request, *, stream=False, on_delta=None):
        last = request.messages[-1]
        parts = last.get("content") if isinstance(last.get("content"), list) else []
        texts = [p.get("text", "") for p in parts if isinstance(p, dict)]
        text = "".join(texts) or str(last.get("content"))
        return ModelResponse(text=f"{self.model} echoes {text}")


def create_model(spec, *, retry_policy=None, base_dir=None):
    return EchoModel(spec)
'''


def make_provider_dist(site: Path, dist: str = "acme-echo", version: str = "0.3.0",
                       name: str = "acme-echo", module: str = "acme_echo") -> None:
    """An installed distribution (dist-info + module) in ``site``, as pip would leave it."""
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[goondan.providers]\n{name} = {module}:create_model\n")
    (site / module).mkdir()
    (site / module / "__init__.py").write_text(PROVIDER_MODULE)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    importlib.invalidate_caches()
    yield path
    for name in [
        n for n, m in sys.modules.items() if str(getattr(m, "__file__", "")).startswith(str(path))
    ]:
        del sys.modules[name]  # the next test installs its own copy


def bundle_with_provider(tmp_path: Path, provider: str) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(BASIC, bundle, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = bundle / "goondan.yaml"
    text = manifest.read_text(encoding="utf-8")
    assert SCRIPTED in text
    manifest.write_text(
        text.replace(SCRIPTED, f"  provider: {provider}\n  model: echo-1\n"), encoding="utf-8"
    )
    return bundle


def test_an_installed_provider_validates_and_runs_a_turn(
    tmp_path: Path, site: Path, state_root: Path
) -> None:
    make_provider_dist(site)
    bundle = bundle_with_provider(tmp_path, "acme-echo")
    report = validate_bundle(bundle / "goondan.yaml")
    assert report.valid, [(d.code, d.message) for d in report.errors]

    async def main() -> Any:
        async with Runtime.from_bundle(bundle, state_root=state_root) as rt:
            instance = await rt.instance("plain")
            assert type(instance.model).__name__ == "EchoModel"
            return await rt.run_turn("plain", "hi there")

    assert run(main()).text == "echo-1 echoes hi there"


def test_an_unknown_provider_is_still_an_error_with_plugins_installed(
    tmp_path: Path, site: Path
) -> None:
    make_provider_dist(site)
    report = validate_bundle(bundle_with_provider(tmp_path, "acme-echoo") / "goondan.yaml")
    error = next(d for d in report.errors if d.code == "E_CONFIG_UNKNOWN_PROVIDER")
    assert "'acme-echoo'" in error.message and "acme-echo" in (error.suggestion or "")
    with pytest.raises(ConfigError) as info:
        create_model(ModelSpec(provider="acme-echoo", model="x"))
    assert info.value.code == "E_LLM_UNKNOWN_PROVIDER" and "acme-echo" in (
        info.value.suggestion or ""
    )


def test_a_built_in_name_wins_over_an_installed_one(site: Path) -> None:
    make_provider_dist(site, name="scripted")
    model = create_model(ModelSpec(provider="scripted", model="s", options={"script": ["x"]}))
    assert type(model).__name__ == "ScriptedModel"


def test_a_provider_whose_factory_cannot_be_imported_is_a_config_error(site: Path) -> None:
    make_provider_dist(site)
    (site / "acme_echo" / "__init__.py").write_text(
        "raise ImportError('no wheel for this platform')\n"
    )
    with pytest.raises(ConfigError) as info:
        create_model(ModelSpec(provider="acme-echo", model="x", name="m"))
    err = info.value
    assert err.code == "E_LLM_PROVIDER_LOAD"
    assert "acme-echo==0.3.0" in err.message and "no wheel for this platform" in err.message


def test_doctor_lists_installed_providers_and_warns_on_a_conflict(
    tmp_path: Path, site: Path
) -> None:
    make_provider_dist(site)
    checks = {(c.category, c.name): c for c in run_checks(tmp_path / "none", tmp_path / "state")}
    check = checks[("Goondan", "provider acme-echo")]
    assert check.status == "ok" and "acme-echo==0.3.0" in check.detail
    make_provider_dist(site, dist="other-echo", module="other_echo")
    importlib.invalidate_caches()
    checks = {(c.category, c.name): c for c in run_checks(tmp_path / "none", tmp_path / "state")}
    check = checks[("Goondan", "provider acme-echo")]
    assert check.status == "warn" and "other-echo==0.3.0" in check.detail


def test_a_cached_bundle_notices_that_its_provider_was_uninstalled(
    tmp_path: Path, site: Path, state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOONDAN_NO_CACHE", raising=False)
    make_provider_dist(site)
    bundle = bundle_with_provider(tmp_path, "acme-echo")
    env = dict(os.environ)
    assert load_bundle_cached(bundle, state_root=state_root, env=env).of_kind("Model")
    assert entry_path(bundle, state_root, env).is_file()  # the next load may be served from it
    shutil.rmtree(site / "acme_echo-0.3.0.dist-info")  # pip uninstall
    importlib.invalidate_caches()
    with pytest.raises(BundleError) as info:
        load_bundle_cached(bundle, state_root=state_root, env=env)
    assert [d.code for d in info.value.errors] == ["E_CONFIG_UNKNOWN_PROVIDER"]


PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "acme-echo"
version = "0.3.0"

[project.entry-points."goondan.providers"]
acme-echo = "acme_echo:create_model"

[tool.setuptools]
packages = ["acme_echo"]
"""

ECHO_BUNDLE = """apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: acme-echo, model: echo-2}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  prompt: {system: You echo.}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/a, agents: [Agent/a]}
"""


@pytest.mark.slow
@pytest.mark.e2e
def test_a_provider_wheel_installed_with_pip_validates_and_answers_in_the_cli(
    tmp_path: Path,
) -> None:
    """Acceptance: a wheel built with setuptools, pip-installed into a fresh venv: `goondan
    validate` accepts `provider: acme-echo`, the agent process builds it and the turn answers;
    the checkout's own environment, without the wheel, still reports the unknown provider."""
    pytest.importorskip("setuptools")
    project = tmp_path / "acme-echo"
    (project / "acme_echo").mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "acme_echo" / "__init__.py").write_text(PROVIDER_MODULE)
    pip = ["-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(wheels),
            str(project),
        ],
        check=True,
        timeout=120,
    )
    # A fresh venv that sees this checkout's environment (goondan, pip) through a .pth file.
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = str(venv / "bin" / "python")
    paths = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(
        subprocess.run(
            [python, "-c", paths], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    dev_site = subprocess.run([sys.executable, "-c", paths], capture_output=True, text=True,
                              check=True).stdout.strip()
    (site / "_goondan_dev.pth").write_text(f"import site; site.addsitedir({dev_site!r})\n")
    subprocess.run([python, *pip, "install", "--no-index", f"--find-links={wheels}", "acme-echo"],
                   check=True, timeout=120)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(ECHO_BUNDLE)

    def goondan(*args: str, interpreter: str = python) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [interpreter, "-m", "goondan", *args], capture_output=True, text=True, timeout=120
        )

    checked = goondan("validate", str(bundle))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    answer = goondan(
        "repl", "--bundle", str(bundle), "--state-root", str(tmp_path / "state"), "--input", "ping"
    )
    assert answer.returncode == 0, answer.stderr
    assert "echo-2 echoes ping" in answer.stdout
    gone = goondan("validate", str(bundle), interpreter=sys.executable)
    assert gone.returncode == 4 and "E_CONFIG_UNKNOWN_PROVIDER" in gone.stdout
