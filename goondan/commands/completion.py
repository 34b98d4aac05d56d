"""``goondan completion bash|zsh|fish``: print the shell completion script (click's).

The script completes both names, ``goondan`` and ``gdn``. Install it once, e.g.
``goondan completion bash >> ~/.bashrc`` or ``goondan completion fish >
~/.config/fish/completions/goondan.fish`` (docs/cli.md).
"""

from __future__ import annotations

import click

__all__ = ["completion"]


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> int:
    """Print the completion script for SHELL (add it to your shell's startup file)."""
    from click.shell_completion import get_completion_class

    from goondan.cli import cli

    cls = get_completion_class(shell)
    assert cls is not None  # every Choice above is one of click's built-in shells
    source = cls(cli, {}, "goondan", "_GOONDAN_COMPLETE").source()
    if shell == "zsh":  # its registrations name every command: add gdn to them
        source = source.replace("#compdef goondan", "#compdef goondan gdn")
        source = source.replace(
            "compdef _goondan_completion goondan", "compdef _goondan_completion goondan gdn"
        )
    else:
        source = source.rstrip("\n") + "\n" + _ALIAS[shell] + "\n"
    click.echo(source, nl=False)
    return 0


# ``gdn`` is the same program: the same completion function serves it (the function runs the
# command being completed, or ``goondan``, with _GOONDAN_COMPLETE set; both names read it).
_ALIAS = {
    "bash": "complete -o nosort -F _goondan_completion gdn",
    "fish": 'complete --no-files --command gdn --arguments "(_goondan_completion)";',
}
