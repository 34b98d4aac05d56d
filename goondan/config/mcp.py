"""The ``spec.mcp`` block of a Tool resource: an MCP server as a source of tools (docs/mcp.md).

A Tool gives either ``entry`` (a Python module) or ``mcp`` (a server)::

    spec:
      mcp:
        command: [python, -m, mcp_server_time]   # stdio; or url: http://127.0.0.1:8000/mcp
        env: {TZ: {value: UTC}}                  # ValueSource map (stdio)
        headers: {Authorization: {valueFrom: {env: TOKEN}}}   # ValueSource map (HTTP)
        timeoutMs: 30000
      exports: [get_current_time]                # optional allow-list of server tool names

This module holds the schema rules (used by ``resources.py``) and :class:`McpServerSpec`, the
resolved form the runtime starts (``goondan/mcp/``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.config.schema import Checker, Custom, Int, ListOf, MapOf, Obj, Str, type_name
from goondan.config.values import check_value_source, resolve_value
from goondan.config.yamlsource import FieldPath, format_field

__all__ = [
    "DEFAULT_MCP_TIMEOUT_MS",
    "MCP_SCHEMA",
    "McpServerSpec",
    "exports_schema",
    "mcp_server_spec",
    "tool_source_rule",
]

DEFAULT_MCP_TIMEOUT_MS = 60_000
# Starting can be slow (npx may download the package first): at least this long by default.
MIN_START_TIMEOUT_MS = 30_000


def _command(value: Any, path: FieldPath, ck: Checker) -> bool:
    if isinstance(value, str):
        ck.error("mcp.command must be a list of strings (the program and its arguments)", path,
                 f"write command: [{', '.join(value.split()) or 'program'}]", code="E_CONFIG_MCP")
        return False
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        ck.error(f"mcp.command must be a non-empty list of strings, got {type_name(value)}", path,
                 "write command: [python, -m, mcp_server_time]", code="E_CONFIG_MCP")
        return False
    return True


def _url(value: Any, path: FieldPath, ck: Checker) -> bool:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+", value):
        ck.error(f"mcp.url {value!r} is not an http(s) URL", path,
                 "write url: http://127.0.0.1:8000/mcp", code="E_CONFIG_MCP")
        return False
    return True


def _mcp_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    if ("command" in value) == ("url" in value):
        ck.error("mcp needs exactly one of 'command' (stdio) or 'url' (Streamable HTTP)", path,
                 "write command: [program, args...] or url: http://host/mcp", code="E_CONFIG_MCP")
    elif "url" in value and "env" in value:
        ck.error("mcp.env applies to a started process (command), not to a url", (*path, "env"),
                 "remove env, or pass values to the server as headers", code="E_CONFIG_MCP")
    elif "command" in value and "headers" in value:
        ck.error("mcp.headers applies to a url, not to a command", (*path, "headers"),
                 "remove headers, or pass values to the process as env", code="E_CONFIG_MCP")


MCP_SCHEMA = Obj({
    "command": Custom(_command),
    "url": Custom(_url),
    "env": MapOf(Custom(check_value_source)),
    "headers": MapOf(Custom(check_value_source)),
    "timeoutMs": Int(),
    "startTimeoutMs": Int(),
    "cwd": Str(),
}, rules=(_mcp_rule,))

_MCP_EXPORTS = ListOf(Str(), min_items=1)


def exports_schema(entry_exports: Any) -> Custom:
    """``exports``: objects for an ``entry`` Tool, server tool names for an ``mcp`` Tool.

    Which one applies is decided by :func:`tool_source_rule`; here a list of strings is checked
    as names and anything else with ``entry_exports``. An empty list is refused with a message
    naming both forms (seed 002 §2.7.3: at least one export; an ``mcp`` Tool omits the field
    instead).
    """
    def check(value: Any, path: FieldPath, ck: Checker) -> bool:
        if value == []:
            ck.error(f"{format_field(path)} needs at least 1 item", path,
                     "an entry Tool lists its tools as {name, description, parameters}; an mcp "
                     "Tool may omit exports to offer every tool its server lists")
            return False
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return bool(_MCP_EXPORTS.check(value, path, ck))
        return bool(entry_exports.check(value, path, ck))
    return Custom(check)


def tool_source_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    """A Tool has exactly one of ``entry``/``mcp``; ``exports`` is required with ``entry``.

    Seed 002 §2.7.1 (``entry`` is required) and §2.7.3 (at least one export) hold for an entry
    Tool; an ``mcp`` Tool is the documented exception to both (docs/tools.md, docs/mcp.md).
    """
    has_entry, has_mcp = "entry" in value, "mcp" in value
    exports = value.get("exports")
    if "a2a" in value:  # a remote A2A agent (goondan/config/a2a.py)
        if has_entry or has_mcp:
            ck.error("a Tool gives one of 'entry', 'mcp' and 'a2a' (a remote A2A agent)", path,
                     "keep one of them; declare the others as more Tools", code="E_CONFIG_A2A")
        elif isinstance(exports, list) and any(not isinstance(e, str) for e in exports):
            ck.error("exports of an a2a Tool are skill ids of the agent's card (strings)",
                     (*path, "exports"), "write exports: [assistant]", code="E_CONFIG_A2A")
        return
    if not has_entry and not has_mcp:
        ck.error("a Tool needs 'entry' (a Python module); the one exception is an MCP server "
                 "Tool, which gives 'mcp' instead", path,
                 "write entry: ./tools/x.py (with exports), or mcp: {command: [...]} or "
                 "mcp: {url: ...} (exports optional)", code="E_CONFIG_MCP")
    elif has_entry and has_mcp:
        ck.error("a Tool gives either 'entry' (a Python module) or 'mcp' (an MCP server), "
                 "not both", path, "keep one of entry and mcp; declare the other as a second "
                 "Tool", code="E_CONFIG_MCP")
    elif has_entry and "exports" not in value:
        ck.error(f"missing required field 'exports' in {'.'.join(map(str, path)) or 'spec'}: "
                 "an entry Tool lists its tools", path,
                 "add 'exports:' listing the entry module's tools (only an mcp Tool may omit "
                 "exports: its server lists them)")
    elif has_entry and isinstance(exports, list) and any(isinstance(e, str) for e in exports):
        ck.error("exports of an entry Tool are mappings with a name", (*path, "exports"),
                 "write exports: [{name: my_tool, parameters: {...}}]")
    elif has_mcp and isinstance(exports, list) and any(not isinstance(e, str) for e in exports):
        ck.error("exports of an mcp Tool are server tool names (strings)", (*path, "exports"),
                 "write exports: [get_current_time]; the server supplies descriptions and schemas",
                 code="E_CONFIG_MCP")


@dataclass
class McpServerSpec:
    """One MCP server as an Agent uses it (a Tool resource with ``spec.mcp``)."""

    name: str                                   # the Tool resource name: catalog prefix
    package: str | None
    command: list[str] | None
    url: str | None
    env: dict[str, Any] = field(default_factory=dict)        # raw ValueSources
    headers: dict[str, Any] = field(default_factory=dict)    # raw ValueSources
    timeout_ms: int = DEFAULT_MCP_TIMEOUT_MS
    start_timeout_ms: int | None = None      # None: max(timeout_ms, 30 s)
    exports: list[str] | None = None
    root: Path = Path()
    cwd: Path | None = None
    max_output_bytes: int | None = None
    # The Agent reference's approval for every tool of the server (docs/approvals.md).
    approval: str = "never"
    approval_timeout_ms: int | None = None

    @property
    def start_timeout_s(self) -> float:
        """How long starting and ``initialize`` may take."""
        ms = self.start_timeout_ms or max(self.timeout_ms, MIN_START_TIMEOUT_MS)
        return ms / 1000.0

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command else "http"

    @property
    def target(self) -> str:
        """The command line or URL, for status lines (no secrets: values are not shown)."""
        return " ".join(self.command) if self.command else str(self.url)

    def resolve_env(self, env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
        """(variables to add to the process environment, names left unset). A value read from a
        variable is registered as a secret; a literal one (``TZ: {value: UTC}``) is a setting
        and is not, as in :mod:`goondan.config.secretsources`."""
        return _resolve_map(self.env, env, "env")

    def resolve_headers(self, env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
        """(HTTP headers, names left unset); values are registered as secrets."""
        return _resolve_map(self.headers, env, "headers")


def _resolve_map(values: dict[str, Any], env: Mapping[str, str],
                 what: str) -> tuple[dict[str, str], list[str]]:
    out: dict[str, str] = {}
    unset: list[str] = []
    for key, source in values.items():
        secret = what == "headers" or (isinstance(source, dict) and "valueFrom" in source)
        value = resolve_value(source, env, field=f"{what}.{key}", secret=secret)
        if value is None:
            unset.append(key)
        else:
            out[key] = value
    return out, unset


def mcp_server_spec(
    name: str, package: str | None, spec: dict[str, Any], root: Path
) -> McpServerSpec:
    """The :class:`McpServerSpec` of a validated Tool ``spec`` with an ``mcp`` block."""
    block = spec["mcp"]
    exports = spec.get("exports")
    cwd = block.get("cwd")
    return McpServerSpec(
        name=name,
        package=package,
        command=list(block["command"]) if block.get("command") else None,
        url=block.get("url"),
        env=dict(block.get("env") or {}),
        headers=dict(block.get("headers") or {}),
        timeout_ms=int(block.get("timeoutMs") or DEFAULT_MCP_TIMEOUT_MS),
        start_timeout_ms=block.get("startTimeoutMs"),
        exports=[str(e) for e in exports] if isinstance(exports, list) else None,
        root=root,
        cwd=(root / cwd).resolve() if isinstance(cwd, str) else None,
        max_output_bytes=spec.get("maxOutputBytes"),
    )
