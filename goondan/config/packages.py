"""Where a Package dependency lives: local path, Python distribution, installed copy, built-in.

Lookup order for ``{name, path}``: the directory ``path`` (relative to the declaring root).
For ``{name, version}`` (docs/packages.md):

1. a copy installed under ``<state_root>/packages/<scope>/<name>/<version>/`` for the version
   pinned in ``goondan.lock.yaml`` (highest if several) or an exact version;
2. a Python distribution whose ``goondan.packages`` entry point has that name (its version must
   satisfy the range; two distributions claiming one name are an error);
3. a package shipped with goondan under ``goondan/builtin_packages/<scope>/<name>/`` — any range
   is accepted, with a warning when it excludes the shipped version.

In every root the manifest is ``dist/goondan.yaml`` if present, else ``goondan.yaml``.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.config import pydist, semver
from goondan.config.yamlsource import read_yaml_file

__all__ = [
    "BUILTIN_ROOT", "Located", "PackageProblem", "default_state_root", "find_manifest",
    "locate_package", "manifest_version", "read_lock", "read_lock_entries",
]

BUILTIN_ROOT = Path(__file__).resolve().parent.parent / "builtin_packages"
_EXACT = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$")


@dataclass
class PackageProblem:
    """Why a dependency could not be located (or, with ``warning``, what is odd about it)."""

    code: str
    message: str
    suggestion: str
    warning: bool = False


@dataclass
class Located:
    """Where one dependency resolved: ``source`` is ``path``, ``installed``, ``python`` or
    ``builtin``; ``distribution``/``module`` are set for Python distributions."""

    root: Path
    manifest: Path
    source: str
    version: str | None = None
    distribution: str | None = None
    module: str | None = None
    warnings: list[PackageProblem] = field(default_factory=list)


def default_state_root() -> Path:
    """The state root when none is given: the workspace area's resolver, else env /
    ``~/.goondan``."""
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


def read_lock_entries(bundle_root: Path) -> dict[str, dict[str, Any]]:
    """``goondan.lock.yaml``'s ``packages`` mapping (``"name@version" → entry``), or ``{}``.

    Both goondan's lock (entries with ``files`` hashes) and the reference's (``resolved`` +
    ``integrity``) are read; unknown entry keys are ignored.
    """
    path = bundle_root / "goondan.lock.yaml"
    if not path.is_file():
        return {}
    docs, _ = read_yaml_file(path, "goondan.lock.yaml")
    data: Any = docs[0].data if docs else None
    packages = data.get("packages") if isinstance(data, dict) else None
    if not isinstance(packages, dict):
        return {}
    return {str(k): (v if isinstance(v, dict) else {}) for k, v in packages.items()}


def read_lock(bundle_root: Path) -> dict[str, list[str]]:
    """``goondan.lock.yaml`` as ``{package name: [versions]}`` (empty when absent or unreadable)."""
    out: dict[str, list[str]] = {}
    for key in read_lock_entries(bundle_root):
        name, sep, version = key.rpartition("@")
        if sep and name:
            out.setdefault(name, []).append(version)
    return out


def manifest_version(manifest: Path) -> str | None:
    """``spec.version`` of the Package document at the top of ``manifest`` (``None`` if absent)."""
    docs, _ = read_yaml_file(manifest, str(manifest))
    data: Any = docs[0].data if docs else None
    if (
        isinstance(data, dict)
        and data.get("kind") == "Package"
        and isinstance(data.get("spec"), dict)
    ):
        version = data["spec"].get("version")
        return str(version) if version is not None else None
    return None


def _package_dir(base: Path, name: str) -> Path:
    return base.joinpath(*name.split("/"))


def _add_hint(name: str, requested: Any) -> str:
    spec = f"{name}@{requested}" if isinstance(requested, str) and requested.strip() else name
    return (
        f"install it with 'goondan package add {spec} "
        "--dist <pypi-distribution>' (or pip install it)"
    )


def locate_package(
    dep: dict[str, Any],
    *,
    declaring_root: Path,
    lock: dict[str, list[str]],
    state_root: Path,
    builtin_root: Path,
    python_packages: dict[str, list[pydist.PythonPackage]] | None = None,
) -> tuple[Located | None, PackageProblem | None]:
    """Find where one dependency entry lives, or why it cannot be used.

    ``python_packages`` is :func:`goondan.config.pydist.discover`'s result (looked up when
    ``None``).
    """
    name = str(dep.get("name"))
    if isinstance(dep.get("path"), str):
        root = (declaring_root / dep["path"]).resolve()
        if not root.is_dir():
            return None, PackageProblem(
                "E_CONFIG_PACKAGE_NOT_INSTALLED",
                f"dependency {name!r}: directory {dep['path']!r} does not exist",
                "fix the path (relative to the declaring goondan.yaml's directory)",
            )
        manifest = find_manifest(root)
        if manifest is None:
            return None, PackageProblem(
                "E_CONFIG_PACKAGE_MANIFEST_MISSING",
                f"dependency {name!r}: {dep['path']!r} has no goondan.yaml or dist/goondan.yaml",
                "add a goondan.yaml to the package directory",
            )
        return Located(root, manifest, "path", manifest_version(manifest)), None
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
                return None, PackageProblem(
                    "E_CONFIG_PACKAGE_MANIFEST_MISSING",
                    f"installed package {name}@{version} has no goondan.yaml or dist/goondan.yaml",
                    f"remove {root} and install the package again ({_add_hint(name, requested)})",
                )
            return Located(root, manifest, "installed", version), None
    if python_packages is None:
        python_packages = pydist.discover()
    candidates = python_packages.get(name) or []
    if len(candidates) > 1:
        owners = ", ".join(c.describe() for c in candidates)
        return None, PackageProblem(
            "E_CONFIG_PACKAGE_CONFLICT",
            f"package {name!r} is provided by several Python distributions: {owners}",
            "pip uninstall all but one of them ('goondan package list' shows them)",
        )
    if candidates:
        return _python_package(name, candidates[0], requested)
    for candidate in (
        _package_dir(builtin_root, name),
        _package_dir(builtin_root, name.lstrip("@")),
    ):
        manifest = find_manifest(candidate)
        if manifest is not None:
            shipped = manifest_version(manifest)
            located = Located(candidate, manifest, "builtin", shipped)
            if isinstance(requested, str) and requested.strip() and shipped is not None \
                    and not semver.satisfies(shipped, requested):
                located.warnings.append(PackageProblem(
                    "W_CONFIG_PACKAGE_VERSION_MISMATCH",
                    f"dependency {name!r} asks for {requested!r}; goondan ships {name} {shipped}, "
                    "which is used instead",
                    f'write version: "^{shipped}" to match the shipped package',
                    warning=True,
                ))
            return located, None
    if version is None:
        return None, PackageProblem(
            "E_CONFIG_PACKAGE_LOCK_MISSING",
            f"dependency {name!r} ({requested!r}) is not "
            "installed: no Python distribution provides "
            "it and no goondan.lock.yaml pins an installed copy",
            _add_hint(name, requested),
        )
    return None, PackageProblem(
        "E_CONFIG_PACKAGE_NOT_INSTALLED",
        f"package {name}@{version} is not installed (no Python distribution provides it, and "
        f"there is no copy under {state_root / 'packages'})",
        _add_hint(name, requested),
    )


def _python_package(name: str, found: pydist.PythonPackage,
                    requested: Any) -> tuple[Located | None, PackageProblem | None]:
    root, reason = pydist.module_dir(found.module)
    if root is None:
        return None, PackageProblem(
            "E_CONFIG_PACKAGE_MANIFEST_MISSING",
            f"package {name!r} from {found.describe()}: {reason}",
            "the entry point must name a package directory holding goondan.yaml; "
            f"reinstall {found.distribution} or fix its pyproject.toml",
        )
    manifest = find_manifest(root)
    if manifest is None:
        return None, PackageProblem(
            "E_CONFIG_PACKAGE_MANIFEST_MISSING",
            f"package {name!r} from {found.describe()}: {root} has no goondan.yaml",
            "include goondan.yaml as package data (docs/packages.md), rebuild and reinstall "
            f"{found.distribution}",
        )
    installed = semver.from_python(found.version)
    if isinstance(requested, str) and requested.strip() and (
            installed is None or not semver.satisfies(installed, requested)):
        return None, PackageProblem(
            "E_CONFIG_PACKAGE_VERSION",
            f"dependency {name!r} asks for {requested!r} but {found.describe()} is installed",
            f"pip install '{found.distribution}' at a matching version, or change the range "
            "in goondan.yaml",
        )
    return Located(root, manifest, "python", found.version, found.distribution, found.module), None
