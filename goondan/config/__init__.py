"""Bundle loading and validation: YAML → validated, resolved :class:`Bundle`.

``load_bundle`` raises on problems; ``validate_bundle`` reports every problem in one pass.
See ``docs/configuration.md`` for the resource reference and ``docs/errors.md`` for the codes.

The names below are imported on first use, so that a light submodule (``goondan.config.dotenv``,
``goondan.config.cache``) does not load the validator and PyYAML (docs/runtime.md "Performance").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from goondan.lazy import lazy_exports

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
    "AgentSpec": "bundle", "Bundle": "bundle", "ExtensionBinding": "bundle", "ModelBinding": "bundle",
    "SwarmSpec": "bundle", "ToolBinding": "bundle", "ToolExport": "bundle", "ObjectRef": "refs",
    "Location": "envelope", "Resource": "envelope", "ValidationReport": "validate",
    "load_bundle": "validate", "validate_bundle": "validate", "resolve_value": "values",
}


__getattr__ = lazy_exports(__name__, _HOME)
