"""goondan: a declarative agent-swarm runtime.

Public API (imported lazily so ``import goondan`` and ``goondan --help`` stay fast)::

    from goondan import load_bundle, validate_bundle, BundleError, Runtime
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "BundleError",
    "GoondanError",
    "Runtime",
    "__version__",
    "load_bundle",
    "validate_bundle",
]

_LAZY = {
    "load_bundle": ("goondan.config", "load_bundle"),
    "validate_bundle": ("goondan.config", "validate_bundle"),
    "BundleError": ("goondan.errors", "BundleError"),
    "GoondanError": ("goondan.errors", "GoondanError"),
    "Runtime": ("goondan.runtime", "Runtime"),
}

if TYPE_CHECKING:
    from goondan.config import load_bundle, validate_bundle
    from goondan.errors import BundleError, GoondanError
    from goondan.runtime import Runtime


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'goondan' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value
