"""The CLI run in this process through its error boundary (:func:`goondan.cli.main`), as the
console script runs it: one command's exit code, stdout and stderr."""

from __future__ import annotations

import pytest

from goondan import cli

__all__ = ["run"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``goondan ARGS…``: ``(exit code, stdout, stderr)``."""
    with pytest.raises(SystemExit) as info:
        cli.main(list(args))
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err
