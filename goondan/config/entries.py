"""File references inside a bundle: ``entry`` modules and ``systemRef`` prompts.

Paths are relative to the owning root (the bundle or the dependency package); absolute paths,
``..`` segments and symlinks leading outside the root are refused. Entry modules are checked
with :mod:`ast` only, never imported: a Tool module defines ``handlers`` (with a key per export
when it is a dict literal), an Extension module ``register``, a Connector module ``run``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from goondan.config.sourcefile import FileTooLargeError, NotRegularFileError, read_regular_file

__all__ = ["ModuleSymbols", "module_symbols", "resolve_inside"]

MAX_MODULE_BYTES = 4 * 1024 * 1024


def resolve_inside(root: Path, relative: str) -> tuple[Path | None, str | None]:
    """``root/relative`` if it stays inside ``root`` (after symlinks), else ``(None, reason)``."""
    pure = PurePosixPath(relative.replace("\\", "/"))
    if pure.is_absolute() or relative.startswith("~") or (len(relative) > 1 and relative[1] == ":"):
        return None, f"path {relative!r} is absolute"
    if ".." in pure.parts:
        return None, f"path {relative!r} leaves its root with '..'"
    candidate = root.joinpath(*pure.parts) if pure.parts else root
    try:
        real = candidate.resolve()
        real_root = root.resolve()
    except (OSError, RuntimeError):  # symlink loops
        return None, f"path {relative!r} cannot be resolved (symlink loop?)"
    if real != real_root and real_root not in real.parents:
        return None, f"path {relative!r} points outside its root through a symlink"
    return candidate, None


@dataclass
class ModuleSymbols:
    """Top-level names of a module, and the keys of a literal ``handlers`` dict if any."""

    names: set[str] = field(default_factory=set)
    star_import: bool = False
    handler_keys: set[str] | None = None  # None: not a literal we can read
    error: str | None = None

    def defines(self, name: str) -> bool:
        return self.star_import or name in self.names


# Parsed entry modules by (file, mtime, size): resources that share an entry module parse it
# once. ``scripts/bench_validate.py --entry-cache``: without it validating the generated
# 1,000-resource bundle (two shared entry modules) takes 12-13 % more CPU; examples/showcase,
# whose entries are distinct files, gains nothing measurable.
_cache: dict[tuple[Path, int, int], ModuleSymbols] = {}


def _collect(body: list[ast.stmt], out: ModuleSymbols) -> None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        out.names.add(sub.id)
                        if sub.id == "handlers":
                            out.handler_keys = _dict_keys(node.value)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    out.star_import = True
                else:
                    out.names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If | ast.Try | ast.With):
            for part in ("body", "orelse", "finalbody"):
                _collect(getattr(node, part, []) or [], out)
            for handler in getattr(node, "handlers", []) or []:
                _collect(handler.body, out)


def _dict_keys(value: ast.expr | None) -> set[str] | None:
    if isinstance(value, ast.Dict):
        keys: set[str] = set()
        for key in value.keys:
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return None  # ``**other`` or computed keys: cannot tell
            keys.add(key.value)
        return keys
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict"
            and not value.args and all(k.arg for k in value.keywords)):
        return {str(k.arg) for k in value.keywords}
    return None


def module_symbols(path: Path) -> ModuleSymbols:
    """Parse ``path`` (a ``.py`` file or a package directory) and list its top-level names."""
    target = path / "__init__.py" if path.is_dir() else path
    try:
        stat = target.stat()
    except OSError as exc:
        return ModuleSymbols(error=f"cannot read {target.name}: {exc.strerror or exc}")
    key = (target, stat.st_mtime_ns, stat.st_size)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    out = ModuleSymbols()
    if stat.st_size > MAX_MODULE_BYTES:
        out.star_import = True  # too big to inspect cheaply: assume it is fine
    else:
        try:
            source = read_regular_file(target, limit=MAX_MODULE_BYTES)
            tree = ast.parse(source, filename=str(target))
            _collect(tree.body, out)
        except SyntaxError as exc:
            out.error = f"{target.name}:{exc.lineno}: syntax error: {exc.msg}"
        except NotRegularFileError as exc:
            out.error = f"{target.name} is {exc.what}, not a regular file"
        except FileTooLargeError:
            out.star_import = True  # grew past the limit since the stat: as above
        except (OSError, ValueError) as exc:
            out.error = f"cannot parse {target.name}: {exc}"
    _cache[key] = out
    return out
