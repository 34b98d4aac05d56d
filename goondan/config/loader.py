"""Reading a bundle: find its YAML files and dependency manifests, check envelopes and schemas.

The result is every resource that could be read (dependencies first, then local ones, each in
a deterministic order: files sorted by path, documents in file order) plus all diagnostics.
Cross-resource checks (references, entry files, capabilities) live in
:mod:`goondan.config.validate`.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.config import pydist
from goondan.config.lockfile import drift
from goondan.config.packages import Located, default_state_root, locate_package, read_lock
from goondan.config.refs import KINDS
from goondan.config.resources import (
    ENVELOPE_FIELDS,
    KIND_SCHEMAS,
    METADATA_SCHEMA,
    NAME_PATTERN,
    PACKAGE_NAME_PATTERN,
    SUPPORTED_API_VERSIONS,
    Location,
    Resource,
)
from goondan.config.schema import Checker, did_you_mean, type_name
from goondan.config.sourcefile import display_path
from goondan.config.sourcefile import scan_yaml_files as _scan
from goondan.config.yamlsource import YamlDocument, read_yaml_file
from goondan.errors import Diagnostic, GoondanError

__all__ = ["READ_CODES", "LoadResult", "display_path", "load_resources"]

# Problems that mean "the bundle cannot be read" (CLI exit 3) rather than "it is invalid" (4).
READ_CODES = frozenset({
    "E_CONFIG_NOT_FOUND", "E_CONFIG_PARSE_ERROR", "E_CONFIG_FILE_TOO_LARGE",
    "E_CONFIG_TOO_MANY_DOCUMENTS", "E_CONFIG_FILE_UNREADABLE", "E_CONFIG_ALIAS_LIMIT",
    "E_CONFIG_TOO_DEEP",
})


@dataclass
class LoadResult:
    """Everything read from disk, before cross-resource validation."""

    root: Path
    resources: list[Resource] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    package: Resource | None = None
    package_roots: dict[str, Path] = field(default_factory=dict)
    located: dict[str, Located] = field(default_factory=dict)

    @property
    def unreadable(self) -> bool:
        return any(d.code in READ_CODES for d in self.diagnostics)


def _file_error(result: LoadResult, code: str, message: str, path: Path, suggestion: str) -> None:
    result.diagnostics.append(
        Diagnostic(code, message, file=display_path(path), suggestion=suggestion)
    )


def _check_name(kind: str, name: str, ck: Checker) -> None:
    path = ("metadata", "name")
    if not name.strip():
        ck.error("metadata.name must not be empty", path, "give the resource a name",
                 code="E_CONFIG_INVALID_NAME")
        return
    if kind == "Package":
        if not PACKAGE_NAME_PATTERN.match(name):
            ck.warning(
                "W_CONFIG_NAMING_CONVENTION",
                f"package name {name!r} is not 'name' or '@scope/name'",
                path,
                "use lower-case letters, digits, '-', '.', '_' (optionally @scope/)",
            )
        return
    if "/" in name or any(c.isspace() for c in name):
        ck.error(f"name {name!r} must not contain '/' or spaces", path,
                 "use lower-case letters, digits and '-'", code="E_CONFIG_INVALID_NAME")
        return
    if kind == "Tool" and "__" in name:
        ck.error(f"Tool name {name!r} must not contain '__'", path,
                 "'__' separates the Tool name from the export name in tool calls; use '-'")
        return
    if not NAME_PATTERN.match(name):
        ck.warning("W_CONFIG_NAMING_CONVENTION",
                   f"name {name!r} should match ^[a-z][a-z0-9-]*$ (at most 63 characters)", path,
                   "use lower-case letters, digits and '-', starting with a letter")


def _to_resource(doc: YamlDocument, root: Path, package: str | None,
                 diagnostics: list[Diagnostic]) -> Resource | None:
    """Check the envelope of one document and build its :class:`Resource` (``None`` if unusable)."""
    data = doc.data
    ck = Checker(doc, None, diagnostics)
    if not isinstance(data, dict):
        ck.error(f"a resource document must be a mapping, got {type_name(data)}", (),
                 "start the document with 'apiVersion: goondan.ai/v1' and 'kind: ...'")
        return None
    kind = data.get("kind")
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if isinstance(kind, str) and kind in KINDS and isinstance(name, str):
        ck.resource = f"{kind}/{name}"
    for p in doc.problems:  # duplicate keys found while parsing
        p.resource = ck.resource
        diagnostics.append(p)
    if "kind" not in data:
        ck.error("document has no 'kind'", (), f"add 'kind:' (one of {', '.join(KINDS)})",
                 code="E_CONFIG_UNKNOWN_KIND")
        return None
    if not isinstance(kind, str) or kind not in KINDS:
        guess = did_you_mean(str(kind), KINDS) if isinstance(kind, str) else None
        ck.error(f"unknown kind {kind!r}", ("kind",),
                 f"did you mean {guess!r}?" if guess else f"use one of: {', '.join(KINDS)}",
                 code="E_CONFIG_UNKNOWN_KIND")
        return None
    api_version = data.get("apiVersion")
    if api_version not in SUPPORTED_API_VERSIONS:
        got = "missing" if "apiVersion" not in data else repr(api_version)
        ck.error(
            f"unsupported apiVersion ({got}); supported: {', '.join(SUPPORTED_API_VERSIONS)}",
            ("apiVersion",) if "apiVersion" in data else (),
            f"write 'apiVersion: {SUPPORTED_API_VERSIONS[0]}'",
            code="E_CONFIG_UNSUPPORTED_API_VERSION",
        )
    for key in data:
        if key not in ENVELOPE_FIELDS and not str(key).startswith("x-"):
            guess = did_you_mean(str(key), ENVELOPE_FIELDS)
            ck.error(f"unknown top-level field {key!r}", (key,),
                     f"did you mean {guess!r}?" if guess else f"{kind} fields go under 'spec:'",
                     code="E_CONFIG_UNKNOWN_FIELD", key=True)
    if "metadata" not in data:
        ck.error("missing required field 'metadata'", (), "add metadata: {name: my-name}",
                 code="E_CONFIG_INVALID_NAME")
        return None
    METADATA_SCHEMA.check(metadata, ("metadata",), ck)
    if not isinstance(name, str):
        if isinstance(metadata, dict) and "name" in metadata:
            ck.error(f"metadata.name must be a string, got {type_name(name)}", ("metadata", "name"),
                     "quote the name", code="E_CONFIG_INVALID_NAME")
        return None
    _check_name(kind, name, ck)
    spec = data.get("spec")
    if spec is None and kind != "Package":
        ck.error(
            f"missing required field 'spec' in {kind}", (), "add 'spec:' with the kind's fields"
        )
        spec = {}
    elif spec is None:
        spec = {}
    if not isinstance(spec, dict):
        ck.error(f"spec must be a mapping, got {type_name(spec)}", ("spec",), "write spec: {...}")
        spec = {}
    else:
        KIND_SCHEMAS[kind].check(spec, ("spec",), ck)
    location = Location(doc.file, doc.display, doc.index, doc.line, doc.column)
    meta = metadata if isinstance(metadata, dict) else {}
    return Resource(str(api_version), kind, name, meta, spec, root, location, package, doc)


@dataclass
class _Pending:
    name: str
    entry: dict[str, Any]
    declaring_root: Path
    referrer: Resource | None
    index: int


def _read_file(path: Path, root: Path, package: str | None, result: LoadResult,
               *, manifest: bool) -> list[Resource]:
    """Read one YAML file into resources; ``manifest`` marks the file allowed to hold a Package."""
    display = display_path(path)
    try:
        real = path.resolve()
        real_root = root.resolve()
        inside = real == real_root or real_root in real.parents
    except (OSError, RuntimeError):
        inside = False
    if not inside:
        _file_error(
            result,
            "E_CONFIG_PATH_ESCAPE",
            "YAML file is a symlink pointing outside the bundle",
            path,
            "copy the file into the bundle instead of linking it",
        )
        return []
    result.files.append(path)
    docs, problems = read_yaml_file(path, display)
    result.diagnostics.extend(problems)
    out: list[Resource] = []
    for doc in docs:
        resource = _to_resource(doc, root, package, result.diagnostics)
        if resource is None:
            continue
        if resource.kind == "Package" and not (manifest and doc.index == 0):
            ck = Checker(doc, resource.id, result.diagnostics)
            if manifest and doc.index != 0 and any(r.kind == "Package" for r in out):
                ck.error("only one Package document is allowed", ("kind",),
                         "merge the two Package documents", code="E_CONFIG_PACKAGE_DOC_DUPLICATED")
            else:
                ck.error(
                    "the Package document must be the first document of goondan.yaml",
                    ("kind",),
                    "move it to the top of goondan.yaml",
                    code="E_CONFIG_PACKAGE_DOC_POSITION",
                )
            continue
        out.append(resource)
    return out


def load_resources(
    path: str | os.PathLike[str], *, state_root: Path | None, builtin_root: Path
) -> LoadResult:
    """Read the bundle at ``path`` (directory or single YAML file) and its dependencies."""
    target = Path(path).expanduser()
    if target.is_file():
        root = target.resolve().parent
        files = [target.absolute()]
        result = LoadResult(root)
    else:
        root = target.resolve() if target.is_dir() else target.absolute()
        result = LoadResult(root)
        manifest = next(
            (root / n for n in ("goondan.yaml", "goondan.yml") if (root / n).is_file()), None
        )
        if not target.is_dir() or manifest is None:
            where = "does not exist" if not target.exists() else "has no goondan.yaml"
            _file_error(result, "E_CONFIG_NOT_FOUND", f"bundle path {str(path)!r} {where}", target,
                        "pass a bundle directory (containing goondan.yaml) or a YAML file; "
                        "'goondan init' creates one")
            return result
        files = []  # filled after the Package document is known (path dependencies are skipped)

    manifest_file = files[0] if files else next(
        root / n for n in ("goondan.yaml", "goondan.yml") if (root / n).is_file())
    local = _read_file(manifest_file, root, None, result, manifest=True)
    package = local[0] if local and local[0].kind == "Package" else None
    result.package = package
    skip: set[Path] = set()
    if package is not None:
        for dep in package.spec.get("dependencies") or []:
            if isinstance(dep, dict) and isinstance(dep.get("path"), str):
                skip.add((root / dep["path"]).resolve())
    if not files:
        for extra in _scan(root, skip):
            if extra != manifest_file:
                local.extend(_read_file(extra, root, None, result, manifest=False))
    if package is None and not result.unreadable:
        result.diagnostics.append(
            Diagnostic(
                "W_CONFIG_NO_PACKAGE",
                "bundle has no Package document",
                severity="warning",
                file=display_path(manifest_file),
                suggestion="add 'kind: Package' with metadata.name "
                "as the first document of goondan.yaml",
            )
        )
    deps = _load_dependencies(result, package, root, state_root, builtin_root)
    result.resources = deps + local
    return result


def _load_dependencies(result: LoadResult, package: Resource | None, root: Path,
                       state_root: Path | None, builtin_root: Path) -> list[Resource]:
    if package is None or not package.spec.get("dependencies"):
        return []
    if state_root is None:
        try:
            state_root = default_state_root()
        except GoondanError as exc:  # e.g. an unreadable ~/.goondan/config.toml
            Checker(package.source, package.id, result.diagnostics).error(
                f"cannot find the installed packages: {exc.message}", ("spec", "dependencies"),
                exc.suggestion or "pass --state-root", code=exc.code)
            return []
    lock = read_lock(root)
    python_packages: dict[str, list[pydist.PythonPackage]] | None = None
    local_name = package.name
    edges: dict[str, list[tuple[str, Resource, int]]] = {}
    loaded: dict[str, Path] = {local_name: root}
    out: list[Resource] = []
    queue: deque[_Pending] = deque(_pending(package, root))
    while queue:
        item = queue.popleft()
        if item.referrer is not None:
            edges.setdefault(item.referrer.package or local_name, []).append(
                (item.name, item.referrer, item.index))
        if item.name in loaded:
            continue
        if python_packages is None and not isinstance(item.entry.get("path"), str):
            python_packages = pydist.discover()
        located, problem = locate_package(
            item.entry, declaring_root=item.declaring_root, lock=lock,
            state_root=state_root, builtin_root=builtin_root, python_packages=python_packages)
        where = ("spec", "dependencies", item.index)
        if located is None:
            if problem is not None and item.referrer is not None:
                Checker(item.referrer.source, item.referrer.id, result.diagnostics).error(
                    problem.message, where, problem.suggestion, code=problem.code)
            continue
        if item.referrer is not None:
            for warning in located.warnings:
                Checker(item.referrer.source, item.referrer.id, result.diagnostics).warning(
                    warning.code, warning.message, where, warning.suggestion)
        dep_root, manifest = located.root, located.manifest
        loaded[item.name] = dep_root
        result.package_roots[item.name] = dep_root
        result.located[item.name] = located
        resources = _read_file(manifest, dep_root, item.name, result, manifest=True)
        dep_package = resources[0] if resources and resources[0].kind == "Package" else None
        if dep_package is not None:
            queue.extend(_pending(dep_package, dep_root))
        out.extend(resources)
    _report_cycles(result, edges, local_name)
    for _name, warning in drift(root, result.located):
        Checker(package.source, package.id, result.diagnostics).warning(
            warning.code, warning.message, ("spec", "dependencies"), warning.suggestion)
    return out


def _pending(package: Resource, root: Path) -> list[_Pending]:
    items = []
    for i, dep in enumerate(package.spec.get("dependencies") or []):
        if isinstance(dep, dict) and isinstance(dep.get("name"), str) and dep["name"].strip():
            items.append(_Pending(dep["name"], dep, root, package, i))
    return items


def _report_cycles(result: LoadResult, edges: dict[str, list[tuple[str, Resource, int]]],
                   start: str) -> None:
    reported: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1 = on stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target, referrer, index in edges.get(node, []):
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target):], target]
                key = frozenset(cycle)
                if key not in reported:
                    reported.add(key)
                    Checker(referrer.source, referrer.id, result.diagnostics).error(
                        f"circular package dependency: {' → '.join(cycle)}",
                        ("spec", "dependencies", index), "remove one dependency of the cycle",
                        code="E_CONFIG_PACKAGE_CYCLE")
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    visit(start)
    for node in list(edges):
        if node not in state:
            visit(node)
