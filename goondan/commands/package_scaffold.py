"""``goondan package new`` / ``goondan init -t package``: a Goondan package as a Python project.

The project builds a wheel (``pip wheel .``) whose module holds ``goondan.yaml`` and the entry
files, and declares the ``goondan.packages`` entry point that makes the package visible to
goondan once installed (docs/packages.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from goondan.errors import ConfigError

__all__ = ["default_distribution", "module_name", "scaffold_package"]

_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$")


def default_distribution(package: str) -> str:
    """The PyPI name goondan suggests for a package: ``@acme/tools`` → ``goondan-acme-tools``."""
    slug = re.sub(r"[^a-z0-9]+", "-", package.lower().lstrip("@")).strip("-")
    return f"goondan-{slug}"


def module_name(package: str) -> str:
    """The import name of the package's module: ``@acme/tools`` → ``goondan_acme_tools``."""
    return default_distribution(package).replace("-", "_")


_PACKAGE_INIT = '"""Goondan package {name} (resources in goondan.yaml)."""\n'
_PYPROJECT = """\
# A Goondan package built as a Python wheel (docs/packages.md in goondan).
#   build:    pip wheel --no-deps -w dist .      (or: python -m build)
#   publish:  twine upload dist/*
#   use:      pip install {dist}  (then list "{name}" in a bundle's Package dependencies)
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "{version}"          # keep equal to spec.version in {module}/goondan.yaml
description = "{name}: a Goondan package"
readme = "README.md"
requires-python = ">=3.11"
dependencies = []

# The entry point goondan looks for: package name = module holding goondan.yaml.
[project.entry-points."goondan.packages"]
"{name}" = "{module}"

[tool.setuptools]
packages = ["{module}", "{module}.tools", "{module}.extensions"]

[tool.setuptools.package-data]
{module} = ["goondan.yaml", "*.md"]
"""

_MANIFEST = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: "{name}"
spec:
  version: "{version}"
  description: "{name}: a Goondan package"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: greeter
spec:
  entry: ./tools/greeter.py
  exports:
    - name: hello
      description: Greet someone by name. Returns {{greeting}}.
      parameters:
        type: object
        properties:
          name: {{type: string, description: Who to greet.}}
        required: [name]
---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: stamp
spec:
  entry: ./extensions/stamp.py
  config:
    stamp: "stamped by {name}"
"""

_TOOL = '''\
"""Tool ``greeter`` of {name}: ``hello`` returns a greeting."""

from __future__ import annotations

from typing import Any


async def hello(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """``{{name}}`` → ``{{greeting}}``."""
    who = input.get("name")
    if not isinstance(who, str) or not who.strip():
        raise ValueError("'name' must be a non-empty string")
    return {{"greeting": f"Hello, {{who.strip()}}!"}}


handlers = {{"hello": hello}}
'''

_EXTENSION = '''\
"""Extension ``stamp`` of {name}: adds ``stamp`` (config) to every successful tool output."""

from __future__ import annotations

import dataclasses
from typing import Any


def register(api: Any) -> None:
    """Install a toolCall middleware."""
    stamp = str(api.config.get("stamp", "stamped"))

    async def add_stamp(ctx: Any) -> Any:
        result = await ctx.next()
        if result.ok and isinstance(result.output, dict):
            result = dataclasses.replace(result, output={{**result.output, "stamp": stamp}})
        return result

    api.pipeline.register("toolCall", add_stamp)
'''

_README = """\
# {name}

A Goondan package, distributed as the Python distribution `{dist}`.

Build a wheel and publish it:

    pip wheel --no-deps -w dist .
    twine upload dist/*

Use it in a bundle:

    goondan package add {name} --dist {dist}

or `pip install {dist}` and list it in the bundle's Package document:

    spec:
      dependencies:
        - {{name: "{name}", version: "^{version}"}}

Its resources: Tool `greeter` (export `hello`) and Extension `stamp`; reference them with
`{{kind: Tool, name: greeter, package: "{name}"}}`.
"""

_GITIGNORE = "dist/\nbuild/\n*.egg-info/\n__pycache__/\n"


def scaffold_package(
    path: Path, *, name: str, version: str = "0.1.0", force: bool = False
) -> list[Path]:
    """Write a package project for ``name`` (``pkg`` or ``@scope/pkg``) into ``path``."""
    if not _NAME.match(name):
        raise ConfigError(
            f"invalid package name {name!r}",
            code="E_PACKAGE_INVALID_NAME",
            suggestion="use lower-case 'name' or '@scope/name' (letters, digits, '-', '.', '_')",
        )
    pyproject = path / "pyproject.toml"
    if pyproject.exists() and not force:
        raise ConfigError(f"{pyproject} already exists", code="E_INIT_EXISTS",
                          suggestion="use --force to overwrite, or choose another directory")
    dist, module = default_distribution(name), module_name(name)
    values = {"name": name, "dist": dist, "module": module, "version": version}
    files = {
        pyproject: _PYPROJECT,
        path / "README.md": _README,
        path / ".gitignore": _GITIGNORE,
        path / module / "__init__.py": _PACKAGE_INIT,
        path / module / "goondan.yaml": _MANIFEST,
        path / module / "tools" / "__init__.py": "",
        path / module / "tools" / "greeter.py": _TOOL,
        path / module / "extensions" / "__init__.py": "",
        path / module / "extensions" / "stamp.py": _EXTENSION,
    }
    written = []
    for file, template in files.items():
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(template.format(**values), encoding="utf-8")
        written.append(file)
    return written
