"""``goondan doctor``: check the Python environment, API keys, the state root and the bundle.

Each MCP server of the bundle (Tool ``spec.mcp``) is started once, listed and stopped.

With a bundle, only the keys its Models need are checked: a Model's own ``apiKey`` variable, or
the provider's usual variables when the Model talks to the provider's public host (a local or
self-hosted endpoint needs none; docs/models.md "Endpoints and API keys"). Without one, every known
provider variable that is set is listed.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import bundle_option, get_globals, style
from goondan.errors import GoondanError

__all__ = ["Check", "doctor", "run_checks"]

DEPENDENCIES = ("click", "pyyaml", "tomli-w", "urllib3")
# This project's distribution (PyPI) name; the import package and the commands are `goondan`.
DISTRIBUTION = "pygoondan"
# The PyPI name `goondan` belongs to the reference authors' own Python host (another
# configuration format) that installs an import package `goondan` too (README "Install").
OTHER_DISTRIBUTION = "goondan"
# how an install of this project under the old name reads
_OUR_SUMMARY = "Declarative agent-swarm runtime"


@dataclass
class Check:
    category: str
    name: str
    status: str  # ok | warn | fail
    detail: str
    suggestion: str | None = None


def _n(count: int, word: str) -> str:
    """``1 warning``, ``2 warnings``."""
    return f"{count} {word}{'s' * (count != 1)}"


def _masked(value: str) -> str:
    return value[:4] + "…" if len(value) > 8 else "***"


def _other_distribution() -> Check | None:
    """A distribution named ``goondan`` in this environment: the reference authors' host, whose
    files share the import package ``goondan`` and the ``goondan`` command with ours (one
    overwrites the other), or this project installed under its old name."""
    try:
        dist = importlib.metadata.distribution(OTHER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    summary = dist.metadata["Summary"] or ""  # None when absent (Python 3.11)
    where = f"{dist.version} at {dist.locate_file('')}"
    if summary.startswith(_OUR_SUMMARY):
        return Check("Goondan", OTHER_DISTRIBUTION, "warn",
                     f"this project installed under its old distribution name ({where})",
                     f"pip uninstall {OTHER_DISTRIBUTION}, then install it again as {DISTRIBUTION} "
                     "(pip install -e . in a checkout)")
    return Check("Goondan", OTHER_DISTRIBUTION, "fail",
                 f"another distribution named {OTHER_DISTRIBUTION!r} is installed ({where}"
                 + (f": {summary}" if summary else "") + "); it also provides the import package "
                 "'goondan' and the 'goondan' command, so the two overwrite each other",
                 f"use separate environments, or pip uninstall {OTHER_DISTRIBUTION} && "
                 f"pip install --force-reinstall {DISTRIBUTION}")


def run_checks(bundle: Path | None, state_root: Path) -> list[Check]:
    """Run every check and return the results in display order."""
    checks: list[Check] = []
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info >= (3, 11)
    # the interpreter too: an MCP server's `python` on PATH may be another one (docs/mcp.md)
    checks.append(Check("System", "Python", "ok" if ok else "fail", f"{version} ({sys.executable})",
                        None if ok else "goondan needs Python 3.11 or newer"))
    for dist in DEPENDENCIES:
        try:
            checks.append(Check("System", dist, "ok", importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            checks.append(Check("System", dist, "fail", "not installed", f"pip install {dist}"))
    try:
        checks.append(
            Check("Goondan", DISTRIBUTION, "ok", importlib.metadata.version(DISTRIBUTION))
        )
    except importlib.metadata.PackageNotFoundError:
        checks.append(
            Check("Goondan", DISTRIBUTION, "warn", "running from a source tree (not installed)")
        )
    other = _other_distribution()
    if other is not None:
        checks.append(other)
    from goondan.config import pydist
    from goondan.config.providers import installed_providers

    for name, entries in sorted(pydist.discover().items()):  # Python-distribution packages
        if len(entries) > 1:
            owners = ", ".join(e.describe() for e in entries)
            checks.append(
                Check(
                    "Goondan",
                    name,
                    "warn",
                    f"provided by several distributions: {owners}",
                    "pip uninstall all but one (docs/packages.md)",
                )
            )
        else:
            checks.append(Check("Goondan", name, "ok", entries[0].describe()))
    for name, rows in sorted(installed_providers().items()):  # third-party model providers
        owners = ", ".join(f"{row.distribution} ({row.factory})" for row in rows)
        if len(rows) > 1:
            checks.append(Check("Goondan", f"provider {name}", "warn",
                                f"provided by several distributions: {owners} (the first is used)",
                                "pip uninstall all but one (docs/packages.md \"Model providers\")"))
        else:
            checks.append(Check("Goondan", f"provider {name}", "ok", owners))

    manifest = bundle if bundle and bundle.is_file() else (bundle or Path.cwd()) / "goondan.yaml"
    report = None
    if manifest.exists():
        from goondan.config import validate_bundle

        report = validate_bundle(manifest)
    if report is not None and report.bundle is not None:
        checks.extend(_bundle_key_checks(report.bundle))
        checks.extend(_mcp_checks(report.bundle))
    else:
        checks.extend(_known_key_checks())

    checks.append(_check_user_config())
    checks.append(_check_state_root(state_root))

    if report is None:
        checks.append(Check("Bundle", "goondan.yaml", "warn", f"not found at {manifest}",
                            "run `goondan init` or pass --bundle"))
        return checks
    if report.valid:
        detail = "valid" + (f" ({_n(len(report.warnings), 'warning')})" if report.warnings else "")
        checks.append(Check("Bundle", str(manifest), "ok", detail))
    else:
        first = report.errors[0]
        checks.append(Check("Bundle", str(manifest), "fail",
                            f"{len(report.errors)} errors, first: [{first.code}] {first.message}",
                            "run `goondan validate` for the full report"))
    return checks


def _known_key_checks() -> list[Check]:
    """Without a bundle: which key variables of the built-in providers are set."""
    from goondan.config.providers import key_variables

    variables = key_variables()
    found = [name for name in variables if os.environ.get(name)]
    checks = [Check("API keys", name, "ok", f"set ({_masked(os.environ[name])})") for name in found]
    if not found:
        checks.append(
            Check(
                "API keys",
                "model keys",
                "warn",
                "no provider key set",
                f"export one of {', '.join(variables)} (or use provider: scripted offline)",
            )
        )
    return checks


def _bundle_key_checks(bundle: Any) -> list[Check]:
    """One check per Model of the bundle: the key it needs, if any, and whether it is set."""
    from goondan.config.values import env_names
    from goondan.llm.base import ModelSpec
    from goondan.llm.provider import HttpModel
    from goondan.llm.registry import create_model

    checks: list[Check] = []
    for resource in bundle.of_kind("Model"):
        binding = bundle.model_binding(resource)
        name = f"Model/{binding.name}"
        if binding.api_key:
            names = env_names(binding.api_key, field="apiKey")
            if not names:
                checks.append(Check("API keys", name, "ok", "apiKey given in the Model"))
            elif os.environ.get(names[0]):
                checks.append(
                    Check(
                        "API keys", name, "ok", f"{names[0]} set ({_masked(os.environ[names[0]])})"
                    )
                )
            else:
                checks.append(Check("API keys", name, "warn", f"{names[0]} is not set",
                                    f"export {names[0]} (the Model's apiKey reads it)"))
            continue
        try:
            model = create_model(
                ModelSpec(
                    provider=binding.provider,
                    model=binding.model,
                    endpoint=binding.endpoint,
                    options=dict(binding.options),
                    capabilities=dict(binding.capabilities),
                    name=binding.name,
                ),
                base_dir=bundle.root,
            )
        except GoondanError as err:
            checks.append(
                Check("API keys", name, "warn", f"[{err.code}] {err.message}", err.suggestion)
            )
            continue
        if not isinstance(model, HttpModel):
            checks.append(
                Check("API keys", name, "ok", f"no key needed (provider {binding.provider})")
            )
            continue
        variables = model.env_names()
        found = next((v for v in variables if os.environ.get(v)), None)
        if found is not None:
            checks.append(
                Check("API keys", name, "ok", f"{found} set ({_masked(os.environ[found])})")
            )
        elif model.key_required():
            wanted = " or ".join(variables)
            checks.append(Check("API keys", name, "warn", f"needs {wanted}, which is not set",
                                f"export {wanted}, or give the Model a spec.apiKey"))
        else:
            checks.append(Check("API keys", name, "ok", f"no key needed ({model.endpoint})"))
    return checks


def _mcp_checks(bundle: Any) -> list[Check]:
    """Start each MCP server of the bundle once: its state and tools (docs/mcp.md)."""
    from goondan.mcp.check import check_servers_sync, servers_of, static_problem

    specs = servers_of(bundle)
    checks: list[Check] = []
    startable = []
    for spec in specs:
        problem = static_problem(spec)
        if problem is None:
            startable.append(spec)
        else:
            checks.append(Check("MCP", f"Tool/{spec.name}", "fail", f"{spec.target}: {problem}",
                                "install the server or fix spec.mcp.command"))
    for server in check_servers_sync(startable):
        name = f"Tool/{server.name}"
        if server.ok:
            checks.append(Check("MCP", name, "ok",
                                f"ready ({server.transport} {server.target}, protocol "
                                f"{server.protocol_version}): {len(server.tools)} tool(s)"))
        else:
            checks.append(Check("MCP", name, "fail", f"[{server.code}] {server.message}",
                                "run `goondan validate --check-mcp`; see docs/mcp.md"))
    return checks


def _check_user_config() -> Check:
    """``~/.goondan/config.toml`` must parse when it exists (it can set the state root)."""
    from goondan.workspace.paths import read_user_config, user_config_path

    path = user_config_path()
    try:
        read_user_config()
    except GoondanError as exc:
        return Check("State", "config.toml", "fail", exc.message,
                     exc.suggestion or f"fix or remove {path}")
    if not path.exists():
        return Check("State", "config.toml", "ok", f"not present ({path})")
    return Check("State", "config.toml", "ok", str(path))


def _check_state_root(state_root: Path) -> Check:
    probe_dir = state_root if state_root.exists() else state_root.parent
    if state_root.exists() and not state_root.is_dir():
        return Check("State", "state root", "fail", f"{state_root} is a file",
                     "point --state-root or GOONDAN_STATE_ROOT at a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=probe_dir, prefix=".doctor-", delete=True):
            pass
    except OSError as exc:
        return Check(
            "State",
            "state root",
            "fail",
            f"{state_root} is not writable ({exc.strerror})",
            "choose a writable --state-root or set GOONDAN_STATE_ROOT",
        )
    return Check("State", "state root", "ok", str(state_root))


@click.command()
@bundle_option(
    type=click.Path(path_type=Path),
    help="Bundle directory or goondan.yaml to check (default: the current directory).",
)
@click.option("--state-root", type=click.Path(), default=None, help="State root to check.")
@click.option("--fix", is_flag=True, help="Reserved: no automatic fixes yet.")
@click.option("--json", "as_json", is_flag=True, default=False,
              help='Print {"checks": [{category, name, status, detail, suggestion}], "summary"}.')
def doctor(bundle: Path | None, state_root: str | None, fix: bool, as_json: bool = False) -> None:
    """Check the environment (Python, dependencies, API keys, state root) and the bundle.

    Exits 1 when any check fails; warnings do not change the exit status.
    """
    opts = get_globals()
    try:
        root = opts.resolve_state_root(state_root)
    except GoondanError:
        # A broken state root is one of the things doctor reports, not a reason to stop.
        root = Path(
            state_root or opts.state_root or os.environ.get("GOONDAN_STATE_ROOT", "~/.goondan")
        ).expanduser()
    if bundle is None and opts.bundle is not None:
        bundle = Path(opts.bundle)
    checks = run_checks(bundle, root)
    if as_json or opts.json_errors:
        import dataclasses
        import json

        summary = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "fail")}
        click.echo(
            json.dumps(
                {"checks": [dataclasses.asdict(c) for c in checks], "summary": summary},
                ensure_ascii=False,
                indent=2,
            )
        )
        if summary["fail"]:
            raise click.exceptions.Exit(1)
        return
    icons = {"ok": ("✓", "green"), "warn": ("⚠", "yellow"), "fail": ("✗", "red")}
    click.echo("Goondan Doctor")
    for check in checks:
        icon, colour = icons[check.status]
        click.echo(
            f"{style(icon, opts.color, fg=colour)} [{check.category}] {check.name}: {check.detail}"
        )
        if check.suggestion and check.status != "ok":
            click.echo(f"    suggestion: {check.suggestion}")
    counts = {s: sum(1 for c in checks if c.status == s) for s in icons}
    click.echo(
        f"Summary: {counts['ok']} passed, "
        f"{_n(counts['warn'], 'warning')}, {_n(counts['fail'], 'error')}"
    )
    if counts["fail"]:
        raise click.exceptions.Exit(1)
