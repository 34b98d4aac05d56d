"""Tools: ``resource__export`` names, argument schemas, providers, registry, per-step catalog,
executor."""

from __future__ import annotations

from goondan.tools.context import ToolContext
from goondan.tools.executor import ToolExecutor, ToolFailure, truncate_error_message
from goondan.tools.loader import load_entry_module
from goondan.tools.naming import build_tool_name, is_valid_tool_name, parse_tool_name
from goondan.tools.output import DEFAULT_MAX_OUTPUT_BYTES, ToolSettings
from goondan.tools.providers import EntryModuleProvider, ToolProvider
from goondan.tools.registry import RegisteredTool, ToolHandler, ToolRegistry
from goondan.tools.schema import SchemaViolation, validate_args

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "EntryModuleProvider",
    "RegisteredTool",
    "SchemaViolation",
    "ToolContext",
    "ToolExecutor",
    "ToolFailure",
    "ToolHandler",
    "ToolProvider",
    "ToolRegistry",
    "ToolSettings",
    "build_tool_name",
    "is_valid_tool_name",
    "load_entry_module",
    "parse_tool_name",
    "truncate_error_message",
    "validate_args",
]
