"""Loading entry modules by file path (Python adaptation of seed 002 §2.7 / §4.3)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from goondan.errors import ToolLoadError
from goondan.tools.loader import PRIVATE_PREFIX, load_entry_module
from tests.support.pipeline_harness import TOOL_FIXTURES


def test_entry_is_loaded_under_a_private_name_without_touching_sys_path() -> None:
    """Issue 4 Build 2: entry modules load by path, each under a private module name."""
    before = list(sys.path)
    module = load_entry_module(TOOL_FIXTURES / "basic.py")
    assert sys.path == before
    assert module.__name__.startswith(PRIVATE_PREFIX)
    assert "basic" not in sys.modules or sys.modules["basic"] is not module
    assert callable(module.handlers["echo"])


def test_fresh_loads_give_separate_modules_and_cached_loads_share() -> None:
    """Loader docs: extensions load fresh per instance; tool modules are cached per file version."""
    a = load_entry_module(TOOL_FIXTURES / "basic.py")
    b = load_entry_module(TOOL_FIXTURES / "basic.py")
    assert a is not b and a.__name__ != b.__name__
    c = load_entry_module(TOOL_FIXTURES / "basic.py", cache=True)
    assert load_entry_module(TOOL_FIXTURES / "basic.py", cache=True) is c


def test_relative_sibling_imports_work() -> None:
    """Loader docs: an entry may import its sibling files relatively."""
    module = load_entry_module(TOOL_FIXTURES / "pkgtool" / "index.py")
    assert module.handlers["greet"](None, {"name": "ada"}) == "hello ada"


def test_missing_file_and_non_python_file(tmp_path: Path) -> None:
    """seed 002 §15: the entry path must exist (E_TOOL_LOAD with a suggestion)."""
    with pytest.raises(ToolLoadError) as info:
        load_entry_module(tmp_path / "nope.py")
    assert info.value.code == "E_TOOL_LOAD" and info.value.suggestion
    other = tmp_path / "tool.ts"
    other.write_text("export const handlers = {}")
    with pytest.raises(ToolLoadError, match="Python file"):
        load_entry_module(other)


def test_errors_while_importing_are_reported_with_location(tmp_path: Path) -> None:
    """seed 004 §13.5 rule 1: load errors carry a standard code and the cause."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""doc"""\ndef broken(:\n    pass\n')
    with pytest.raises(ToolLoadError) as info:
        load_entry_module(bad)
    assert info.value.code == "E_TOOL_LOAD"
    assert "SyntaxError" in info.value.message and info.value.location == f"{bad}:2"
    raising = tmp_path / "raising.py"
    raising.write_text("raise RuntimeError('nope')\n")
    with pytest.raises(ToolLoadError, match="RuntimeError: nope"):
        load_entry_module(raising)
    assert not [m for m in sys.modules if m.startswith(PRIVATE_PREFIX) and "raising" in m]


def test_a_package_directory_entry_loads_its_init_with_relative_imports(tmp_path: Path) -> None:
    """Issue 2: an entry may be a Python file or a package inside the bundle; both load."""
    package = tmp_path / "weather"
    package.mkdir()
    (package / "helpers.py").write_text("def forecast(city):\n    return f'sunny in {city}'\n")
    (package / "__init__.py").write_text(
        "from .helpers import forecast\n\nhandlers = "
        "{'get': lambda ctx, args: forecast(args['city'])}\n"
    )
    module = load_entry_module(package)
    assert module.handlers["get"](None, {"city": "Seoul"}) == "sunny in Seoul"
    with pytest.raises(ToolLoadError):
        load_entry_module(tmp_path)  # a directory without __init__.py is not a package


class _ImportDuringCleanup(str):
    """A ``sys.modules`` key whose comparison imports a module, once, while armed: it stands for
    another thread (a connector starting in the same process) importing exactly while a failed
    load cleans ``sys.modules`` up."""

    armed = False
    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        if _ImportDuringCleanup.armed:
            _ImportDuringCleanup.armed = False
            sys.modules["_goondan_test_imported_meanwhile"] = types.ModuleType("meanwhile")
        return str.__eq__(self, other)


def test_a_failed_load_reports_its_own_error_while_other_threads_import(tmp_path: Path) -> None:
    """seed 004 §13.5 rule 1: a failing entry reports its real error even when another thread
    imports while the failed load cleans ``sys.modules`` up (no "dictionary changed size during
    iteration" instead of the cause)."""
    raising = tmp_path / "raising.py"
    raising.write_text("raise RuntimeError('the real cause')\n")
    probe = _ImportDuringCleanup("_goondan_test_probe")
    sys.modules[probe] = types.ModuleType("probe")
    try:
        _ImportDuringCleanup.armed = True
        with pytest.raises(ToolLoadError, match="RuntimeError: the real cause"):
            load_entry_module(raising)
        assert not _ImportDuringCleanup.armed  # the cleanup did run while "another thread" imported
    finally:
        _ImportDuringCleanup.armed = False
        sys.modules.pop(probe, None)
        sys.modules.pop("_goondan_test_imported_meanwhile", None)
    assert not [m for m in sys.modules if m.startswith(PRIVATE_PREFIX) and "raising" in m]
