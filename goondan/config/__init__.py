"""Bundle loading and validation: YAML → validated, resolved :class:`Bundle`.

``load_bundle`` raises on problems; ``validate_bundle`` reports every problem in one pass.
See ``docs/configuration.md`` for the resource reference and ``docs/errors.md`` for the codes.

The names below are imported on first use (PEP 562 module ``__getattr__``), so that a light
submodule (``goondan.config.dotenv``, ``goondan.config.cache``) loads without the validator and
PyYAML (docs/runtime.md "Performance"). Measured (``scripts/bench_cold.py --instructions
--without lazy-config``, callgrind, every process of the command): importing them with the
package costs ``goondan stop`` 9.0 % more instructions (391 M → 427 M), ``repl --input``
2.9 % and ``run --input`` 2.8 %. (The same for ``goondan.workspace`` bought at most 3.8 %, and
was removed.)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goondan.config.bundle import (
        AgentSpec,
        Bundle,
        ExtensionBinding,
        ModelBinding,
        SwarmSpec,
        ToolBinding,
        ToolExport,
    )
    from goondan.config.envelope import Location, Resource
    from goondan.config.refs import ObjectRef
    from goondan.config.validate import ValidationReport, load_bundle, validate_bundle
    from goondan.config.values import resolve_value

__all__ = [
    "AgentSpec",
    "Bundle",
    "ExtensionBinding",
    "Location",
    "ModelBinding",
    "ObjectRef",
    "Resource",
    "SwarmSpec",
    "ToolBinding",
    "ToolExport",
    "ValidationReport",
    "load_bundle",
    "resolve_value",
    "validate_bundle",
]

_HOME = {
    "AgentSpec": "bundle",
    "Bundle": "bundle",
    "ExtensionBinding": "bundle",
    "ModelBinding": "bundle",
    "SwarmSpec": "bundle",
    "ToolBinding": "bundle",
    "ToolExport": "bundle",
    "ObjectRef": "refs",
    "Location": "envelope",
    "Resource": "envelope",
    "ValidationReport": "validate",
    "load_bundle": "validate",
    "validate_bundle": "validate",
    "resolve_value": "values",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later lookups skip this function
    return value
