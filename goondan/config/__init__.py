"""Bundle loading and validation: YAML → validated, resolved :class:`Bundle`.

``load_bundle`` raises on problems; ``validate_bundle`` reports every problem in one pass.
See ``docs/configuration.md`` for the resource reference and ``docs/errors.md`` for the codes.
"""

from __future__ import annotations

from goondan.config.bundle import (
    AgentSpec,
    Bundle,
    ExtensionBinding,
    ModelBinding,
    SwarmSpec,
    ToolBinding,
    ToolExport,
)
from goondan.config.refs import ObjectRef
from goondan.config.resources import Location, Resource
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
