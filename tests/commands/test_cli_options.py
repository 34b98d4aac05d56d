"""One consistent CLI: every global option is accepted before and after every subcommand."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from goondan import cli
from tests.support.cli_main import run

# option -> the arguments that give it (a value where it takes one)
GLOBALS = {
    "--state-root": ["--state-root", "{tmp}"],
    "--bundle": ["--bundle", "{tmp}"],
    "-c": ["-c", "{tmp}"],
    "--config": ["--config", "{tmp}"],
    "--json": ["--json"],
    "-q": ["-q"],
    "--no-color": ["--no-color"],
}


def _command_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    ctx = click.Context(cli.cli)
    for name in cli.cli.list_commands(ctx):
        command = cli.cli.get_command(ctx, name)
        assert command is not None
        paths.append((name,))
        if isinstance(command, click.Group):
            paths.extend((name, sub) for sub in command.commands)
    return paths


@pytest.mark.parametrize("option", sorted(GLOBALS))
@pytest.mark.parametrize("path", _command_paths(), ids=" ".join)
def test_global_option_accepted_before_and_after_the_subcommand(
    path: tuple[str, ...], option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = [a.format(tmp=tmp_path) for a in GLOBALS[option]]
    code, _, err = run(capsys, *given, *path, "--help")
    assert code == 0, err
    code, _, err = run(capsys, *path, *given, "--help")
    assert code == 0, err


def test_command_table_includes_the_service_commands() -> None:
    names = {p[0] for p in _command_paths()}
    assert {"run", "send", "status", "stop", "restart", "logs", "completion"} <= names
    assert ("instance", "restart") in _command_paths()


def test_state_root_after_the_subcommand_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other-root"
    code, out, _ = run(capsys, "status", "--all", "--state-root", str(other), "--json")
    assert code == 0 and json.loads(out) == {"swarms": []}
    code, _, err = run(capsys, "logs", "--state-root", str(other))
    assert code == 3 and "[E_RUN_NOT_RUNNING]" in err


def test_json_before_or_after_instance_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "instance", "list", "--state-root", str(tmp_path), "--json")
    assert code == 0 and json.loads(out)["instances"] == []
    code, out, _ = run(capsys, "--json", "instance", "list", "--state-root", str(tmp_path))
    assert code == 0 and json.loads(out)["instances"] == []


# "goondan needs …" in messages is not a command
PROSE = {"needs", "never", "runs", "loads", "addition", "itself", "masks"}


def test_messages_and_docs_name_only_commands_that_exist() -> None:
    """Every quoted ``goondan CMD [SUB]`` in the source and the docs is a real command."""
    import re

    root = Path(cli.__file__).resolve().parent
    ctx = click.Context(cli.cli)
    commands = {name: cli.cli.get_command(ctx, name) for name in cli.cli.list_commands(ctx)}
    pattern = re.compile(r"[\"'`(]goondan ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")
    files = [*root.rglob("*.py"), *(root.parent / "docs").rglob("*.md"), root.parent / "README.md"]
    wrong: list[str] = []
    for path in files:
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            name, sub = match.group(1), match.group(2)
            if name in PROSE:
                continue
            command = commands.get(name)
            if command is None:
                wrong.append(f"{path.name}: goondan {name}")
            elif isinstance(command, click.Group) and sub and sub not in command.commands:
                wrong.append(f"{path.name}: goondan {name} {sub}")
    assert not wrong, wrong


def test_repl_refuses_a_path_given_as_the_agent_name(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(Path(cli.__file__).resolve().parents[1] / "examples" / "delegation")
    code, _, err = run(capsys, "repl", example)
    assert code == 2 and "looks like a path" in err and f"goondan repl --bundle {example}" in err


def test_completion_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    for shell, marker in (
        ("bash", "complete -o"),
        ("zsh", "compdef"),
        ("fish", "complete --no-files"),
    ):
        code, out, _ = run(capsys, "completion", shell)
        assert code == 0 and marker in out and "_GOONDAN_COMPLETE" in out
