"""The package's layering rule: a module imports only from its own layer or below.

See docs/architecture.md. Imports under ``if TYPE_CHECKING:`` and imports inside functions
(lazy imports for start-up speed) are still checked: laziness is no excuse for an upward
dependency, except where a layer explicitly delegates by name (``LAZY_ALLOWED``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "goondan"

LAYERS: dict[str, int] = {
    "errors": 0, "types": 0, "secrets": 0, "text": 0, "codecache": 0,
    "config": 1, "conversation": 1, "workspace": 1, "tools": 1, "http": 1,
    "storage": 2,
    "llm": 2, "pipeline": 2, "mcp": 2, "a2a": 2, "otlp": 2,
    "extensions": 3, "runtime": 3, "console": 3,
    "ipc": 4,
    "connectors": 5,
    "swarm": 6, "engines": 6,
    "base": 7, "builtin_packages": 7,
    "cli": 8, "commands": 8, "__main__": 8, "__init__": 8,
    "studio": 8,  # the web page's server: reads what inspect/status/approvals read, from commands
}

# (importer area, imported area): lazy delegation by name that does not create a real cycle.
LAZY_ALLOWED: set[tuple[str, str]] = set()


def _area(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "goondan":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "builtin_packages" not in p.parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_imports_point_down(path: Path) -> None:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    own = _area(".".join(rel.parts))
    assert own is not None
    own_layer = LAYERS.get(own)
    assert own_layer is not None, (
        f"{own!r} has no layer in tests/test_layers.py / docs/architecture.md"
    )
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            target = _area(name)
            if target is None or target == own or (own, target) in LAZY_ALLOWED:
                continue
            layer = LAYERS.get(target)
            assert layer is not None, f"{path}: imports unknown area {name}"
            assert layer <= own_layer, (
                f"{path.relative_to(ROOT.parent)} (layer "
                f"{own_layer}) imports {name} (layer {layer})"
            )


def test_only_the_http_layer_imports_urllib3() -> None:
    """docs/architecture.md "HTTP": pools, timeouts, retries and urllib3's errors are handled in
    one place, ``goondan/http/``; every other module (the built-in packages included) goes
    through it."""
    outside: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("http/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            outside += [f"{rel}: {m}" for m in modules if m.split(".")[0] == "urllib3"]
    assert outside == []


def _imported_areas(area: str) -> dict[str, set[str]]:
    """Every goondan area each module of ``area`` imports (lazy and TYPE_CHECKING ones too)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / area).rglob("*.py")):
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            targets |= {t for t in map(_area, names) if t is not None}
        found[str(path.relative_to(ROOT.parent))] = targets
    return found


def test_the_wire_imports_neither_connectors_nor_the_swarm() -> None:
    """Issue 29: ``ipc`` (the wire) and ``connectors`` no longer import each other, and the wire
    knows nothing of what runs a swarm over it."""
    offending = {m: sorted(t & {"connectors", "swarm"}) for m, t in _imported_areas("ipc").items()}
    assert {m: t for m, t in offending.items() if t} == {}


def test_connectors_do_not_import_the_swarm_that_runs_them() -> None:
    """Issue 29: a connector process and its contract use the wire only; the connection runtime,
    ingress and connector supervision are part of running the swarm (``swarm/``)."""
    offending = {
        m: sorted(t & {"swarm", "engines"}) for m, t in _imported_areas("connectors").items()
    }
    assert {m: t for m, t in offending.items() if t} == {}


def test_otlp_encodes_and_does_not_import_the_runtime() -> None:
    """Issue 29: ``runtime`` and ``otlp`` no longer import each other. ``otlp`` is the OTLP trace
    schema (encoding, endpoint variables) below the runtime; the exporter that turns runtime
    events into OTLP spans is a runtime sink (``runtime/otlp_exporter.py``)."""
    offending = {
        m: sorted(t & {"runtime", "extensions", "ipc", "swarm"})
        for m, t in _imported_areas("otlp").items()
    }
    assert {m: t for m, t in offending.items() if t} == {}
    assert LAYERS["otlp"] < LAYERS["runtime"]


# docs/architecture.md, Conventions: modules stay around 150–600 lines and are split, into
# cohesive modules, before ~800 (not squeezed: ruff's E501 holds lines to 100 columns). Every
# module of goondan/ is held to it, the built-in package's included.
MAX_LINES = 800


@pytest.mark.parametrize(
    "path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_module_is_split_before_800_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT.parent)} has {lines} lines; split it"


# Decision 19: the runtime needs nothing beyond the standard library and these four.
RUNTIME_DEPENDENCIES = {
    "click": "click",
    "pyyaml": "yaml",
    "tomli-w": "tomli_w",
    "urllib3": "urllib3",
}
# Optional extras, imported only by the module that offers them.
OPTIONAL_IMPORTS = {
    "ray": "engines/ray/",
    "psycopg": "storage/postgres/",
    "psycopg_pool": "storage/postgres/",
}


def test_runtime_dependencies_are_only_click_pyyaml_tomli_w_and_urllib3() -> None:
    """Decision 19 (spec README): no extra runtime dependencies — pyproject lists exactly click,
    pyyaml, tomli-w and urllib3, and every module of goondan (the built-in packages included)
    imports only those, the standard library, or an optional extra inside its own module."""
    import re
    import sys
    import tomllib

    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {
        re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0].lower() for spec in project["dependencies"]
    }
    assert names == set(RUNTIME_DEPENDENCIES)
    allowed = (
        set(sys.stdlib_module_names)
        | set(RUNTIME_DEPENDENCIES.values())
        | {"goondan", "__future__"}
    )
    outside: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in allowed and not rel.startswith(OPTIONAL_IMPORTS.get(top, "\0")):
                    outside.append(f"{rel}: {module}")
    assert outside == []
