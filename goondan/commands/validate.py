"""``goondan validate [PATH] [--format text|json|github] [--strict] [--no-color]``.

Exit codes: 0 valid; 4 validation errors (or warnings with ``--strict``); 3 the bundle cannot be
read (missing path, YAML syntax error …); 2 bad usage (click).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import get_globals, style, use_color
from goondan.config.validate import ValidationReport, validate_bundle
from goondan.errors import (
    EXIT_CONFIG,
    EXIT_GENERAL,
    EXIT_VALIDATION,
    Diagnostic,
    GoondanError,
    help_url,
)
from goondan.secrets import MASK, mask

__all__ = [
    "CHECKS",
    "check_of",
    "render_github",
    "render_json",
    "render_json_failure",
    "render_text",
    "validate",
]

# Output groups, in display order, and the codes belonging to each (others fall under "schema").
CHECKS: dict[str, frozenset[str]] = {
    "files": frozenset(
        {
            "E_CONFIG_NOT_FOUND",
            "E_CONFIG_PARSE_ERROR",
            "E_CONFIG_FILE_TOO_LARGE",
            "E_CONFIG_TOO_MANY_DOCUMENTS",
            "E_CONFIG_FILE_UNREADABLE",
            "E_CONFIG_ALIAS_LIMIT",
            "E_CONFIG_TOO_DEEP",
            "E_CONFIG_DUPLICATE_KEY",
        }
    ),
    "schema": frozenset(),
    "references": frozenset(
        {
            "E_CONFIG_INVALID_REF",
            "E_CONFIG_REF_NOT_FOUND",
            "E_CONFIG_REF_AMBIGUOUS",
            "W_CONFIG_UNKNOWN_EVENT",
            "E_CONFIG_REQUIRED_TOOL_UNKNOWN",
            "W_CONFIG_REQUIRED_TOOL_UNKNOWN",
            "W_CONFIG_SELECTOR_NO_MATCH",
        }
    ),
    "entry files": frozenset(
        {
            "E_CONFIG_ENTRY_NOT_FOUND",
            "E_CONFIG_ENTRY_INVALID",
            "E_CONFIG_PROMPT_NOT_FOUND",
            "E_CONFIG_PATH_ESCAPE",
        }
    ),
    "packages": frozenset(
        {
            "E_CONFIG_PACKAGE_LOCK_MISSING",
            "E_CONFIG_PACKAGE_NOT_INSTALLED",
            "E_CONFIG_PACKAGE_MANIFEST_MISSING",
            "E_CONFIG_PACKAGE_CYCLE",
            "W_CONFIG_NO_PACKAGE",
            "E_CONFIG_PACKAGE_VERSION",
            "E_CONFIG_PACKAGE_CONFLICT",
            "W_CONFIG_PACKAGE_VERSION_MISMATCH",
            "W_CONFIG_PACKAGE_DRIFT",
            "E_WORKSPACE_CONFIG",
        }
    ),
    "capabilities": frozenset({"E_CONFIG_CAPABILITY", "W_CONFIG_CAPABILITY"}),
    "values": frozenset({"W_CONFIG_ENV_UNSET", "W_CONFIG_INLINE_SECRET"}),
    # --check-mcp (docs/mcp.md): a server that did not start or list its tools.
    "mcp servers": frozenset(
        {
            "E_MCP",
            "E_MCP_START",
            "E_MCP_TIMEOUT",
            "E_MCP_CLOSED",
            "E_MCP_PROTOCOL",
            "E_MCP_RPC",
            "E_MCP_HTTP",
            "E_MCP_CONNECTION",
            "E_MCP_UNAVAILABLE",
        }
    ),
}


def check_of(code: str) -> str:
    """The output group of a diagnostic code."""
    return next((name for name, codes in CHECKS.items() if code in codes), "schema")


class _Lines:
    """Source lines for excerpts, read once per file."""

    def __init__(self) -> None:
        self.cache: dict[str, list[str]] = {}

    def get(self, file: str, line: int) -> str | None:
        if file not in self.cache:
            try:
                self.cache[file] = (
                    Path(file).read_text(encoding="utf-8-sig", errors="replace").splitlines()
                )
            except (OSError, ValueError):
                self.cache[file] = []
        lines = self.cache[file]
        return lines[line - 1] if 0 < line <= len(lines) else None


def _excerpt(diag: Diagnostic, lines: _Lines, color: bool) -> list[str]:
    if diag.file is None or diag.line is None:
        return []
    text = lines.get(diag.file, diag.line)
    if text is None:
        return []
    if diag.code == "W_CONFIG_INLINE_SECRET":
        # The excerpt would show the literal; short ones are not registered for masking.
        text = re.sub(r"(\bvalue\s*:\s*)\S.*?(\s*[,}]|$)", rf"\g<1>{MASK}\g<2>", text)
    col = max(1, diag.column or 1)
    start = max(0, col - 60) if len(text) > 100 else 0
    shown = text[start:start + 100].replace("\t", " ")
    number = str(diag.line)
    pad = " " * len(number)
    caret = style("^", color, fg="red" if diag.is_error else "yellow", bold=True)
    return [f"      {number} | {shown}", f"      {pad} | {' ' * (col - 1 - start)}{caret}"]


def render_text(report: ValidationReport, target: str, *, color: bool, quiet: bool = False) -> str:
    """Human output: one line per check (✓/✗/⚠), details with excerpts, then a summary.
    ``quiet`` (``-q``): only the problems, without the check lines and the summary (nothing for
    a bundle without any)."""
    files = len(report.files)
    lines_out = [
        f"Validating {target} ({report.resource_count} "
        f"resources in {files} file{'s' * (files != 1)})"
    ]
    groups: dict[str, list[Diagnostic]] = {name: [] for name in CHECKS}
    for diag in report.errors + report.warnings:
        groups[check_of(diag.code)].append(diag)
    sources = _Lines()
    for name, diags in groups.items():
        if name == "mcp servers" and not diags:
            continue  # only with --check-mcp, and only when a server failed
        if report.unreadable and not diags:
            lines_out.append(f"  - {name} (skipped: the bundle could not be read)")
            continue
        errors = sum(1 for d in diags if d.is_error)
        warnings = len(diags) - errors
        if errors:
            mark = style("✗", color, fg="red", bold=True)
        elif warnings:
            mark = style("⚠", color, fg="yellow", bold=True)
        else:
            mark = style("✓", color, fg="green", bold=True)
        counts = ", ".join(p for p in (
            f"{errors} error{'s' * (errors != 1)}" if errors else "",
            f"{warnings} warning{'s' * (warnings != 1)}" if warnings else "") if p)
        if not quiet:
            lines_out.append(f"  {mark} {name}" + (f" ({counts})" if counts else ""))
        for diag in sorted(
            diags, key=lambda d: (not d.is_error, d.file or "", d.line or 0, d.column or 0)
        ):
            label = style(
                f"{diag.severity}[{diag.code}]",
                color,
                fg="red" if diag.is_error else "yellow",
                bold=True,
            )
            lines_out.append(f"    {label} {diag.message}")
            where = diag.path or ""
            context = ", ".join(x for x in (diag.resource, diag.field) if x)
            if where or context:
                lines_out.append(f"      --> {where}" + (f"  ({context})" if context else ""))
            lines_out.extend(_excerpt(diag, sources, color))
            if diag.suggestion:
                lines_out.append(f"      suggestion: {diag.suggestion}")
            lines_out.append(f"      help: {diag.help_url or help_url(diag.code)}")
    lines_out.append(f"Summary: errors={len(report.errors)}, warnings={len(report.warnings)}")
    if quiet:  # the problems only, shifted to the left margin
        problems = [line[4:] for line in lines_out[1:-1] if line.startswith("    ")]
        return mask("\n".join(problems))
    return mask("\n".join(lines_out))


def _check_mcp(report: ValidationReport, env: dict[str, str]) -> list[Any]:
    """Start every MCP server; a failure becomes an error of the report (docs/mcp.md)."""
    from goondan.mcp.check import check_servers_sync, servers_of

    servers = check_servers_sync(servers_of(report.bundle), env)
    for server in servers:
        if not server.ok:
            report.errors.append(Diagnostic(
                server.code or "E_MCP", f"MCP server did not start: {server.message}",
                resource=f"Tool/{server.name}", field="spec.mcp",
                suggestion="run the command by hand to see its output; see docs/mcp.md"))
            report.valid = False
    return servers


def render_mcp(servers: list[Any], *, color: bool) -> str:
    """The ``--check-mcp`` section: one line per server, its tools below it."""
    lines = ["MCP servers"]
    if not servers:
        lines.append("  (no Tool declares spec.mcp)")
    for server in servers:
        if server.ok:
            mark = style("✓", color, fg="green")
            lines.append(f"  {mark} Tool/{server.name} ({server.transport} {server.target}, "
                         f"protocol {server.protocol_version}): {len(server.tools)} tool(s)")
            lines.extend(f"      {name}" for name in server.tools)
        else:
            mark = style("✗", color, fg="red")
            lines.append(f"  {mark} Tool/{server.name} ({server.transport} {server.target}): "
                         f"[{server.code}] {server.message}")
    return mask("\n".join(lines))


def render_json(report: ValidationReport) -> str:
    """``{"valid", "errors", "warnings"}`` (always valid JSON)."""
    return mask(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))


def render_json_failure(exc: BaseException) -> str:
    """The ``--format json`` document for a failure that stopped validation itself."""
    if isinstance(exc, GoondanError):
        code, message, suggestion = exc.code, exc.message, exc.suggestion
    else:
        code, message = "E_INTERNAL", f"unexpected {type(exc).__name__}: {exc}"
        suggestion = "re-run with --debug for a traceback and report it as a bug"
    error = {"code": code, "message": message, "suggestion": suggestion, "helpUrl": help_url(code)}
    return mask(
        json.dumps(
            {"valid": False, "errors": [error], "warnings": []}, indent=2, ensure_ascii=False
        )
    )


def _escape(text: str, *, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def render_github(report: ValidationReport, target: str) -> str:
    """GitHub Actions workflow commands: ``::error file=…,line=…,col=…::[CODE] message``."""
    out = []
    for diag in report.errors + report.warnings:
        props = [f"file={_escape(diag.file or target, prop=True)}"]
        if diag.line is not None:
            props.append(f"line={diag.line}")
            if diag.column is not None:
                props.append(f"col={diag.column}")
        message = f"[{diag.code}] {diag.message}"
        if diag.resource:
            message += f" ({diag.resource}{' ' + diag.field if diag.field else ''})"
        if diag.suggestion:
            message += f" — suggestion: {diag.suggestion}"
        out.append(f"::{diag.severity} {','.join(props)}::{_escape(message)}")
    if not out:
        out.append("::notice::validation passed")
    return mask("\n".join(out))


def _run_env(path: Path) -> dict[str, str]:
    """``os.environ`` plus the bundle's ``.env.local`` and ``.env`` as ``run`` reads them (the
    real environment wins), so a key put in ``.env`` is not reported unset."""
    import os

    from goondan.config.dotenv import load_env_files

    env = dict(os.environ)
    root = path.parent if path.is_file() else path
    try:
        if root.is_dir():
            load_env_files(root.resolve(), None, env)
    except GoondanError:  # a broken .env is run's error to report (E_RUN_ENV_FILE)
        pass
    return env


def _check_scripts(report: ValidationReport) -> None:
    """Build every ``provider: scripted`` Model once, so a broken script (``E_LLM_SCRIPT_INVALID``)
    is reported now rather than at the first Turn (docs/testing-models.md)."""
    if report.bundle is None:
        return
    from goondan.errors import ConfigError
    from goondan.llm.base import ModelSpec
    from goondan.llm.testing import scripted_from_spec

    for res in report.bundle.resources:
        spec = res.spec if isinstance(res.spec, dict) else {}
        if res.kind != "Model" or spec.get("provider") != "scripted":
            continue
        options = spec.get("options")
        try:
            scripted_from_spec(
                ModelSpec(
                    provider="scripted",
                    model=str(spec.get("model") or "scripted"),
                    options=dict(options) if isinstance(options, dict) else {},
                    name=res.name,
                ),
                report.bundle.root,
            )
        except ConfigError as err:
            report.errors.append(
                Diagnostic(
                    code=err.code,
                    message=err.message,
                    file=res.location.display,
                    line=res.location.line,
                    column=res.location.column,
                    resource=f"Model/{res.name}",
                    field="spec.options",
                    suggestion=err.suggestion,
                )
            )
            report.valid = False


@click.command("validate")
@click.argument("path", required=False, default=None)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github"]), default="text",
              show_default=True, help="Output format.")
@click.option("--strict", is_flag=True, default=False, help="Treat warnings as errors (exit 4).")
@click.option(
    "--no-color", is_flag=True, default=False, help="Disable coloured output (also: NO_COLOR)."
)
@click.option("--json", "as_json", is_flag=True, default=False, help="Same as --format json.")
@click.option("--check-mcp", is_flag=True, default=False,
              help="Start each MCP server (Tool spec.mcp), list its tools and stop it.")
def validate(path: str | None, fmt: str, strict: bool, no_color: bool, as_json: bool = False,
             check_mcp: bool = False) -> None:
    """Validate a bundle (directory or YAML file, default .) and report every problem."""
    options = get_globals()
    path = path or options.bundle or "."
    if as_json or (options.json_errors and fmt == "text"):
        fmt = "json"
    state_root = Path(options.state_root).expanduser() if options.state_root else None
    servers: list[Any] = []
    try:
        env = _run_env(Path(path))  # the environment `run` and `repl` see (and MCP servers get)
        report = validate_bundle(path, state_root=state_root, strict=strict, env=env)
        _check_scripts(report)
        if check_mcp and report.bundle is not None and not report.unreadable:
            servers = _check_mcp(report, env)
    except Exception as exc:
        if fmt != "json":
            raise
        # Machine readers get JSON whatever happens; the exit status still says "internal error".
        click.echo(render_json_failure(exc))
        raise click.exceptions.Exit(
            exc.exit_code if isinstance(exc, GoondanError) else EXIT_GENERAL
        ) from exc
    if fmt == "json" and not check_mcp:
        click.echo(render_json(report))
    elif fmt == "json":
        data = {**report.to_dict(), "mcp": [server.to_dict() for server in servers]}
        click.echo(mask(json.dumps(data, indent=2, ensure_ascii=False)))
    elif fmt == "github":
        click.echo(render_github(report, path))
    else:
        color = use_color(sys.stdout, no_color) and options.color
        text = render_text(report, path, color=color, quiet=options.quiet)
        if text:
            click.echo(text)
        if check_mcp and not options.quiet:
            click.echo(render_mcp(servers, color=color))
    if report.unreadable:
        raise click.exceptions.Exit(EXIT_CONFIG)
    if not report.valid:
        raise click.exceptions.Exit(EXIT_VALIDATION)
