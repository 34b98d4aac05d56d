"""``.env`` files: the project's environment for ``goondan run`` and ``goondan repl``.

Order (docs/orchestrator.md "`goondan run`"): ``--env-file`` (relative to the project root; must
exist), then ``.env.local``, then ``.env``. A key is set only when the real environment lacks it,
and earlier files win over later ones. The library API (``Runtime``) never reads these files:
embedding applications own their environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from goondan.config.sourcefile import read_regular_file
from goondan.errors import ConfigError

__all__ = ["MAX_ENV_FILE_BYTES", "load_env_files", "parse_env_file"]

MAX_ENV_FILE_BYTES = 1024 * 1024

_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def parse_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``export``, quotes, ``#`` comments); bad lines raise exit 3."""
    out: dict[str, str] = {}
    try:
        text = read_regular_file(path, limit=MAX_ENV_FILE_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read env file {path}: {exc}", code="E_RUN_ENV_FILE") from exc
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _ENV_LINE.match(line)
        if match is None:
            raise ConfigError(
                f"{path}:{number}: not a KEY=VALUE line",
                code="E_RUN_ENV_FILE",
                suggestion="use KEY=VALUE (optionally 'export "
                "KEY=VALUE'); quote values with spaces",
            )
        key, value = match.group(1), match.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            quote, value = value[0], value[1:-1]
            if quote == '"':
                value = value.replace("\\n", "\n").replace('\\"', '"')
        else:
            value = re.sub(r"\s+#.*$", "", value)
        out[key] = value
    return out


def load_env_files(
    project_root: Path, env_file: str | None, environ: MutableMapping[str, str],
    *, real_env: Mapping[str, str] | None = None,
) -> list[Path]:
    """The order of docs/orchestrator.md: ``--env-file`` (must exist), ``.env.local``, ``.env``; a
    key is set only if the real environment lacks it, earlier files win. Returns the files read."""
    real = dict(environ if real_env is None else real_env)
    files: list[Path] = []
    if env_file:
        path = Path(env_file)
        path = path if path.is_absolute() else project_root / path
        if not path.is_file():
            raise ConfigError(
                f"env file {path} does not exist",
                code="E_RUN_ENV_FILE",
                suggestion="fix --env-file (relative paths start at the bundle directory)",
            )
        files.append(path)
    files += [p for p in (project_root / ".env.local", project_root / ".env") if p.is_file()]
    merged: dict[str, str] = {}
    for path in files:
        for key, value in parse_env_file(path).items():
            merged.setdefault(key, value)
    for key, value in merged.items():
        if key not in real:
            environ[key] = value
    return files
