"""Throwaway click commands used to test the CLI error boundary."""

from __future__ import annotations

import click

from goondan.errors import ConfigError, LlmAuthError
from goondan.secrets import register_secret


@click.command()
@click.option("--kind", default="config")
def boom(kind: str) -> None:
    """Raise the requested kind of error."""
    if kind == "config":
        raise ConfigError("bundle not found: ./nope", code="E_CONFIG_NOT_FOUND",
                          suggestion="pass a directory holding goondan.yaml", location="./nope")
    if kind == "auth":
        register_secret("sk-test-SECRET-value-123")
        raise LlmAuthError("provider rejected key sk-test-SECRET-value-123")
    if kind == "bug":
        raise ZeroDivisionError("division by zero in a bug")
    if kind == "interrupt":
        raise KeyboardInterrupt
    click.echo("fine")
