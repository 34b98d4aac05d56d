"""docs/cli.md documents every command and option that ``goondan --help`` shows."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from goondan import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
GLOBAL = {
    "--state-root",
    "--bundle",
    "--config",
    "--json",
    "--quiet",
    "--no-color",
    "--verbose",
    "--debug",
    "--help",
}


def _help(*path: str) -> str:
    command: click.Command = cli.cli
    ctx = click.Context(cli.cli, info_name="goondan")
    for name in path:
        assert isinstance(command, click.Group)
        sub = command.get_command(ctx, name)
        assert sub is not None, name
        command, ctx = sub, click.Context(sub, info_name=name, parent=ctx)
    return command.get_help(ctx)


def _paths() -> list[tuple[str, ...]]:
    ctx = click.Context(cli.cli)
    out: list[tuple[str, ...]] = []
    for name in cli.cli.list_commands(ctx):
        command = cli.cli.get_command(ctx, name)
        if isinstance(command, click.Group):
            out.extend((name, sub) for sub in command.commands)
        else:
            out.append((name,))
    return out


def _option_names(options: str) -> set[str]:
    """The long names of the option lines (``  -f, --force`` / ``  --git / --no-git``)."""
    names: set[str] = set()
    for match in re.finditer(
        r"^  (?:-\w, )*(--[a-z][a-z-]*)(?:, (--[a-z][a-z-]*))?(?: / (--[a-z][a-z-]*))?",
        options,
        re.M,
    ):
        names.update(n for n in match.groups() if n)
    return names


def _section(path: tuple[str, ...]) -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(
        rf"^### `goondan {' '.join(path)}\b[^\n]*\n(.*?)(?=^### |\Z)", text, re.M | re.S
    )
    assert match, f"docs/cli.md has no section for goondan {' '.join(path)}"
    return match.group(1)


@pytest.mark.parametrize("path", _paths(), ids=" ".join)
def test_every_option_of_every_command_is_documented(path: tuple[str, ...]) -> None:
    section = _section(path)
    options = _help(*path).split("Options:", 1)[1]
    longs = _option_names(options)
    missing = sorted(opt for opt in longs - GLOBAL if opt not in section)
    assert not missing, f"goondan {' '.join(path)}: {missing} not in docs/cli.md"


def test_global_options_and_exit_codes_are_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    top = _help().split("Options:", 1)[1].split("Commands:", 1)[0]
    for opt in _option_names(top):
        assert f"`{opt}" in text or f", {opt}`" in text, opt
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 5 |", "| 6 |", "| 130 |"):
        assert code in text
    assert "Exit codes: 0 ok, 1 error, 2 usage, 3 config, 4 validation" in _help().replace(
        "\n  ", " "
    )
