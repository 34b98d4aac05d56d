"""Compiled dataclass methods, reused across starts (docs/runtime.md "Performance").

``@dataclass`` writes the source of each class's ``__init__``, ``__repr__`` and ``__eq__`` and
compiles it with ``exec`` when the class is created. goondan defines about 80 dataclasses on the
path of ``goondan repl``, and compiling their methods is the largest single cost of its start.
Measured (``scripts/bench_cold.py --instructions --without codecache``, callgrind, every process
of the command): without it ``repl --input`` runs 27.7 % more instructions (607 M → 775 M),
``run --input`` 33.4 % (1274 M → 1700 M) and ``goondan stop`` 20.1 % (391 M → 470 M).
:func:`install` gives the ``dataclasses`` module an ``exec`` that looks the source up in a table of
code objects kept from earlier starts and compiles only what is new; the resulting functions are the
same as compiled ones (same source, same flags, ``"<string>"`` as file name).

The table is stored the way Python stores bytecode: ``marshal`` data in the ``__pycache__``
directory of the goondan package (or under ``sys.pycache_prefix``), named after the
interpreter's cache tag, or in ``$GOONDAN_CACHE_DIR``. It is written atomically at exit when a
start compiled something new, never when ``sys.dont_write_bytecode`` is set
(``PYTHONDONTWRITEBYTECODE``); an unreadable, unwritable or malformed file only means compiling
as usual. ``GOONDAN_NO_CACHE=1`` turns it off. It is installed by the ``goondan`` command only,
never by ``import goondan``.
"""

from __future__ import annotations

import builtins
import contextlib
import marshal
import os
import sys
from pathlib import Path
from types import CodeType
from typing import Any

__all__ = ["cache_file", "install", "save"]

_FORMAT = 2
_MAX_ENTRIES = 4000
_MAX_BYTES = 16 * 1024 * 1024

# source → marshalled code object: each is unmarshalled only when its class is created.
_table: dict[str, bytes] = {}
_new: dict[str, CodeType] = {}
_used: set[str] = set()
_installed = False


def cache_file(env: Any = os.environ) -> Path | None:
    """Where the table lives (``None`` when the interpreter keeps no bytecode cache tag)."""
    tag = sys.implementation.cache_tag
    if tag is None:
        return None
    name = f"dataclass-methods.{tag}.bin"
    override = env.get("GOONDAN_CACHE_DIR")
    if override:
        return Path(override).expanduser() / name
    from importlib.util import cache_from_source

    return Path(
        cache_from_source(str(Path(__file__).resolve().with_name("dataclass_methods.py")))
    ).with_name(name)


def _cached_exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
    if isinstance(source, str):
        blob = _table.get(source)
        code = None
        if blob is not None:
            with contextlib.suppress(ValueError, EOFError, TypeError):
                loaded = marshal.loads(blob)
                code = loaded if isinstance(loaded, CodeType) else None
        if code is None:
            # exec() of a string compiles it with the caller's future flags: dataclasses has none.
            code = compile(source, "<string>", "exec", dont_inherit=True)
            _new[source] = code
        else:
            _used.add(source)
        source = code
    builtins.exec(source, globals, locals)


def install(env: Any = os.environ) -> None:
    """Load the table and route ``dataclasses``' compilation through it (once per process)."""
    global _installed
    if _installed or (env.get("GOONDAN_NO_CACHE") or "").strip().lower() not in (
        "",
        "0",
        "false",
        "no",
    ):
        return
    import dataclasses

    if "exec" in vars(dataclasses):  # someone else's hook: leave it alone
        return
    path = cache_file(env)
    if path is None:
        return
    _installed = True
    _table.update(_read(path))
    dataclasses.exec = _cached_exec  # type: ignore[attr-defined]  # a module global shadows the builtin
    import atexit

    atexit.register(save, path)


def _read(path: Path) -> dict[str, bytes]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(_MAX_BYTES + 1)
        data = marshal.loads(raw) if len(raw) <= _MAX_BYTES else None
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if (
        not isinstance(data, dict)
        or data.get("format") != _FORMAT
        or not isinstance(data.get("entries"), dict)
    ):
        return {}
    entries: dict[str, bytes] = {}
    for key, value in data["entries"].items():
        if not (isinstance(key, str) and isinstance(value, bytes)):
            return {}
        entries[key] = value
    return entries


def save(path: Path | None = None) -> None:
    """Write the table if this process compiled something new (atomic; errors are ignored)."""
    if not _new or sys.dont_write_bytecode:
        return
    target = path or cache_file()
    if target is None:
        return
    new = {source: marshal.dumps(code) for source, code in _new.items()}
    entries = {**_table, **new}
    if len(entries) > _MAX_ENTRIES:  # keep what this process used
        entries = {k: v for k, v in entries.items() if k in _used or k in new}
    with contextlib.suppress(OSError, ValueError):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as handle:
                handle.write(marshal.dumps({"format": _FORMAT, "entries": entries}))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _table.update(new)
    _new.clear()
