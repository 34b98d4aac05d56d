"""``goondan package``: add, list, lock and create Goondan packages (docs/packages.md).

Goondan packages are Python distributions with a ``goondan.packages`` entry point, so installing
is pip's job: ``add`` runs ``<this python> -m pip install`` in the current environment, then
records the dependency in the bundle's Package document and refreshes ``goondan.lock.yaml``.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from goondan.commands.common import bundle_option, get_globals
from goondan.commands.package_scaffold import default_distribution, scaffold_package
from goondan.commands.validate import CHECKS
from goondan.config import pydist, semver
from goondan.config.loader import LoadResult, load_resources
from goondan.config.lockfile import write_lock
from goondan.config.packages import BUILTIN_ROOT, manifest_version
from goondan.errors import ConfigError

__all__ = ["package", "parse_spec", "record_dependency", "to_pep440"]


# Diagnostics about dependencies (the "packages" group of `goondan validate`).
_PACKAGE_CODES = CHECKS["packages"] - {"W_CONFIG_NO_PACKAGE"}


def parse_spec(text: str) -> tuple[str, str | None]:
    """``NAME[@RANGE]`` → ``(name, range or None)``; a leading ``@`` is the scope."""
    at = text.rfind("@")
    if at > 0:
        return text[:at], text[at + 1:] or None
    return text, None


def to_pep440(range_text: str) -> str | None:
    """A pip version specifier for a simple npm range (``^1.2.0`` → ``>=1.2.0,<2.0.0``), else
    ``None`` (pip then installs the newest release and goondan checks the range)."""
    if not range_text.strip() or "||" in range_text:
        return None
    parsed = semver.parse_range(range_text)
    if parsed is None or len(parsed) != 1:
        return None
    out = []
    for op, bound in parsed[0]:
        if bound.pre and bound.pre != (0,):
            return None  # pre-release bounds have no faithful PEP 440 spelling here
        plain = f"{bound.major}.{bound.minor}.{bound.patch}"
        out.append(("==" if op == "=" else op) + plain)
    return ",".join(out) or None


def _manifest(bundle: Path | None) -> Path:
    from goondan.commands.common import get_globals

    # the subcommand's --bundle, else the global one (goondan --bundle DIR package …), else .
    bundle = bundle if bundle is not None else Path(get_globals().bundle or ".")
    target = bundle / "goondan.yaml" if bundle.is_dir() else bundle
    if not target.is_file():
        raise ConfigError(f"no goondan.yaml at {bundle}", code="E_CONFIG_NOT_FOUND",
                          suggestion="run it in a bundle directory or pass --bundle; "
                                     "'goondan init' creates one")
    return target


def record_dependency(manifest: Path, name: str, version: str) -> None:
    """Add or update ``{name, version}`` in the Package document (created when missing).

    Only the Package document is rewritten (its comments are not kept); the other documents
    stay byte for byte.
    """
    text = manifest.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = 1 if lines and lines[0].strip() == "---" else 0
    end = next(
        (i for i in range(start, len(lines)) if lines[i].rstrip("\r\n") == "---"), len(lines)
    )
    first = "".join(lines[start:end])
    try:
        data = yaml.safe_load(first)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{manifest} cannot be parsed: {exc}", code="E_CONFIG_PARSE_ERROR",
                          suggestion="fix the YAML ('goondan validate' shows where)") from exc
    if isinstance(data, dict) and data.get("kind") == "Package":
        raw_spec = data.get("spec")
        spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
        data["spec"] = spec
        raw_deps = spec.get("dependencies")
        deps: list[Any] = raw_deps if isinstance(raw_deps, list) else []
        for dep in deps:
            if isinstance(dep, dict) and dep.get("name") == name:
                dep.pop("path", None)
                dep["version"] = version
                break
        else:
            deps.append({"name": name, "version": version})
        spec["dependencies"] = deps
        rest = "".join(lines[end:])
        new_text = (
            "".join(lines[:start])
            + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
            + rest
        )
    else:
        package = {
            "apiVersion": "goondan.ai/v1",
            "kind": "Package",
            "metadata": {
                "name": re.sub(r"[^a-z0-9-]+", "-", manifest.parent.name.lower()).strip("-")
                or "bundle"
            },
            "spec": {"version": "0.1.0", "dependencies": [{"name": name, "version": version}]},
        }
        new_text = (
            yaml.safe_dump(package, sort_keys=False) + "---\n" + text[len("".join(lines[:start])) :]
        )
    manifest.write_text(new_text, encoding="utf-8")


def _load(bundle: Path) -> LoadResult:
    options = get_globals()
    state_root = Path(options.state_root).expanduser() if options.state_root else None
    return load_resources(bundle, state_root=state_root, builtin_root=BUILTIN_ROOT)


def _dependency_errors(result: LoadResult) -> list[str]:
    return [f"[{d.code}] {d.message}" for d in result.diagnostics
            if d.is_error and d.code in _PACKAGE_CODES]


@click.group("package")
def package() -> None:
    """Add, list, lock and create Goondan packages (Python distributions)."""


@package.command("add")
@click.argument("spec")
@click.option("--dist", "dist", default=None,
              help="PyPI distribution to install [default: goondan-<scope>-<name>].")
@bundle_option(type=click.Path(path_type=Path), help="Bundle directory (or its goondan.yaml).")
@click.option("--no-install", is_flag=True, default=False,
              help="Do not run pip; only record the dependency (it must already be installed).")
@click.option("--pip-arg", "pip_args", multiple=True,
              help="Extra argument for pip install (repeatable), e.g. --pip-arg=--no-index.")
def add(
    spec: str, dist: str | None, bundle: Path | None, no_install: bool, pip_args: tuple[str, ...]
) -> None:
    """Install package SPEC (NAME[@RANGE]) with pip and add it to the bundle's dependencies."""
    name, range_text = parse_spec(spec)
    if not re.match(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$", name):
        raise ConfigError(f"invalid package name {name!r}", code="E_PACKAGE_INVALID_NAME",
                          suggestion="write NAME or @scope/NAME, optionally followed by @RANGE")
    if range_text is not None and not semver.valid_range(range_text):
        raise ConfigError(f"invalid version range {range_text!r}", code="E_PACKAGE_INVALID_RANGE",
                          suggestion="use e.g. ^1.2.0, ~1.2.0, >=1.0.0 <2.0.0 or an exact 1.2.3")
    manifest = _manifest(bundle)
    dist = dist or default_distribution(name)
    builtin = (BUILTIN_ROOT.joinpath(*name.split("/")) / "goondan.yaml").is_file()
    if not no_install and not builtin:
        specifier = to_pep440(range_text) if range_text else None
        requirement = dist + (specifier or "")
        command = [sys.executable, "-m", "pip", "install", *pip_args, requirement]
        click.echo(f"$ {' '.join(command)}")
        proc = subprocess.run(command, check=False)
        if proc.returncode != 0:
            raise ConfigError(
                f"pip install {requirement} failed (exit {proc.returncode})",
                code="E_PACKAGE_PIP_FAILED",
                suggestion="check the distribution name (--dist) and your package index; "
                "pip's output above says why",
            )
        importlib.invalidate_caches()
    found = pydist.discover().get(name) or []
    if builtin and not found:
        shipped = manifest_version(BUILTIN_ROOT.joinpath(*name.split("/")) / "goondan.yaml")
        version = range_text or (f"^{shipped}" if shipped else "*")
    else:
        if len(found) > 1:
            raise ConfigError(
                f"package {name!r} is provided by several distributions: "
                + ", ".join(f.describe() for f in found),
                code="E_CONFIG_PACKAGE_CONFLICT", suggestion="pip uninstall all but one of them")
        if not found:
            raise ConfigError(
                f"no installed distribution provides the Goondan package {name!r}"
                + (
                    f" ({dist} has no 'goondan.packages' entry point with that name)"
                    if not no_install
                    else ""
                ),
                code="E_CONFIG_PACKAGE_NOT_INSTALLED",
                suggestion="pass the right PyPI name with --dist, or check the distribution's "
                '[project.entry-points."goondan.packages"] table',
            )
        installed = semver.from_python(found[0].version)
        if range_text is not None and (
            installed is None or not semver.satisfies(installed, range_text)
        ):
            raise ConfigError(
                f"{found[0].describe()} does not satisfy {range_text!r}",
                code="E_CONFIG_PACKAGE_VERSION",
                suggestion=f"pip install '{found[0].distribution}' "
                "at a matching version, or widen the range",
            )
        version = range_text or f"^{installed}"
    record_dependency(manifest, name, version)
    result = _load(manifest.parent)
    errors = _dependency_errors(result)
    if errors:
        raise ConfigError(
            "dependency added, but the bundle's packages do not resolve: " + "; ".join(errors),
            code="E_CONFIG_PACKAGE_NOT_INSTALLED",
            suggestion="'goondan package list' shows each dependency; 'goondan validate' the rest",
        )
    lock = write_lock(manifest.parent, result.located)
    click.echo(f"added {name}@{version} to {manifest}; wrote {lock.name}")


@package.command("list")
@bundle_option(type=click.Path(path_type=Path), help="Bundle directory (or its goondan.yaml).")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print JSON.")
@click.option("--all", "show_all", is_flag=True, default=False,
              help="Also list installed Goondan packages the bundle does not use.")
def list_(bundle: Path | None, as_json: bool, show_all: bool) -> None:
    """Show what each dependency resolved to (source, version, distribution, path)."""
    manifest = _manifest(bundle)
    result = _load(manifest.parent)
    rows: list[dict[str, Any]] = []
    requested: dict[str, Any] = {}
    if result.package is not None:
        for dep in result.package.spec.get("dependencies") or []:
            if isinstance(dep, dict) and isinstance(dep.get("name"), str):
                requested[dep["name"]] = dep.get("version") or dep.get("path")
    for name, loc in result.located.items():
        rows.append({
            "name": name, "requested": requested.get(name), "source": loc.source,
            "version": loc.version, "distribution": loc.distribution, "module": loc.module,
            "path": str(loc.root), "warnings": [w.message for w in loc.warnings],
        })
    problems: list[dict[str, Any]] = [
        {"code": d.code, "message": d.message, "suggestion": d.suggestion}
        for d in result.diagnostics
        if d.code in _PACKAGE_CODES
    ]
    available: list[dict[str, Any]] = []
    if show_all:
        for name, entries in sorted(pydist.discover().items()):
            for entry in entries:
                available.append({"name": name, "distribution": entry.distribution,
                                  "version": entry.version, "module": entry.module,
                                  "used": name in result.located})
    if as_json:
        payload: dict[str, Any] = {"dependencies": rows, "problems": problems}
        if show_all:
            payload["installed"] = available
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    if not rows and not problems:
        click.echo("No dependencies.")
    for row in rows:
        via = f"{row['distribution']} ({row['module']})" if row["distribution"] else row["source"]
        click.echo(
            f"{row['name']}  {row['version'] or '?'}  [{via}]  requested {row['requested']!s}"
        )
        click.echo(f"    {row['path']}")
        for warning in row["warnings"]:
            click.echo(f"    warning: {warning}")
    for problem in problems:
        if problem["code"].startswith("E_"):
            click.echo(f"[{problem['code']}] {problem['message']}")
            if problem["suggestion"]:
                click.echo(f"    suggestion: {problem['suggestion']}")
    for item in available:
        mark = "" if item["used"] else "  (not used by this bundle)"
        click.echo(f"installed: {item['name']}  {item['version']}  [{item['distribution']}]{mark}")


@package.command("lock")
@bundle_option(type=click.Path(path_type=Path), help="Bundle directory (or its goondan.yaml).")
def lock(bundle: Path | None) -> None:
    """Write goondan.lock.yaml with the resolved versions and file hashes."""
    manifest = _manifest(bundle)
    result = _load(manifest.parent)
    errors = _dependency_errors(result)
    if errors:
        raise ConfigError(
            "cannot lock: " + "; ".join(errors),
            code="E_CONFIG_PACKAGE_NOT_INSTALLED",
            suggestion="'goondan package list' shows each dependency",
        )
    path = write_lock(manifest.parent, result.located)
    click.echo(f"wrote {path} ({len(result.located)} package{'s' * (len(result.located) != 1)})")


@package.command("new")
@click.argument("path", type=click.Path(file_okay=False, path_type=Path))
@click.option("-n", "--name", default=None,
              help="Package name, e.g. @acme/tools [default: the directory name].")
@click.option(
    "-f", "--force", is_flag=True, default=False, help="Overwrite an existing pyproject.toml."
)
def new(path: Path, name: str | None, force: bool) -> None:
    """Create a package project in PATH that builds a wheel (pyproject.toml + goondan.yaml)."""
    path = path.resolve()
    name = name or re.sub(r"[^a-z0-9-]+", "-", path.name.lower()).strip("-") or "my-package"
    written = scaffold_package(path, name=name, force=force)
    for file in written:
        click.echo(f"created {file.relative_to(path)}")
    click.echo(f"Package {name} ready in {path}. Build: pip wheel --no-deps -w dist {path}")
