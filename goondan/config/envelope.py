"""The resource envelope as the runtime sees it: :class:`Resource`, :class:`Location` and two
helpers.

Kept apart from :mod:`goondan.config.resources` (the schema of every kind) so that a bundle
rebuilt from the cache (goondan/config/cache.py) does not build the schemas it never checks.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from goondan.config.yamlsource import YamlDocument

__all__ = ["Location", "Resource", "agent_prompt", "deep_merge"]


@dataclass(frozen=True)
class Location:
    """Where a resource was declared: absolute file, display path, 0-based document, 1-based
    line/col."""

    file: Path
    display: str
    document: int
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.display}:{self.line}:{self.column}"


@dataclass
class Resource:
    """One loaded resource. ``package`` is ``None`` for the local bundle's own resources."""

    api_version: str
    kind: str
    name: str
    metadata: dict[str, Any]
    spec: dict[str, Any]
    root: Path
    location: Location
    package: str | None = None
    source: YamlDocument | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:  # the spec may hold literal secrets: keep it out of reprs
        scope = f", package={self.package!r}" if self.package else ""
        return f"Resource({self.id}{scope}, at {self.location})"

    @property
    def id(self) -> str:
        """``Kind/name`` as shown in diagnostics."""
        return f"{self.kind}/{self.name}"

    @property
    def labels(self) -> dict[str, str]:
        labels = self.metadata.get("labels")
        return labels if isinstance(labels, dict) else {}

    def with_overrides(self, overrides: dict[str, Any]) -> Resource:
        """A copy with ``overrides.spec``/``overrides.metadata`` deep-merged (docs/configuration.md
        "References")."""
        return Resource(
            self.api_version, self.kind, self.name,
            deep_merge(self.metadata, overrides.get("metadata") or {}),
            deep_merge(self.spec, overrides.get("spec") or {}),
            self.root, self.location, self.package, self.source,
        )


def agent_prompt(spec: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """``(block, inline text, systemRef)`` of an Agent spec, for either spelling.

    ``prompt: {system, systemRef}`` (the reference's newer form) or
    ``prompts: {systemPrompt, systemRef}`` (docs/compatibility.md); ``block`` names the key used.
    """
    for block, inline_key in (("prompt", "system"), ("prompts", "systemPrompt")):
        value = spec.get(block)
        if isinstance(value, dict):
            inline = value.get(inline_key)
            ref = value.get("systemRef")
            return (block, inline if isinstance(inline, str) else None,
                    ref if isinstance(ref, str) else None)
    return "prompt", None, None


def deep_merge(base: Any, override: Any) -> Any:
    """Objects merge recursively; scalars and lists in ``override`` replace (docs/configuration.md
    "Extension")."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = {k: copy.deepcopy(v) for k, v in base.items()}
        for key, value in override.items():
            out[key] = deep_merge(out[key], value) if key in out else copy.deepcopy(value)
        return out
    return copy.deepcopy(override)
