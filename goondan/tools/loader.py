"""Load tool/extension entry modules from a bundle by file path.

Each entry file is executed as its own module under a private name
(``_goondan_entry.<kind>_<slug>_<hash>_<n>``) without adding anything to ``sys.path``. The
module is created as a package rooted at the entry's directory, so the entry may import its
sibling files with relative imports (``from .helpers import x``); absolute imports of sibling
files are not supported because that would need a global ``sys.path`` change.

Tool modules are cached per file version (path, mtime, size): every agent instance in a process
shares one module object. Extension modules are loaded fresh on every call, so module-level
state in an extension is never shared between two instances.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import re
import sys
import threading
from pathlib import Path
from types import ModuleType

from goondan.errors import ToolLoadError
from goondan.secrets import mask

__all__ = ["PRIVATE_PREFIX", "clear_module_cache", "load_entry_module"]

PRIVATE_PREFIX = "_goondan_entry"
_counter = itertools.count(1)
_lock = threading.Lock()
_cache: dict[tuple[str, int, int], ModuleType] = {}


def _private_name(path: Path, kind: str) -> str:
    slug = re.sub(r"[^0-9A-Za-z_]", "_", path.stem)[:32] or "entry"
    digest = hashlib.sha1(str(path).encode("utf-8")).hexdigest()[:10]
    return f"{PRIVATE_PREFIX}_{kind}_{slug}_{digest}_{next(_counter)}"


def clear_module_cache() -> None:
    """Forget cached tool modules (the next load executes the files again)."""
    with _lock:
        _cache.clear()


def load_entry_module(path: Path | str, *, kind: str = "tool", cache: bool = False) -> ModuleType:
    """Execute the Python file ``path`` (or package directory) as a private module.

    Raises :class:`ToolLoadError` ``E_TOOL_LOAD`` when the file is missing, is not a ``.py``
    file, or raises while executing (syntax errors included); the cause is chained.
    """
    entry = Path(path).expanduser().resolve()
    if entry.is_dir() and (entry / "__init__.py").is_file():
        entry = entry / "__init__.py"  # a package entry: its __init__ holds handlers/register
    try:
        stat = entry.stat()
    except OSError as exc:
        raise ToolLoadError(
            f"{kind} entry file not found: {entry}",
            code="E_TOOL_LOAD",
            suggestion="Check spec.entry; it is resolved relative to the resource's bundle root.",
            location=str(entry),
        ) from exc
    if not entry.is_file() or entry.suffix != ".py":
        raise ToolLoadError(
            f"{kind} entry must be a Python file (.py): {entry}",
            code="E_TOOL_LOAD",
            suggestion="Point spec.entry at a .py module.",
            location=str(entry),
        )
    key = (str(entry), stat.st_mtime_ns, stat.st_size)
    if cache:
        with _lock:
            cached = _cache.get(key)
        if cached is not None:
            return cached
    module = _execute(entry, _private_name(entry, kind), kind)
    if cache:
        with _lock:
            _cache[key] = module
    return module


def _execute(entry: Path, name: str, kind: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        name, entry, submodule_search_locations=[str(entry.parent)]
    )
    if spec is None or spec.loader is None:  # pragma: no cover - only for odd file systems
        raise ToolLoadError(f"cannot load {kind} entry {entry}", code="E_TOOL_LOAD")
    module = importlib.util.module_from_spec(spec)
    # Registered while executing so dataclasses, pickling and relative imports can find it.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        # list(): a snapshot taken in one step; other threads (connectors starting in this
        # process) may import while we look, and iterating the live dict would then fail.
        for mod in [m for m in list(sys.modules) if m == name or m.startswith(name + ".")]:
            sys.modules.pop(mod, None)
        if not isinstance(exc, Exception):
            raise
        where = str(entry)
        if isinstance(exc, SyntaxError) and exc.lineno:
            where = f"{entry}:{exc.lineno}"
        raise ToolLoadError(
            f"{kind} entry {entry.name} failed to load: {type(exc).__name__}: {mask(str(exc))}",
            code="E_TOOL_LOAD",
            suggestion="Fix the error in the entry module "
            "(run it with python to see the traceback).",
            location=where,
        ) from exc
    return module
