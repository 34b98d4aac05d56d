"""``goondan package new|add|list|lock`` and ``goondan init -t package`` (docs/packages.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from goondan import cli
from goondan.commands.package import parse_spec, record_dependency, to_pep440

BUNDLE = """# my bundle
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: app
spec:
  version: "0.1.0"
---
# the model (this comment must survive)
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: s
  options:
    script:
      - toolCalls: [{name: greeter__hello, args: {name: Ada}}]
      - text: "RESULT {{toolResult}}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  prompt: {system: You greet people.}
  tools:
    - ref: {kind: Tool, name: greeter, package: "@acme/tools"}
  extensions:
    - ref: {kind: Extension, name: stamp, package: "@acme/tools"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/a, agents: [Agent/a]}
"""


class Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.exit_code, self.output, self.stderr = code, out + err, err


def gd(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    """Run the CLI through its error boundary (``main``), like the console script."""
    with pytest.raises(SystemExit) as info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return Result(int(info.value.code or 0), out, err)


def test_spec_parsing_and_pip_specifiers() -> None:
    assert parse_spec("@acme/tools@^1.2") == ("@acme/tools", "^1.2")
    assert parse_spec("@acme/tools") == ("@acme/tools", None)
    assert parse_spec("plain@1.0.0") == ("plain", "1.0.0")
    assert to_pep440("^1.2.0") == ">=1.2.0,<2.0.0"
    assert to_pep440("~0.3.1") == ">=0.3.1,<0.4.0"
    assert to_pep440("1.2.3") == "==1.2.3"
    assert to_pep440("1.x || 3.x") is None


def test_record_dependency_keeps_other_documents(tmp_path: Path) -> None:
    manifest = tmp_path / "goondan.yaml"
    manifest.write_text(BUNDLE)
    record_dependency(manifest, "@acme/tools", "^0.1.0")
    record_dependency(manifest, "@acme/tools", "^0.2.0")  # updated, not duplicated
    text = manifest.read_text()
    assert "# the model (this comment must survive)" in text
    docs = list(yaml.safe_load_all(text))
    assert docs[0]["spec"]["dependencies"] == [{"name": "@acme/tools", "version": "^0.2.0"}]
    assert [d["kind"] for d in docs] == ["Package", "Model", "Agent", "Swarm"]
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "goondan.yaml").write_text(BUNDLE.split("---\n", 1)[1])
    record_dependency(bare / "goondan.yaml", "x", "^1.0.0")
    first = next(yaml.safe_load_all((bare / "goondan.yaml").read_text()))
    assert first["kind"] == "Package" and first["spec"]["dependencies"] == [
        {"name": "x", "version": "^1.0.0"}
    ]


def test_init_template_package_equals_package_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = gd(capsys, "init", str(tmp_path / "p1"), "-t", "package", "-n", "@acme/tools", "--no-git")
    assert out.exit_code == 0, out.output
    out = gd(capsys, "package", "new", str(tmp_path / "p2"), "-n", "@acme/tools")
    assert out.exit_code == 0, out.output
    for root in (tmp_path / "p1", tmp_path / "p2"):
        project = tomllib.loads((root / "pyproject.toml").read_text())
        assert project["project"]["name"] == "goondan-acme-tools"
        assert project["project"]["entry-points"]["goondan.packages"] == {
            "@acme/tools": "goondan_acme_tools"
        }
        assert (root / "goondan_acme_tools" / "goondan.yaml").is_file()
    again = gd(capsys, "package", "new", str(tmp_path / "p2"), "-n", "@acme/tools")
    assert again.exit_code == 3 and "E_INIT_EXISTS" in again.output
    bad = gd(capsys, "package", "new", str(tmp_path / "p3"), "-n", "Not Valid")
    assert bad.exit_code == 3 and "E_PACKAGE_INVALID_NAME" in bad.output


def test_add_without_install_reports_a_missing_distribution(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "goondan.yaml").write_text(BUNDLE)
    out = gd(capsys, "package", "add", "@acme/tools@^0.1", "--no-install", "-b", str(tmp_path))
    assert out.exit_code == 3
    assert "E_CONFIG_PACKAGE_NOT_INSTALLED" in out.output and "--dist" in out.output
    bad = gd(capsys, "package", "add", "@acme/tools@^x.y", "-b", str(tmp_path))
    assert bad.exit_code == 3 and "E_PACKAGE_INVALID_RANGE" in bad.output


def test_add_and_list_the_builtin_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "goondan.yaml").write_text(BUNDLE.replace(
        '    - ref: {kind: Tool, name: greeter, package: "@acme/tools"}\n', "").replace(
        '  extensions:\n    - ref: {kind: Extension, name: stamp, package: "@acme/tools"}\n', ""))
    out = gd(capsys, "package", "add", "@goondan/base@^0.0.3-alpha17", "-b", str(tmp_path))
    assert out.exit_code == 0, out.output  # built in: nothing to install, any range accepted
    listed = gd(capsys, "package", "list", "--json", "-b", str(tmp_path))
    data = json.loads(listed.output)
    row = data["dependencies"][0]
    assert (
        row["name"] == "@goondan/base"
        and row["source"] == "builtin"
        and row["requested"] == "^0.0.3-alpha17"
    )
    assert "goondan ships" in row["warnings"][0]
    assert (tmp_path / "goondan.lock.yaml").is_file()


@pytest.mark.slow
@pytest.mark.e2e
def test_a_scaffolded_package_builds_installs_and_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Acceptance: package new → pip wheel → `goondan package add` pip-installs it into a fresh
    venv → a bundle validates and runs its tool and extension (scripted model, repl --input)."""
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    assert gd(capsys, "package", "new", str(tmp_path / "pkg"), "-n", "@acme/tools").exit_code == 0
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = tmp_path / "wheels"
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                    str(wheels), str(tmp_path / "pkg")], check=True, timeout=120)
    assert next(wheels.glob("goondan_acme_tools-0.1.0-*.whl"))
    # A fresh venv that sees this checkout's environment (goondan, pip) through a .pth file, so
    # nothing is downloaded and the package lands in the new venv only.
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
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE)

    def goondan(*args: str, interpreter: str = python) -> subprocess.CompletedProcess[str]:
        return subprocess.run([interpreter, "-m", "goondan", *args], capture_output=True, text=True,
                              timeout=120)

    added = goondan("package", "add", "@acme/tools", "--dist", "goondan-acme-tools",
                    "--pip-arg=--no-index", f"--pip-arg=--find-links={wheels}", "-b", str(bundle))
    assert added.returncode == 0, added.stdout + added.stderr
    assert (site / "goondan_acme_tools" / "goondan.yaml").is_file()  # installed by pip, here
    first = next(yaml.safe_load_all((bundle / "goondan.yaml").read_text()))
    assert first["spec"]["dependencies"] == [{"name": "@acme/tools", "version": "^0.1.0"}]
    lock = yaml.safe_load((bundle / "goondan.lock.yaml").read_text())
    assert lock["packages"]["@acme/tools@0.1.0"]["distribution"] == "goondan-acme-tools"
    checked = goondan("validate", str(bundle))
    assert checked.returncode == 0, checked.stdout
    assert "Summary: errors=0, warnings=0" in checked.stdout
    listed = json.loads(goondan("package", "list", "--json", "-b", str(bundle)).stdout)
    assert listed["dependencies"][0]["path"] == str((site / "goondan_acme_tools").resolve())
    answer = goondan("repl", "--bundle", str(bundle), "--state-root", str(tmp_path / "state"),
                     "--input", "greet Ada")
    assert answer.returncode == 0, answer.stderr
    # the tool ran (greeting) and the extension's toolCall middleware stamped its output
    assert 'RESULT {"greeting": "Hello, Ada!", "stamp": "stamped by @acme/tools"}' in answer.stdout
    # the checkout's own environment is untouched, so there the same bundle names the fix
    gone = goondan("validate", str(bundle), interpreter=sys.executable)
    assert gone.returncode == 4 and "goondan package add @acme/tools" in gone.stdout
