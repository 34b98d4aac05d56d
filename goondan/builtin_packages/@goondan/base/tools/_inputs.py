"""Input helpers shared by the @goondan/base tool modules (imported relatively: each entry
module is loaded as a package rooted at this directory)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, overload

from goondan.tools import ToolContext, ToolFailure


def invalid(message: str) -> ToolFailure:
    """The error a handler raises for a missing or mistyped input."""
    return ToolFailure(message, code="E_TOOL_INVALID_ARGS",
                       suggestion="Call the tool again with valid arguments.")


def required_text(input: dict[str, Any], name: str, *, allow_blank: bool = True) -> str:
    """A required non-empty string (``allow_blank=False`` also refuses whitespace only)."""
    value = input.get(name)
    if value is None:
        raise invalid(f"'{name}' is required")
    if not isinstance(value, str) or not value or (not allow_blank and not value.strip()):
        raise invalid(f"'{name}' must be a non-empty string")
    return value


@overload
def flag(input: dict[str, Any], name: str) -> bool | None: ...
@overload
def flag(input: dict[str, Any], name: str, default: bool) -> bool: ...
def flag(input: dict[str, Any], name: str, default: bool | None = None) -> bool | None:
    """A boolean input; ``default`` when it is absent or null."""
    value = input.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"'{name}' must be a boolean")
    return value


def emoji_list(input: dict[str, Any], *, example: str) -> list[str]:
    """The stripped, de-duplicated strings of ``emoji`` (one) and ``emojis`` (an array), in order.

    Shared by the ``slack`` and ``telegram`` tools; ``example`` shows the expected form in the
    error message. An empty result is the caller's to judge.
    """
    raw: list[Any] = []
    if input.get("emoji") is not None:
        raw.append(input["emoji"])
    if input.get("emojis") is not None:
        if not isinstance(input["emojis"], list):
            raise invalid("'emojis' must be an array of emoji")
        raw.extend(input["emojis"])
    out: list[str] = []
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            raise invalid(f"every emoji must be a non-empty string such as {example}")
        if item.strip() not in out:
            out.append(item.strip())
    return out


def primitive(value: Any) -> str:
    """JavaScript's ``String(value)`` for the primitives models send."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def absolute(ctx: ToolContext, path: str) -> Path:
    """``path`` against the tool's workdir, normalised but not symlink-resolved (Node's
    ``path.resolve``)."""
    return Path(os.path.abspath(ctx.resolve_path(path)))
