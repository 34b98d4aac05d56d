"""docs/architecture.md names modules that exist: every backticked module path (``goondan/x/y.py``,
``swarm/spawner.py``, ``base/connectors/_http.py``, ``connectors/process.process_main``) and every
bare file name of the "Layers" table (``protocol.py`` in the ``ipc/`` row) is a file of the tree,
and a ``module.name`` reference names something that module defines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
# Where a path written without ``goondan/`` is looked up: the package, then the built-in one.
BASES = (ROOT, ROOT / "goondan", ROOT / "goondan" / "builtin_packages" / "@goondan")
PATH_RE = re.compile(r"`((?:[\w@.-]+/)+\w+)(\.py|\.\w+)?(?:::\w+)?`")


def _missing_paths(text: str) -> list[str]:
    missing = []
    for stem, suffix in PATH_RE.findall(text):
        if suffix == ".py":
            if not any((base / f"{stem}.py").is_file() for base in BASES):
                missing.append(f"{stem}.py")
        elif suffix and not any((base / f"{stem}{suffix}").is_file() for base in BASES):
            # `swarm/agent_process.process_main`: a module and a name it defines
            files = [base / f"{stem}.py" for base in BASES if (base / f"{stem}.py").is_file()]
            name = suffix[1:]
            defined = re.compile(rf"^(?:async def|def|class) {name}\b|^{name}\b.*=", re.M)
            if not any(defined.search(f.read_text(encoding="utf-8")) for f in files):
                missing.append(f"{stem}{suffix}")
    return missing


def _missing_layer_files(text: str) -> list[str]:
    missing = []
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    for row in table.splitlines():
        cells = row.split("|")
        if len(cells) < 5 or not re.fullmatch(r"\s*\d+\s*", cells[1]):
            continue
        package = re.fullmatch(r"\s*`(\w+)/`\s*", cells[2])
        if package is None:  # a row of top-level modules: each file is listed in column 2
            continue
        for name in re.findall(r"`(\w+\.py)`", cells[3]):
            if not (ROOT / "goondan" / package.group(1) / name).is_file():
                missing.append(f"{package.group(1)}/{name}")
        for name in re.findall(r"`(\w+\.py)`", cells[2]):
            if not (ROOT / "goondan" / name).is_file():
                missing.append(name)
    return missing


def test_every_module_path_in_the_architecture_doc_exists() -> None:
    missing = _missing_paths(DOC.read_text(encoding="utf-8"))
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_file_of_the_layers_table_exists_in_its_package() -> None:
    missing = _missing_layer_files(DOC.read_text(encoding="utf-8"))
    assert not missing, f"the Layers table of docs/architecture.md names missing files: {missing}"


def test_the_check_sees_a_wrong_path() -> None:
    assert _missing_paths("`goondan/ipc/supervisor.py` and `swarm/supervisor.py`") == [
        "goondan/ipc/supervisor.py"]
    assert _missing_paths("`swarm/agent_process.process_main`, `swarm/spawner.NoSuch`") == [
        "swarm/spawner.NoSuch"]
    assert _missing_layer_files("## Layers\n| 4 | `ipc/` | `supervisor.py`, `matcher.py` |\n") == [
        "ipc/supervisor.py"]
