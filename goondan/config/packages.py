"""Where a Package dependency lives: local path, installed copy, or built into goondan.

Lookup order for ``{name, path}``: the directory ``path`` (relative to the declaring root).
For ``{name, version}``: the version pinned in ``goondan.lock.yaml`` (highest if several) or an
exact semver, installed under ``<state_root>/packages/<scope>/<name>/<version>/`` (Decision 17);
else a package shipped with goondan under ``goondan/builtin_packages/<scope>/<name>/``. In every
root the manifest is ``dist/goondan.yaml`` if present, else ``goondan.yaml``.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from goondan.config.yamlsource import read_yaml_file

__all__ = ["BUILTIN_ROOT", "PackageProblem", "default_state_root", "find_manifest", "locate_package", "read_lock"]

BUILTIN_ROOT = Path(__file__).resolve().parent.parent / "builtin_packages"
_EXACT = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$")


@dataclass
class PackageProblem:
    """Why a dependency could not be located."""

    code: str
    message: str
    suggestion: str


def default_state_root() -> Path:
    """The state root when none is given: the workspace area's resolver, else env / ``~/.goondan``."""
    try:  # the workspace area owns the full precedence rules (same layer; may be absent)
        paths = importlib.import_module("goondan.workspace.paths")
        return Path(paths.resolve_state_root(None))
    except (ImportError, AttributeError):
        env = os.environ.get("GOONDAN_STATE_ROOT")
        return Path(env).expanduser() if env else Path.home() / ".goondan"


def find_manifest(root: Path) -> Path | None:
    """``dist/goondan.yaml`` over ``goondan.yaml`` (MUST), or ``None``."""
    for candidate in (root / "dist" / "goondan.yaml", root / "goondan.yaml"):
        if candidate.is_file():
            return candidate
    return None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("-")[0])[:3])


def read_lock(bundle_root: Path) -> dict[str, list[str]]:
    """``goondan.lock.yaml`` as ``{package name: [versions]}`` (empty when absent or unreadable)."""
    path = bundle_root / "goondan.lock.yaml"
    if not path.is_file():
        return {}
    docs, _ = read_yaml_file(path, "goondan.lock.yaml")
    out: dict[str, list[str]] = {}
    data: Any = docs[0].data if docs else None
    packages = data.get("packages") if isinstance(data, dict) else None
    if isinstance(packages, dict):
        for key in packages:
            name, sep, version = str(key).rpartition("@")
            if sep and name:
                out.setdefault(name, []).append(version)
    return out


def _package_dir(base: Path, name: str) -> Path:
    return base.joinpath(*name.split("/"))


def locate_package(
    dep: dict[str, Any],
    *,
    declaring_root: Path,
    lock: dict[str, list[str]],
    state_root: Path,
    builtin_root: Path,
) -> tuple[Path | None, Path | None, PackageProblem | None]:
    """Find ``(package root, manifest)`` for one dependency entry, or a problem."""
    name = str(dep.get("name"))
    if isinstance(dep.get("path"), str):
        root = (declaring_root / dep["path"]).resolve()
        if not root.is_dir():
            return None, None, PackageProblem(
                "E_CONFIG_PACKAGE_NOT_INSTALLED",
                f"dependency {name!r}: directory {dep['path']!r} does not exist",
                "fix the path (relative to the declaring goondan.yaml's directory)",
            )
        manifest = find_manifest(root)
        if manifest is None:
            return None, None, PackageProblem(
                "E_CONFIG_PACKAGE_MANIFEST_MISSING",
                f"dependency {name!r}: {dep['path']!r} has no goondan.yaml or dist/goondan.yaml",
                "add a goondan.yaml to the package directory",
            )
        return root, manifest, None
    requested = dep.get("version")
    version: str | None = None
    if lock.get(name):
        version = max(lock[name], key=_version_key)
    elif isinstance(requested, str) and _EXACT.match(requested.lstrip("=v")):
        version = requested.lstrip("=v")
    if version is not None:
        root = _package_dir(state_root / "packages", name) / version
        if root.is_dir():
            manifest = find_manifest(root)
            if manifest is None:
                return None, None, PackageProblem(
                    "E_CONFIG_PACKAGE_MANIFEST_MISSING",
                    f"installed package {name}@{version} has no goondan.yaml or dist/goondan.yaml",
                    "reinstall it with 'goondan package install'",
                )
            return root, manifest, None
    for candidate in (_package_dir(builtin_root, name), _package_dir(builtin_root, name.lstrip("@"))):
        manifest = find_manifest(candidate)
        if manifest is not None:
            return candidate, manifest, None
    if version is None:
        return None, None, PackageProblem(
            "E_CONFIG_PACKAGE_LOCK_MISSING",
            f"dependency {name!r} has version range {requested!r} but no goondan.lock.yaml pins it",
            "run 'goondan package install' to write goondan.lock.yaml, or use an exact version",
        )
    return None, None, PackageProblem(
        "E_CONFIG_PACKAGE_NOT_INSTALLED",
        f"package {name}@{version} is not installed under {state_root / 'packages'}",
        "run 'goondan package install'",
    )
