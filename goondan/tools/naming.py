"""Tool names as the LLM sees them: ``{resource}__{export}`` (docs/tools.md).

The separator is a double underscore, used as-is (no encoding). Neither the Tool resource
name nor the export name may contain ``__``; a single-export Tool still uses the full form.
``parse_tool_name`` splits at the first ``__`` exactly like the reference ``parseToolName``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from goondan.errors import ToolLoadError

__all__ = [
    "SEPARATOR",
    "ParsedToolName",
    "build_tool_name",
    "check_tool_name",
    "is_valid_tool_name",
    "parse_tool_name",
    "sanitize_export_name",
    "tool_name_problem",
]

SEPARATOR = "__"
# Resource names follow metadata.name rules loosely (letters, digits, '-', '_'); export names are
# lower-case identifiers (docs/tools.md). Both must be usable verbatim by every provider.
_RESOURCE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_EXPORT_RE = re.compile(r"[a-z0-9_-]+")


class ParsedToolName(NamedTuple):
    """The two halves of a full tool name."""

    resource_name: str
    export_name: str


def parse_tool_name(full_name: str) -> ParsedToolName | None:
    """Split ``bash__exec`` into ``("bash", "exec")``; ``None`` when there is no ``__``."""
    idx = full_name.find(SEPARATOR)
    if idx < 0:
        return None
    return ParsedToolName(full_name[:idx], full_name[idx + len(SEPARATOR):])


def build_tool_name(resource_name: str, export_name: str) -> str:
    """Join a Tool resource name and an export name with ``__`` (validating both)."""
    for label, part in (("resource", resource_name), ("export", export_name)):
        if not part:
            raise ToolLoadError(f"tool {label} name must not be empty", code="E_TOOL_NAME")
        if SEPARATOR in part:
            raise ToolLoadError(
                f"tool {label} name {part!r} must not contain '__'",
                code="E_TOOL_NAME",
                suggestion="Use '-' or a single '_' inside "
                "names; '__' separates resource and export.",
            )
    return f"{resource_name}{SEPARATOR}{export_name}"


def tool_name_problem(full_name: object) -> str | None:
    """Why ``full_name`` is not a valid ``{resource}__{export}`` name, or ``None`` if it is."""
    if not isinstance(full_name, str) or not full_name:
        return "a tool name must be a non-empty string"
    parsed = parse_tool_name(full_name)
    if parsed is None:
        return f"tool name {full_name!r} must have the form '{{resource}}__{{export}}'"
    resource, export = parsed
    if not resource or not export:
        return f"tool name {full_name!r} needs a non-empty resource and export name"
    if SEPARATOR in export or resource.endswith("_") or export.startswith("_"):
        return f"tool name {full_name!r} must contain '__' exactly once, as the separator"
    if not _RESOURCE_RE.fullmatch(resource):
        return (
            f"resource part {resource!r} of {full_name!r} may use only letters, digits, '-' and '_'"
        )
    if not _EXPORT_RE.fullmatch(export):
        return (
            f"export part {export!r} of {full_name!r} may use only lower-case letters, "
            "digits, '-' and '_'"
        )
    return None


def is_valid_tool_name(full_name: object) -> bool:
    """True when ``full_name`` follows the ``{resource}__{export}`` rules."""
    return tool_name_problem(full_name) is None


def check_tool_name(full_name: object) -> str:
    """Return ``full_name`` or raise :class:`ToolLoadError` ``E_TOOL_NAME`` explaining the rule."""
    problem = tool_name_problem(full_name)
    if problem is not None:
        raise ToolLoadError(
            problem,
            code="E_TOOL_NAME",
            suggestion="Name tools '<resource>__<export>', e.g. 'weather__get'.",
        )
    assert isinstance(full_name, str)
    return full_name


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_EXPORT = re.compile(r"[^a-z0-9_-]+")


def sanitize_export_name(name: str) -> str:
    """A foreign tool name (an MCP server's) as an export name (docs/mcp.md "Tool names").

    camelCase becomes snake_case, letters are lower-cased, every run of other characters
    becomes ``_``, ``__`` collapses to ``_`` and leading/trailing ``_`` are dropped:
    ``getCurrentTime`` → ``get_current_time``, ``files.read`` → ``files_read``; an empty
    result is ``tool``.
    """
    out = _NOT_EXPORT.sub("_", _CAMEL.sub("_", name).lower())
    out = re.sub(r"_{2,}", "_", out).strip("_")
    return out or "tool"
