"""Helpers shared by every subcommand: global options, colour, state-root resolution."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click

__all__ = ["GlobalOptions", "get_globals", "style", "use_color"]


@dataclass
class GlobalOptions:
    """Options given before the subcommand (``goondan --state-root X repl ...``)."""

    state_root: str | None = None
    color: bool = False
    json_errors: bool = False
    debug: bool = False
    verbose: int = 0
    quiet: bool = False

    def resolve_state_root(self, override: str | None = None) -> Path:
        """``--state-root`` (subcommand, then global) > env > config.toml > ``~/.goondan``."""
        from goondan.workspace.paths import resolve_state_root

        return resolve_state_root(override or self.state_root)


def get_globals(ctx: click.Context | None = None) -> GlobalOptions:
    """The :class:`GlobalOptions` of the running command (defaults outside the CLI)."""
    ctx = ctx or click.get_current_context(silent=True)
    while ctx is not None:
        if isinstance(ctx.obj, GlobalOptions):
            return ctx.obj
        ctx = ctx.parent
    return GlobalOptions()


def use_color(stream: IO[Any], no_color_flag: bool = False) -> bool:
    """Colour only on a TTY, and never with ``--no-color`` or ``NO_COLOR`` set."""
    if no_color_flag or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def style(text: str, enabled: bool, **kwargs: Any) -> str:
    """``click.style`` when colour is enabled, else the plain text."""
    return click.style(text, **kwargs) if enabled else text
