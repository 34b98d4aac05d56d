"""Goondan packages as Python distributions, version ranges, the lock file and the reference's
newer bundle forms (docs/packages.md, docs/compatibility.md)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from goondan.config import validate_bundle
from goondan.config.semver import from_python, satisfies

MODEL_AGENT_SWARM = """---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  prompt: {system: hi}
  tools:
    - ref: {kind: Tool, name: hello, package: "@acme/tools"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/a, agents: [Agent/a]}
"""

PACKAGE_MANIFEST = """apiVersion: goondan.ai/v1
kind: Package
metadata: {name: "@acme/tools"}
spec: {version: "VERSION"}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: hello}
spec:
  entry: ./hello.py
  exports: [{name: run}]
"""


def make_dist(site: Path, dist: str, version: str, name: str = "@acme/tools", *,
              module: str | None = None, manifest: bool = True) -> Path:
    """An installed distribution (dist-info + module) in ``site``, as pip would leave it."""
    module = module or dist.replace("-", "_")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[goondan.packages]\n{name} = {module}\n")
    pkg = site / module
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "hello.py").write_text("handlers = {'run': lambda ctx, input: 'hi'}\n")
    if manifest:
        (pkg / "goondan.yaml").write_text(PACKAGE_MANIFEST.replace("VERSION", version))
    return pkg


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    importlib.invalidate_caches()
    return path


def bundle(root: Path, version: str = "^1.2.0", extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: {name: app}\nspec:\n"
        f"  dependencies:\n    - {{name: \"@acme/tools\", version: \"{version}\"}}\n{extra}"
        + MODEL_AGENT_SWARM)
    return root


def codes(report: object) -> list[str]:
    return [d.code for d in report.errors + report.warnings]  # type: ignore[attr-defined]


def test_semver_ranges_and_python_versions() -> None:
    assert satisfies("1.2.5", "^1.2.0") and not satisfies("2.0.0", "^1.2.0")
    assert satisfies("0.0.3-alpha20", "^0.0.3-alpha17") and not satisfies("0.1.0", "^0.0.3-alpha17")
    assert satisfies("1.4.0", ">=1.0.0 <2.0.0 || 3.x") and satisfies(
        "3.1.0", ">=1.0.0 <2.0.0 || 3.x"
    )
    assert not satisfies("1.3.0-beta", "^1.2.0")  # pre-releases only match on their own version
    assert str(from_python("1.2")) == "1.2.0" and str(from_python("1.2.0rc1")) == "1.2.0-rc1"


def test_an_installed_distribution_provides_the_package(tmp_path: Path, site: Path) -> None:
    make_dist(site, "acme-tools", "1.2.3")
    report = validate_bundle(bundle(tmp_path / "b"))
    assert report.valid, codes(report)
    assert report.bundle is not None
    tool = report.bundle.get("Tool", "hello", package="@acme/tools")
    assert tool is not None and tool.root == (site / "acme_tools").resolve()


def test_a_version_outside_the_range_is_an_error(tmp_path: Path, site: Path) -> None:
    make_dist(site, "acme-tools", "2.0.0")
    report = validate_bundle(bundle(tmp_path / "b"))
    error = next(d for d in report.errors if d.code == "E_CONFIG_PACKAGE_VERSION")
    assert "acme-tools==2.0.0" in error.message and "pip install" in (error.suggestion or "")


def test_two_distributions_claiming_one_name_conflict(tmp_path: Path, site: Path) -> None:
    make_dist(site, "acme-tools", "1.2.3")
    make_dist(site, "other-tools", "1.2.4")
    report = validate_bundle(bundle(tmp_path / "b"))
    error = next(d for d in report.errors if d.code == "E_CONFIG_PACKAGE_CONFLICT")
    assert "acme-tools" in error.message and "other-tools" in error.message


def test_entry_point_module_without_manifest(tmp_path: Path, site: Path) -> None:
    make_dist(site, "acme-tools", "1.2.3", manifest=False)
    report = validate_bundle(bundle(tmp_path / "b"))
    error = next(d for d in report.errors if d.code == "E_CONFIG_PACKAGE_MANIFEST_MISSING")
    assert "has no goondan.yaml" in error.message and "package data" in (error.suggestion or "")


def test_not_installed_suggests_an_existing_command(tmp_path: Path, site: Path) -> None:
    report = validate_bundle(bundle(tmp_path / "b"))
    error = next(d for d in report.errors if d.code == "E_CONFIG_PACKAGE_LOCK_MISSING")
    assert "goondan package add @acme/tools@^1.2.0" in (error.suggestion or "")
    assert "package install" not in (error.suggestion or "")


def test_lock_records_hashes_and_validate_warns_on_drift(tmp_path: Path, site: Path) -> None:
    from click.testing import CliRunner

    from goondan.cli import cli

    pkg = make_dist(site, "acme-tools", "1.2.3")
    root = bundle(tmp_path / "b")
    out = CliRunner().invoke(cli, ["package", "lock", "-b", str(root)])
    assert out.exit_code == 0, out.output
    lock = yaml.safe_load((root / "goondan.lock.yaml").read_text())
    entry = lock["packages"]["@acme/tools@1.2.3"]
    assert entry["distribution"] == "acme-tools" and entry["source"] == "python"
    assert set(entry["files"]) == {"__init__.py", "goondan.yaml", "hello.py"}
    assert validate_bundle(root).warnings == []
    (pkg / "hello.py").write_text("handlers = {'run': lambda ctx, input: 'changed'}\n")
    report = validate_bundle(root)
    drift = [d for d in report.warnings if d.code == "W_CONFIG_PACKAGE_DRIFT"]
    assert len(drift) == 1 and "hello.py" in drift[0].message
    assert not validate_bundle(root, strict=True).valid


def test_reference_newer_form_validates_with_base_range_warning(tmp_path: Path) -> None:
    """Package → @goondan/base ^0.0.3-…, Agent prompt.system, the reference's lock pinning base."""
    root = tmp_path / "ref"
    root.mkdir()
    (root / "goondan.yaml").write_text("""apiVersion: goondan.ai/v1
kind: Package
metadata: {name: "@samples/smoke-test"}
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "^0.0.3-alpha17"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: default-model}
spec: {provider: anthropic, model: claude-sonnet-4-5, apiKey: {valueFrom: {env: ANTHROPIC_API_KEY}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: assistant}
spec:
  modelConfig: {modelRef: "Model/default-model"}
  prompt:
    system: "You are a helpful assistant."
  tools:
    - ref: {kind: Tool, name: wait, package: "@goondan/base"}
    - ref: {kind: Tool, name: self-restart, package: "@goondan/base"}
  extensions:
    - ref: {kind: Extension, name: context-message, package: "@goondan/base"}
      config: {includeAgentPrompt: true, includeSwarmCatalog: true}
    - ref: {kind: Extension, name: required-tools-guard, package: "@goondan/base"}
    - ref: {kind: Extension, name: inter-agent-response-format, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: smoke}
spec:
  entryAgent: "Agent/assistant"
  agents: [{ref: "Agent/assistant"}]
  policy: {maxStepsPerTurn: 4}
""")
    (root / "goondan.lock.yaml").write_text("""lockfileVersion: 1
packages:
  "@goondan/base@0.0.3-alpha17":
    version: "0.0.3-alpha17"
    resolved: "https://goondan-registry.yechanny.workers.dev/%40goondan/base/-/base-0.0.3-alpha17.tgz"
    integrity: >-
      sha512-T3O2RZMIbHzFzmxPqGPtj2K6ZLBmzmSAnJF3X2zLyFXj2gXoDfFF/u8sv9VyULh2wqUz5RRRXWnTBFvDToKCvg==
    dependencies: {}
""")
    report = validate_bundle(root, env={"ANTHROPIC_API_KEY": "x"})
    assert report.valid and report.errors == [], codes(report)
    assert codes(report) == ["W_CONFIG_PACKAGE_VERSION_MISMATCH"]
    assert not validate_bundle(root, env={"ANTHROPIC_API_KEY": "x"}, strict=True).valid
    assert report.bundle is not None
    assert report.bundle.agent_spec("assistant").system_prompt == "You are a helpful assistant."


def test_prompt_and_prompts(tmp_path: Path) -> None:
    def agent(prompt: str) -> Path:
        root = tmp_path / str(abs(hash(prompt)))
        root.mkdir()
        (root / "p.md").write_text("from file")
        (root / "goondan.yaml").write_text(
            "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: {name: app}\n---\n"
            + MODEL_AGENT_SWARM.split("---\n", 1)[1]
            .replace("  prompt: {system: hi}\n", prompt)
            .replace('  tools:\n    - ref: {kind: Tool, name: hello, package: "@acme/tools"}\n', "")
        )
        return root

    both = validate_bundle(agent("  prompt: {system: a}\n  prompts: {systemPrompt: b}\n"))
    assert [d.code for d in both.errors] == ["E_CONFIG_SCHEMA_INVALID"]
    assert "both prompt and prompts" in both.errors[0].message
    exclusive = validate_bundle(agent("  prompt: {system: a, systemRef: ./p.md}\n"))
    assert [d.code for d in exclusive.errors] == ["E_CONFIG_SCHEMA_INVALID"]
    ref = validate_bundle(agent("  prompt: {systemRef: ./p.md}\n"))
    assert ref.bundle is not None and ref.bundle.agent_spec("a").system_prompt == "from file"
    missing = validate_bundle(agent("  prompt: {systemRef: ./nope.md}\n"))
    assert [d.code for d in missing.errors] == ["E_CONFIG_PROMPT_NOT_FOUND"]
    assert missing.errors[0].field == "spec.prompt.systemRef"
    old = validate_bundle(agent("  prompts: {systemPrompt: a, systemRef: ./p.md}\n"))
    assert old.bundle is not None and old.bundle.agent_spec("a").system_prompt == "a\n\nfrom file"
    none = validate_bundle(agent(""))
    assert none.valid and [d.code for d in none.warnings] == ["W_CONFIG_NO_PROMPT"]
    assert none.bundle is not None and none.bundle.agent_spec("a").system_prompt == ""


BASE_MANIFEST = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "goondan.yaml"
)
HAS_CLI_CONNECTOR = any(
    isinstance(d, dict)
    and d.get("kind") == "Connector"
    and d.get("metadata", {}).get("name") == "cli"
    for d in yaml.safe_load_all(BASE_MANIFEST.read_text())
)


@pytest.mark.skipif(
    not HAS_CLI_CONNECTOR, reason="the base `cli` Connector is added by the connectors work"
)
def test_reference_smoke_test_sample_validates_with_its_cli_connection(tmp_path: Path) -> None:
    """The reference's samples/smoke-test as it is: Package → base ^0.0.3-alpha17, prompt.system,
    a Connection on the base `cli` connector."""
    root = tmp_path / "smoke-test"
    root.mkdir()
    (root / "goondan.yaml").write_text("""apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: "@samples/smoke-test"
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "^0.0.3-alpha17"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: default-model
spec:
  provider: anthropic
  model: claude-sonnet-4-5
  apiKey:
    valueFrom:
      env: ANTHROPIC_API_KEY
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: assistant
spec:
  modelConfig:
    modelRef: "Model/default-model"
  prompt:
    system: "You are a helpful assistant. Reply concisely in one sentence."
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: smoke
spec:
  entryAgent: "Agent/assistant"
  agents:
    - ref: "Agent/assistant"
  policy:
    maxStepsPerTurn: 4
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: cli-to-smoke
spec:
  connectorRef:
    kind: Connector
    name: cli
    package: "@goondan/base"
  swarmRef: "Swarm/smoke"
  ingress:
    rules:
      - match:
          event: stdin_message
        route:
          instanceKey: "smoke-test"
""")
    report = validate_bundle(root, env={"ANTHROPIC_API_KEY": "x"})
    assert report.errors == [], codes(report)
    assert codes(report) == ["W_CONFIG_PACKAGE_VERSION_MISMATCH"]


def test_tutorial_shapes_get_a_suggestion_naming_the_right_form(tmp_path: Path) -> None:
    root = tmp_path / "tutorial"
    root.mkdir()
    (root / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: {name: app}\n---\n"
        + MODEL_AGENT_SWARM.split("---\n", 1)[1]
        .replace("  prompt: {system: hi}\n", "  system: hi\n")
        .replace('    - ref: {kind: Tool, name: hello, package: "@acme/tools"}\n',
                 '    - ref: "Tool/hello"\n      package: "@acme/tools"\n'))
    report = validate_bundle(root)
    hints = {
        d.field: d.suggestion or "" for d in report.errors if d.code == "E_CONFIG_UNKNOWN_FIELD"
    }
    assert "prompt: {system:" in hints["spec.system"]
    assert "ref: {kind: Tool" in hints["spec.tools[0].package"]


def test_doctor_lists_installed_packages_and_conflicts(tmp_path: Path, site: Path) -> None:
    from goondan.commands.doctor import run_checks

    make_dist(site, "acme-tools", "1.2.3")
    rows = [c for c in run_checks(tmp_path, tmp_path / "state") if c.name == "@acme/tools"]
    assert [(r.status, r.detail) for r in rows] == [("ok", "acme-tools==1.2.3 (module acme_tools)")]
    make_dist(site, "other-tools", "1.0.0")
    rows = [c for c in run_checks(tmp_path, tmp_path / "state") if c.name == "@acme/tools"]
    assert rows[0].status == "warn" and "other-tools" in rows[0].detail
