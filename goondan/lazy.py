"""Package exports imported on first use (PEP 562 module ``__getattr__``).

A package whose ``__init__`` re-exports names from its submodules would import all of them with
the package; ``goondan.config`` and ``goondan.workspace`` instead map each name to the
submodule that defines it and import that submodule when the name is first read, so a light
submodule (``goondan.config.dotenv``, ``goondan.workspace.paths``) loads alone
(docs/runtime.md "Performance").
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``homes`` maps an exported name to the
    submodule (relative to ``package``) that defines it."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{home}"), name)
        namespace[name] = value  # later lookups skip this hook
        return value

    return __getattr__
