"""``goondan.lock.yaml``: what each dependency resolved to, with file hashes (docs/packages.md).

Format (``lockfileVersion: 1``, the reference's layout plus goondan's keys)::

    packages:
      "@acme/tools@1.2.0":
        version: 1.2.0
        source: python                 # path | python | installed | builtin
        distribution: acme-goondan-tools
        module: acme_goondan_tools
        integrity: sha256-<hash of the file list below>
        files: {goondan.yaml: sha256-..., tools/echo.py: sha256-...}

A lock written by the reference (``resolved`` + ``integrity: sha512-…`` of a registry tarball,
no ``files``) is accepted as it is: it only pins versions. ``validate`` compares the resolved
packages with the lock and warns (``W_CONFIG_PACKAGE_DRIFT``) when a version or a file changed.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

from goondan.config.packages import Located, PackageProblem, read_lock_entries
from goondan.workspace.files import atomic_write

__all__ = ["LOCK_FILE", "drift", "hash_files", "lock_entry", "write_lock"]

LOCK_FILE = "goondan.lock.yaml"
_SKIP_DIRS = {"__pycache__", ".git", "node_modules", ".venv", "venv"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def _digest(data: bytes) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode("ascii")


def hash_files(root: Path) -> dict[str, str]:
    """``{posix relative path: sha256-<base64>}`` of every file of a package (sorted)."""
    out: dict[str, str] = {}
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(_SKIP_SUFFIXES) or name.startswith("."):
                continue
            path = Path(current) / name
            try:
                out[path.relative_to(root).as_posix()] = _digest(path.read_bytes())
            except OSError:
                continue
    return dict(sorted(out.items()))


def lock_entry(located: Located) -> dict[str, Any]:
    """The lock entry of one resolved package."""
    files = hash_files(located.root)
    entry: dict[str, Any] = {"version": located.version or "0.0.0", "source": located.source}
    if located.distribution:
        entry["distribution"] = located.distribution
        entry["module"] = located.module
    listing = "".join(f"{k} {v}\n" for k, v in files.items()).encode("utf-8")
    entry["integrity"] = _digest(listing)
    entry["files"] = files
    return entry


def write_lock(bundle_root: Path, located: dict[str, Located]) -> Path:
    """Write ``goondan.lock.yaml`` for the resolved packages (atomic replace).

    Built-in packages are recorded too, so a later goondan with another base version shows up
    as drift; local ``path:`` packages are not (they are the project's own source)."""
    packages = {
        f"{name}@{loc.version or '0.0.0'}": lock_entry(loc)
        for name, loc in sorted(located.items()) if loc.source != "path"
    }
    import yaml  # only writing a lock needs PyYAML

    text = yaml.safe_dump({"lockfileVersion": 1, "packages": packages}, sort_keys=False,
                          allow_unicode=True)
    path = bundle_root / LOCK_FILE
    atomic_write(path, text.encode("utf-8"))
    return path


def drift(bundle_root: Path, located: dict[str, Located]) -> list[tuple[str, PackageProblem]]:
    """``(package name, warning)`` for each resolved package that differs from goondan's lock."""
    entries = read_lock_entries(bundle_root)
    by_name: dict[str, tuple[str, dict[str, Any]]] = {}
    for key, entry in entries.items():
        name, sep, version = key.rpartition("@")
        if sep and name and isinstance(entry.get("files"), dict):  # goondan's own entries only
            by_name[name] = (str(entry.get("version") or version), entry)
    out: list[tuple[str, PackageProblem]] = []
    for name, loc in located.items():
        if name not in by_name:
            continue
        locked_version, entry = by_name[name]
        hint = "run 'goondan package lock' to record the packages as they are now"
        if loc.version is not None and str(loc.version) != locked_version:
            out.append((name, PackageProblem(
                "W_CONFIG_PACKAGE_DRIFT",
                f"package {name!r} is {loc.version} but goondan.lock.yaml has {locked_version}",
                hint, warning=True)))
            continue
        now = hash_files(loc.root)
        locked = {str(k): str(v) for k, v in entry["files"].items()}
        changed = sorted(k for k in set(now) | set(locked) if now.get(k) != locked.get(k))
        if changed:
            shown = ", ".join(changed[:3]) + (
                f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            )
            out.append((name, PackageProblem(
                "W_CONFIG_PACKAGE_DRIFT",
                f"package {name!r} {loc.version} differs from goondan.lock.yaml: {shown}",
                hint, warning=True)))
    return out
