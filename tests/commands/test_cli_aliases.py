"""cli.md: ``-c/--config PATH`` is an alias of ``--bundle`` on every command that takes a
bundle; ``run --no-install`` is accepted (a no-op); ``instance delete`` of an unknown key says
``Instance not found: KEY`` (tests/commands/test_fold_instance.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from goondan import cli
from tests.commands.test_cli_options import run

REPO = Path(__file__).resolve().parents[2]

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: alias-check}
spec: {version: "0.1.0"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: ok
  options: {loop: true, script: [answered by the scripted model]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  prompts: {systemPrompt: A.}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec: {entryAgent: Agent/a, agents: [Agent/a]}
"""


def _bundle(tmp_path: Path, text: str = BUNDLE) -> Path:
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "goondan.yaml").write_text(text, encoding="utf-8")
    return root


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(cli.cli)
    out: list[tuple[tuple[str, ...], click.Command]] = [((), cli.cli)]
    for name in cli.cli.list_commands(ctx):
        command = cli.cli.get_command(ctx, name)
        assert command is not None
        out.append(((name,), command))
        if isinstance(command, click.Group):
            out.extend(((name, sub), c) for sub, c in command.commands.items())
    return out


def test_every_option_taking_a_bundle_has_the_config_alias() -> None:
    for path, command in _commands():
        for param in command.params:
            if "--bundle" in param.opts:
                assert {"-c", "--config"} <= set(param.opts), (path, param.opts)


def test_config_selects_the_bundle_before_or_after_the_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = _bundle(tmp_path, BUNDLE.replace("entryAgent: Agent/a", "entryAgent: Agent/nobody"))
    for args in (["-c", str(broken), "validate"], ["--config", str(broken), "validate"],
                 ["validate", "--config", str(broken)], ["validate", "-c", str(broken)]):
        code, out, _ = run(capsys, *args)
        assert code == 4 and "E_CONFIG_REF_NOT_FOUND" in out, args
    code, out, _ = run(capsys, "package", "list", "-c", str(broken), "--json")
    assert code == 0 and json.loads(out)["dependencies"] == []


@pytest.mark.e2e
def test_run_accepts_no_install_as_a_no_op(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "goondan",
            "--state-root",
            str(tmp_path / "state"),
            "run",
            "--no-install",
            "--config",
            str(bundle),
            "--input",
            "hi",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "answered by the scripted model" in proc.stdout
