"""Hostile inputs for ``goondan validate`` / ``doctor``: special files, odd YAML, long paths.

Each test replays a reproduction from the hardening audit and asserts the documented outcome
(docs/configuration.md "Files goondan reads", docs/cli.md). Commands run in a subprocess with a
hard failure-only deadline, so a regression to "hangs" fails instead of blocking the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from goondan.cli import cli
from goondan.config.sourcefile import FileTooLargeError, NotRegularFileError, read_regular_file

MODEL = """apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: m
spec:
  provider: openai
  model: {model}
"""


def _validate_json(
    bundle: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """Run ``goondan validate --format json`` in a subprocess (deadline 60 s, failure only)."""
    proc = subprocess.run(
        [sys.executable, "-m", "goondan", *extra, "validate", "--format", "json", str(bundle)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:  # pragma: no cover - the failure this module guards against
        pytest.fail(f"stdout is not JSON: {proc.stdout!r} / stderr {proc.stderr!r}")
    return proc.returncode, data


def _codes(data: dict[str, Any]) -> list[str]:
    return [d["code"] for d in data["errors"]]


def test_fifo_in_bundle_is_refused_not_waited_on(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(MODEL.format(model="gpt"))
    os.mkfifo(tmp_path / "agents.yaml")  # scanned by name; nobody ever writes to it
    code, data = _validate_json(tmp_path)
    assert code == 3
    assert "E_CONFIG_FILE_UNREADABLE" in _codes(data)
    assert any("FIFO" in d["message"] for d in data["errors"])


def test_fifo_entry_module_is_refused(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata:\n  name: t\nspec:\n  entry: ./t.py\n"
        "  exports:\n    - name: go\n      description: d\n      parameters: {type: object}\n")
    os.mkfifo(tmp_path / "t.py")
    code, data = _validate_json(tmp_path)
    assert code == 4
    assert "E_CONFIG_ENTRY_INVALID" in _codes(data)


def test_read_regular_file_refuses_devices_and_bounds_reads(tmp_path: Path) -> None:
    with pytest.raises(NotRegularFileError) as info:
        read_regular_file(Path("/dev/zero"), limit=1024)
    assert info.value.what == "a device"
    with pytest.raises(NotRegularFileError):
        read_regular_file(tmp_path, limit=1024)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(FileTooLargeError):
        read_regular_file(big, limit=1024)
    assert read_regular_file(big, limit=2048) == b"x" * 2048


@pytest.mark.parametrize(("model", "needle"), [
    ('!!int "x"', "not a valid YAML int"),
    ('!!float "nope"', "not a valid YAML float"),
    ('!!bool "perhaps"', "not a valid YAML bool"),
    ("9" * 5000, "5000 digits"),
])
def test_odd_scalars_are_parse_diagnostics(tmp_path: Path, model: str, needle: str) -> None:
    (tmp_path / "goondan.yaml").write_text(MODEL.format(model=model))
    code, data = _validate_json(tmp_path)
    assert code == 3
    assert _codes(data) == ["E_CONFIG_PARSE_ERROR"]
    assert needle in data["errors"][0]["message"]


def test_300_character_names_and_paths(tmp_path: Path) -> None:
    long = "a" * 300
    (tmp_path / "goondan.yaml").write_text(
        f"apiVersion: goondan.ai/v1\nkind: Tool\nmetadata:\n  name: {long}\nspec:\n"
        f"  entry: ./{long}/{long}.py\n  exports:\n    - name: go\n      description: d\n"
        "      parameters: {type: object}\n"
        f"---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: {long}\nspec:\n"
        f"  modelConfig: {{modelRef: Model/m}}\n  prompts: {{systemRef: ./{long}.md}}\n")
    code, data = _validate_json(tmp_path)
    assert code == 4
    codes = _codes(data)
    assert "E_CONFIG_ENTRY_NOT_FOUND" in codes and "E_CONFIG_PROMPT_NOT_FOUND" in codes


def test_config_toml_directory_is_a_diagnostic(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".goondan" / "config.toml").mkdir(parents=True)
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: p\nspec:\n"
        "  dependencies:\n    - name: '@goondan/base'\n      version: 0.1.0\n")
    env = {"HOME": str(home), "GOONDAN_STATE_ROOT": ""}
    code, data = _validate_json(bundle, env=env)
    assert code == 4
    assert "E_WORKSPACE_CONFIG" in _codes(data)


def test_json_stays_json_when_validation_itself_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import goondan.commands.validate as command

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(command, "validate_bundle", boom)
    result = CliRunner().invoke(cli, ["validate", "--format", "json", "."])
    data = json.loads(result.output)
    assert result.exit_code == 1
    assert data["valid"] is False and data["errors"][0]["code"] == "E_INTERNAL"


@pytest.mark.parametrize("content", [None, "stateRoot = = 1\n"])
def test_doctor_notices_a_broken_config_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             content: str | None) -> None:
    config = tmp_path / ".goondan" / "config.toml"
    if content is None:
        config.mkdir(parents=True)
    else:
        config.parent.mkdir(parents=True)
        config.write_text(content)
    monkeypatch.setenv("HOME", str(tmp_path))
    result = CliRunner().invoke(cli, ["doctor", "--bundle", str(tmp_path)])
    assert result.exit_code == 1
    line = next(line for line in result.output.splitlines() if "config.toml" in line)
    assert line.startswith("✗ [State] config.toml")
