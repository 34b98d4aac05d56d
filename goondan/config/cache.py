"""The bundle cache: a validated bundle reused while none of its inputs changed
(docs/bundle-cache.md).

Loading a bundle means parsing YAML (PyYAML) and running every validation check; a start that
finds a cache entry whose inputs are all unchanged rebuilds the same :class:`Bundle` from JSON
and imports neither. An entry records every input the load consulted and is used only when all
of them still match:

* the content (SHA-256) of every file read or checked: the YAML files, entry modules, ``systemRef``
  prompts, the manifests and their alternatives (``goondan.yaml``/``goondan.yml``,
  ``dist/goondan.yaml``), ``goondan.lock.yaml``, ``.env`` and ``.env.local`` — absence included;
* the bundle's YAML file list (the directory is scanned again, it is cheap), where each path
  dependency resolves, the listing of each installed package's directory under the state root,
  the Python environment's ``sys.path`` directories (for packages shipped as distributions) and,
  when ``goondan.lock.yaml`` records file hashes, each locked package's files;
* whether each environment variable the validation looked at is set (never its value);
* the goondan version, its ``goondan/config`` sources, the Python version and the working
  directory (diagnostics show paths relative to it).

Entries are JSON, written atomically (temporary file, fsync, rename) under
``<state root>/cache/bundles/`` or ``$GOONDAN_CACHE_DIR``. A location that cannot be read or
written, or an entry that is not well formed, means a normal load (and a rewrite when possible).
Secrets are never stored: the entry holds the unresolved YAML values, and a bundle with a literal
secret in YAML (``W_CONFIG_INLINE_SECRET``) is not cached at all. ``GOONDAN_NO_CACHE=1`` turns the
cache off; ``goondan validate`` always validates in full.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.config.sourcefile import record_reads, scan_yaml_files
from goondan.workspace.files import private_dirs

if TYPE_CHECKING:
    from goondan.config.bundle import Bundle
    from goondan.config.loader import LoadResult
    from goondan.errors import Diagnostic

__all__ = [
    "CACHE_DIR_ENV",
    "NO_CACHE_ENV",
    "cache_dir",
    "cache_enabled",
    "entry_path",
    "load_bundle_cached",
]

CACHE_DIR_ENV = "GOONDAN_CACHE_DIR"
NO_CACHE_ENV = "GOONDAN_NO_CACHE"
FORMAT = 1
_MAX_ENTRY_BYTES = 16 * 1024 * 1024
_CONFIG_DIR = Path(__file__).resolve().parent


def cache_enabled(env: Mapping[str, str]) -> bool:
    """False when ``GOONDAN_NO_CACHE`` is set to anything but ``""``/``0``/``false``/``no``."""
    return (env.get(NO_CACHE_ENV) or "").strip().lower() in ("", "0", "false", "no")


def cache_dir(state_root: Path, env: Mapping[str, str]) -> Path:
    """``$GOONDAN_CACHE_DIR`` if set, else ``<state root>/cache/bundles``."""
    override = env.get(CACHE_DIR_ENV)
    return Path(override).expanduser() if override else Path(state_root) / "cache" / "bundles"


def entry_path(
    target: Path, state_root: Path, env: Mapping[str, str], builtin_root: Path | None = None
) -> Path:
    """The cache file of the bundle at ``target`` (absolute) loaded with ``state_root`` from the
    working directory (one entry per directory: processes started elsewhere never evict it)."""
    key = json.dumps([FORMAT, str(target), str(state_root), str(builtin_root or ""), os.getcwd()])
    return (
        cache_dir(state_root, env) / f"{hashlib.sha256(key.encode('utf-8')).hexdigest()[:40]}.json"
    )


def load_bundle_cached(
    path: str | os.PathLike[str],
    *,
    state_root: Path,
    env: Mapping[str, str] | None = None,
    builtin_root: Path | None = None,
    use_cache: bool = True,
) -> Bundle:
    """:func:`goondan.config.load_bundle`, through the cache when an entry's inputs all match.

    Raises like ``load_bundle`` (``ConfigError``/``BundleError``); invalid bundles are never
    cached. ``env`` (default ``os.environ``) is what validation checks variables against and what
    ``GOONDAN_CACHE_DIR``/``GOONDAN_NO_CACHE`` are read from.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    target = Path(path).expanduser().absolute()
    state_root = Path(state_root)
    if not use_cache or not cache_enabled(environ):
        from goondan.config.validate import load_bundle

        bundle = load_bundle(target, state_root=state_root, builtin_root=builtin_root)
    else:
        entry = entry_path(target, state_root, environ, builtin_root)
        bundle = _read_entry(entry, target, state_root, environ, builtin_root) \
            or _load_and_store(entry, target, state_root, environ, builtin_root)
    # Every process that loads the bundle masks all its secrets, not only those it uses.
    from goondan.config.secretsources import register_bundle_secrets

    register_bundle_secrets(bundle, environ)
    return bundle


# --- reading -------------------------------------------------------------------------------------

def _meta(target: Path, state_root: Path, builtin_root: Path | None) -> dict[str, Any]:
    # The parent package is loaded before any of its submodules; its version is read from there
    # because this layer may not import the top-level package (docs/architecture.md "Layers").
    return {
        "goondan": str(getattr(sys.modules.get("goondan"), "__version__", "")),
        "python": sys.version,
        "code": _code_fingerprint(),
        "cwd": os.getcwd(),
        "target": str(target),
        "stateRoot": str(state_root),
        "builtinRoot": str(builtin_root or ""),
    }


def _code_fingerprint() -> list[list[Any]]:
    """Size and mtime of goondan/config's sources and of goondan/__init__.py (the version): an
    edited checkout never reuses old results."""
    st = (_CONFIG_DIR.parent / "__init__.py").stat()
    out: list[list[Any]] = [["../__init__.py", st.st_size, st.st_mtime_ns]]
    with os.scandir(_CONFIG_DIR) as entries:
        for item in entries:
            if item.name.endswith(".py"):
                st = item.stat()
                out.append([item.name, st.st_size, st.st_mtime_ns])
    return sorted(out)


def _read_entry(entry: Path, target: Path, state_root: Path, env: Mapping[str, str],
                builtin_root: Path | None) -> Bundle | None:
    try:
        with open(entry, "rb") as handle:
            raw = handle.read(_MAX_ENTRY_BYTES + 1)
    except OSError:  # absent or unreadable: a normal load
        return None
    try:
        record = json.loads(raw) if len(raw) <= _MAX_ENTRY_BYTES else None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            return None
        if record.get("meta") != _meta(target, state_root, builtin_root):
            return None
        if not _inputs_match(record["inputs"], env):
            return None
        return _bundle_from_json(record["bundle"])
    except Exception:  # a corrupt or foreign entry is ignored (and rewritten by the caller)
        return None


def _digest(path: Path) -> str | None:
    """SHA-256 of the file's content; ``None`` when it is absent (or not a readable file)."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:  # a directory, a permission problem: recorded as such, compared as such
        return "unreadable"


def _listing(path: Path) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _pydist_fingerprint() -> list[list[Any]]:
    """The ``sys.path`` directories and their mtimes: installing or removing a distribution
    changes its directory, so a cached ``goondan.packages`` lookup is never reused after that."""
    out: list[list[Any]] = []
    for entry in sys.path:
        try:
            st = os.stat(entry or ".")
        except OSError:
            continue
        out.append([entry, st.st_mtime_ns])
    return out


def _tree_digest(root: Path) -> str:
    from goondan.config.lockfile import hash_files

    return hashlib.sha256(json.dumps(hash_files(root), sort_keys=True).encode("utf-8")).hexdigest()


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return bool((env.get(name) or "").strip())


def _inputs_match(inputs: dict[str, Any], env: Mapping[str, str]) -> bool:
    if any(_env_flag(env, name) != flag for name, flag in inputs["env"].items()):
        return False
    if inputs["pydist"] is not None and inputs["pydist"] != _pydist_fingerprint():
        return False
    if any(
        str(Path(declared).resolve()) != resolved for declared, resolved in inputs["paths"].items()
    ):
        return False
    if any(_listing(Path(path)) != names for path, names in inputs["listings"].items()):
        return False
    if any(_digest(Path(path)) != digest for path, digest in inputs["files"].items()):
        return False
    scan = inputs["scan"]
    if scan is not None:
        found = scan_yaml_files(Path(scan["root"]), {Path(p) for p in scan["skip"]})
        if [str(p) for p in found] != scan["found"]:
            return False
    return all(_tree_digest(Path(root)) == digest for root, digest in inputs["trees"].items())


# --- writing -------------------------------------------------------------------------------------

class _RecordingEnv(Mapping[str, str]):
    """The environment as validation sees it, remembering which variables it looked at."""

    def __init__(self, base: Mapping[str, str]) -> None:
        self._base = base
        self.seen: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.seen.add(key)
        return self._base[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)


def _load_and_store(entry: Path, target: Path, state_root: Path, env: Mapping[str, str],
                    builtin_root: Path | None) -> Bundle:
    from goondan.config.validate import bundle_or_raise, validate_loaded

    recorder = _RecordingEnv(env)
    with record_reads() as reads:
        report, loaded = validate_loaded(
            target, state_root=state_root, env=recorder, builtin_root=builtin_root
        )
    bundle = bundle_or_raise(report)
    if any(w.code == "W_CONFIG_INLINE_SECRET" for w in report.warnings):
        return bundle  # never copy a literal secret into the cache
    with contextlib.suppress(Exception):  # the cache is an optimisation: never fail a load
        inputs = _inputs(target, state_root, loaded, bundle, recorder, env, reads)
        record = {
            "format": FORMAT,
            "meta": _meta(target, state_root, builtin_root),
            "inputs": inputs,
            "bundle": _bundle_to_json(bundle),
        }
        _write_atomic(
            entry, json.dumps(record, ensure_ascii=False, allow_nan=False).encode("utf-8")
        )
    return bundle


def _inputs(
    target: Path,
    state_root: Path,
    loaded: LoadResult,
    bundle: Bundle,
    recorder: _RecordingEnv,
    env: Mapping[str, str],
    reads: dict[str, str],
) -> dict[str, Any]:
    """Every input of the load; a file the load read is keyed on the bytes it read (``reads``),
    the others (existence checks, alternatives) on their content now."""
    from goondan.config.envelope import agent_prompt
    from goondan.config.lockfile import LOCK_FILE
    from goondan.config.packages import read_lock_entries
    from goondan.config.providers import PROVIDERS

    root = loaded.root
    probes: set[Path] = {*loaded.files, root / LOCK_FILE, root / ".env", root / ".env.local"}
    scan = None
    if target.is_dir():
        probes.update((root / "goondan.yaml", root / "goondan.yml"))
    paths: dict[str, str] = {}
    listings: dict[str, list[str] | None] = {}
    uses_pydist = False
    for res in bundle.resources:
        spec = res.spec
        entry = spec.get("entry") if "mcp" not in spec and "a2a" not in spec else None
        if res.kind in ("Tool", "Extension", "Connector") and isinstance(entry, str):
            path = res.root / entry
            probes.update((path, path / "__init__.py"))
        if (
            res.kind == "Model"
            and isinstance(spec.get("provider"), str)
            and spec["provider"] not in PROVIDERS
        ):
            uses_pydist = True  # a third-party provider: an installed distribution's entry point
        if res.kind == "Agent":
            ref = agent_prompt(spec)[2]
            if ref is not None:
                probes.add(res.root / ref)
        if res.kind == "Package":
            for dep in spec.get("dependencies") or []:
                if not isinstance(dep, dict) or not isinstance(dep.get("name"), str):
                    continue
                if isinstance(dep.get("path"), str):
                    declared = res.root / dep["path"]
                    paths[str(declared)] = str(declared.resolve())
                else:
                    uses_pydist = True
                    listings[str(state_root.joinpath("packages", *dep["name"].split("/")))] = None
    for located in loaded.located.values():
        probes.update((located.root / "dist" / "goondan.yaml", located.root / "goondan.yaml"))
    if target.is_dir():  # the loader skips the local package's path dependencies when scanning
        skip = {(root / dep["path"]).resolve() for res in bundle.resources
                if res.kind == "Package" and res.package is None
                for dep in res.spec.get("dependencies") or []
                if isinstance(dep, dict) and isinstance(dep.get("path"), str)}
        scan = {"root": str(root), "skip": sorted(str(p) for p in skip),
                "found": [str(p) for p in scan_yaml_files(root, skip)]}
    locked = {key.rpartition("@")[0] for key, entry in read_lock_entries(root).items()
              if isinstance(entry.get("files"), dict)}
    trees = {
        str(loc.root): _tree_digest(loc.root)
        for name, loc in loaded.located.items()
        if name in locked
    }
    return {
        "env": {name: _env_flag(env, name) for name in sorted(recorder.seen)},
        "pydist": _pydist_fingerprint() if uses_pydist else None,
        "paths": paths,
        "listings": {path: _listing(Path(path)) for path in listings},
        "files": {**{str(p): _digest(p) for p in sorted(probes) if str(p) not in reads}, **reads},
        "scan": scan,
        "trees": trees,
    }


def _write_atomic(path: Path, data: bytes) -> None:
    """Temp file in the same directory + fsync + rename (a reader sees the old or the new entry)."""
    import tempfile

    private_dirs(path.parent)  # mkstemp's file is 0600
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- the bundle as JSON ------------------------------------------------------------------------

def _diagnostic_to_json(diag: Diagnostic) -> dict[str, Any]:
    return {
        "code": diag.code,
        "message": diag.message,
        "severity": diag.severity,
        "file": diag.file,
        "line": diag.line,
        "column": diag.column,
        "resource": diag.resource,
        "field": diag.field,
        "suggestion": diag.suggestion,
        "helpUrl": diag.help_url,
        "extra": diag.extra,
    }


def _bundle_to_json(bundle: Bundle) -> dict[str, Any]:
    return {
        "root": str(bundle.root),
        "packageName": bundle.package_name,
        "files": [str(p) for p in bundle.files],
        "warnings": [_diagnostic_to_json(d) for d in bundle.warnings],
        "resources": [
            {
                "apiVersion": r.api_version,
                "kind": r.kind,
                "name": r.name,
                "metadata": r.metadata,
                "spec": r.spec,
                "root": str(r.root),
                "package": r.package,
                "location": {
                    "file": str(r.location.file),
                    "display": r.location.display,
                    "document": r.location.document,
                    "line": r.location.line,
                    "column": r.location.column,
                },
            }
            for r in bundle.resources
        ],
    }


def _opt_str(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError("not a string")


def _opt_int(value: Any) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError("not an integer")


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise ValueError("not a string")


def _dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    raise ValueError("not an object")


def _bundle_from_json(data: dict[str, Any]) -> Bundle:
    """The :class:`Bundle` of an entry; any shape problem raises (the entry is then ignored)."""
    from goondan.config.bundle import Bundle
    from goondan.config.envelope import Location, Resource
    from goondan.errors import Diagnostic

    warnings = []
    for d in data["warnings"]:
        severity = d["severity"]
        if severity not in ("error", "warning"):
            raise ValueError("bad severity")
        warnings.append(
            Diagnostic(
                _str(d["code"]),
                _str(d["message"]),
                severity,
                file=_opt_str(d["file"]),
                line=_opt_int(d["line"]),
                column=_opt_int(d["column"]),
                resource=_opt_str(d["resource"]),
                field=_opt_str(d["field"]),
                suggestion=_opt_str(d["suggestion"]),
                help_url=_opt_str(d["helpUrl"]),
                extra=_dict(d["extra"]),
            )
        )
    resources = []
    for r in data["resources"]:
        loc = r["location"]
        location = Location(
            Path(_str(loc["file"])),
            _str(loc["display"]),
            _opt_int(loc["document"]) or 0,
            _opt_int(loc["line"]) or 0,
            _opt_int(loc["column"]) or 0,
        )
        resources.append(
            Resource(
                _str(r["apiVersion"]),
                _str(r["kind"]),
                _str(r["name"]),
                _dict(r["metadata"]),
                _dict(r["spec"]),
                Path(_str(r["root"])),
                location,
                _opt_str(r["package"]),
            )
        )
    return Bundle(Path(_str(data["root"])), _opt_str(data["packageName"]), resources, warnings,
                  [Path(_str(p)) for p in data["files"]])
