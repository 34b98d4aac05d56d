"""Helpers shared by every subcommand: global options, colour, state-root resolution."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from goondan.commands.store_option import store_option

_F = TypeVar("_F", bound=Callable[..., Any])

__all__ = [
    "GlobalOptions",
    "adopt_paused_gc",
    "bundle_option",
    "defer_gc",
    "find_running",
    "get_globals",
    "instance_key_option",
    "register_bundle_secrets",
    "running_swarm_options",
    "startup_done",
    "store_option",
    "style",
    "use_color",
    "workspace_bundle",
]

_gc_deferred = False


def defer_gc() -> None:
    """Pause the cyclic garbage collector while a command starts (docs/runtime.md "Performance").

    Start-up allocates hundreds of thousands of long-lived objects (modules, classes, functions);
    collecting them over and over while they are created frees nothing. :func:`startup_done`
    freezes them and turns the collector back on. Measured against the plain version (no pause,
    no freeze; ``scripts/bench_cold.py --instructions --without gc-pause``, callgrind, every
    process of the command): the plain version runs 11.2 % more instructions for
    ``repl --input`` (607 M → 675 M), 9.2 % for ``run --input`` and 7.1 % for ``goondan stop``
    (391 M → 419 M).
    """
    global _gc_deferred
    import gc

    if gc.isenabled():
        gc.disable()
        _gc_deferred = True


def adopt_paused_gc(was_enabled: bool) -> None:
    """The entry point (``goondan/__main__.py``) paused the collector before importing the CLI:
    :func:`startup_done` turns it back on as if :func:`defer_gc` had paused it."""
    global _gc_deferred
    _gc_deferred = _gc_deferred or was_enabled


def startup_done() -> None:
    """The command has started: collect garbage normally again (no-op unless deferred)."""
    global _gc_deferred
    if _gc_deferred:
        import gc

        _gc_deferred = False
        # Everything allocated so far is long-lived (modules, classes, the bundle): moved out of
        # the collector's sight, so the first collection does not walk it all (a few ms).
        gc.freeze()
        gc.enable()


@dataclass
class GlobalOptions:
    """Options given before the subcommand (``goondan --state-root X repl ...``)."""

    state_root: str | None = None
    color: bool = False
    json_errors: bool = False
    debug: bool = False
    verbose: int = 0
    quiet: bool = False
    bundle: str | None = None

    def resolve_state_root(self, override: str | None = None) -> Path:
        """``--state-root`` (subcommand, then global) > env > config.toml > ``~/.goondan``."""
        from goondan.workspace.paths import resolve_state_root

        return resolve_state_root(override or self.state_root)


def get_globals(ctx: click.Context | None = None) -> GlobalOptions:
    """The :class:`GlobalOptions` of the running command (defaults outside the CLI)."""
    ctx = ctx or click.get_current_context(silent=True)
    while ctx is not None:
        if isinstance(ctx.obj, GlobalOptions):
            return ctx.obj
        ctx = ctx.parent
    return GlobalOptions()


def use_color(stream: IO[Any], no_color_flag: bool = False) -> bool:
    """Colour only on a TTY, and never with ``--no-color`` or ``NO_COLOR`` set."""
    if no_color_flag or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def style(text: str, enabled: bool, **kwargs: Any) -> str:
    """``click.style`` when colour is enabled, else the plain text."""
    return click.style(text, **kwargs) if enabled else text


def register_bundle_secrets(state_root: Path | None, *, bundles: tuple[Path, ...] = ()) -> int:
    """Register for masking the secrets of every bundle this command can find: ``bundles``
    (else the current directory's bundle), those of running orchestrators (``runtime/*.json``)
    and those recorded for the state root's workspaces (``workspaces/*/workspace.json``).

    Only secrets are registered (Model keys, Connection ``secrets``, MCP headers and the MCP
    ``env`` values read from variables), never settings such as a Connection's ``config``. A
    command about a given bundle passes it as ``bundles``, so what it shows does not depend on
    the current directory.

    A bundle that loads has every secret resolved (:mod:`goondan.config.secretsources`)
    against the environment plus its ``.env`` files; a recorded workspace also has the variables
    it names read from there, even when its bundle no longer loads. ``inspect`` and ``logs``
    print stored tool results and process output, which may hold a key a tool echoed. Returns
    the number of bundles read; an unreadable bundle is skipped (best effort, never fatal).
    """
    import json

    from goondan.config import load_bundle
    from goondan.config.secretsources import register_bundle_secrets as register_all
    from goondan.config.secretsources import register_env_secrets
    from goondan.workspace.record import iter_workspace_records

    candidates: list[Path] = [*bundles] if bundles else [Path.cwd()]
    if state_root is not None:
        runtime = Path(state_root) / "runtime"
        records = [runtime / "active.json", *sorted((runtime / "orchestrators").glob("*.json"))]
        for record in records:
            try:
                data = json.loads(record.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("bundlePath"), str):
                candidates.append(Path(data["bundlePath"]))
        # Recorded workspaces: only the variables named (loading every bundle ever run would
        # make inspect slow); a literal secret in YAML needs the bundle itself.
        for workspace in iter_workspace_records(Path(state_root)):
            register_env_secrets(workspace["secretEnv"], _bundle_env(Path(workspace["bundleRoot"])))
    seen: set[Path] = set()
    read = 0
    for candidate in candidates:
        root = candidate.parent if candidate.is_file() else candidate
        if root in seen or not (root / "goondan.yaml").is_file():
            continue
        seen.add(root)
        try:
            bundle = load_bundle(root)
        except Exception:  # masking is best effort; inspect must still work
            continue
        read += 1
        register_all(bundle, _bundle_env(root))
    return read


def _bundle_env(root: Path) -> dict[str, str]:
    """The environment plus the bundle's ``.env`` files (environment wins), as ``run`` sees it."""
    from goondan.config.dotenv import load_env_files

    env = dict(os.environ)
    with contextlib.suppress(Exception):  # a missing bundle or a broken .env: the environment only
        if root.is_dir():
            load_env_files(root, None, env)
    return env


class HiddenAliasOption(click.Option):
    """An option whose old spellings (``hidden_aliases``) still work but are not in ``--help``."""

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_aliases = frozenset(hidden_aliases)

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown = self.opts
        self.opts = [opt for opt in shown if opt not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def bundle_option(*, help: str, type: Any = None) -> Callable[[_F], _F]:
    """``-b/--bundle`` (aliases ``-c/--config``, the reference's spelling) into ``bundle``,
    default None: the one spelling of the bundle option, with each command's own help."""
    return click.option("-b", "--bundle", "-c", "--config", "bundle", default=None, type=type,
                        help=help)


def instance_key_option(func: Any) -> Any:
    """``-k/--instance-key``: the conversation a user talks to an agent in, the same on ``repl``,
    ``run`` and ``send``. Its default (None) means the Swarm's ``instanceKey``, so the three
    commands continue one conversation per agent (docs/cli.md "Conversations").
    ``-i``/``--instance`` (the old ``repl`` and ``run`` spellings) are hidden aliases."""
    return click.option("-k", "--instance-key", "-i", "--instance", "instance_key", default=None,
                        cls=HiddenAliasOption, hidden_aliases=("-i", "--instance"),
                        help="Conversation key; the same key continues the same conversation "
                        "[default: the Swarm's instanceKey, as on repl, run and send].")(func)


def running_swarm_options(func: Any) -> Any:
    """``-b/--bundle`` and ``-s/--swarm``: which running swarm a command talks to."""
    func = click.option("-s", "--swarm", default=None, envvar="GOONDAN_SWARM",
                        help="Swarm of the bundle [env: GOONDAN_SWARM; default: as run].")(func)
    return bundle_option(
        type=click.Path(file_okay=True, dir_okay=True),
        help="Bundle whose running swarm to address [default: the current directory's "
        "bundle, else the only running swarm].",
    )(func)


def workspace_bundle(state_root: Path, workspace_id: str) -> Path | None:
    """The bundle directory recorded for ``workspace_id`` (None when it has no record)."""
    from goondan.workspace.record import iter_workspace_records

    return next((Path(r["bundleRoot"]) for r in iter_workspace_records(state_root)
                 if r["workspaceId"] == workspace_id), None)


def find_running(bundle: str | None, swarm: str | None, *, standby: bool = False) -> Any:
    """The :class:`~goondan.swarm.state.ActiveRuntime` of the running swarm (``E_RUN_NOT_RUNNING``
    when none); ``bundle`` falls back to the global ``--bundle``, then to the current
    directory's bundle. Without any, the only running swarm (said on stderr); with several,
    ``E_RUN_SWARM_AMBIGUOUS`` lists them: the command never picks one silently. ``standby``:
    a detached orchestrator standing by for the swarm's lease counts too (``goondan stop``)."""
    from goondan.swarm.daemon import locate_running

    options = get_globals()
    state_root = options.resolve_state_root()
    bundle = bundle or options.bundle
    if bundle is not None or (Path.cwd() / "goondan.yaml").is_file():
        return locate_running(state_root, bundle, swarm, standby=standby)
    return _only_running(state_root, swarm, quiet=options.quiet, standby=standby)


def _only_running(state_root: Path, swarm: str | None, *, quiet: bool,
                  standby: bool = False) -> Any:
    from goondan.errors import UsageError
    from goondan.swarm.daemon import locate_running
    from goondan.swarm.state import running_records

    found = [r for r in running_records(state_root)
             if (r.control_socket or (standby and r.standby is not None))
             and (swarm is None or r.swarm == swarm)]
    if not found:
        return locate_running(state_root, None, swarm)  # E_RUN_NOT_RUNNING, as before
    if len(found) == 1:
        (active,) = found
        if not quiet:
            click.echo(
                f"Using swarm {active.swarm} of {Path(active.bundle_path).parent} "
                f"(instanceKey={active.instance_key}, pid={active.pid}), the only one running",
                err=True,
            )
        return active
    rows = "".join(
        f"\n  {Path(r.bundle_path).parent}  swarm {r.swarm}  instanceKey={r.instance_key}  "
        f"pid={r.pid}  started {r.started_at}"
        for r in found
    )
    raise UsageError(
        f"{len(found)} swarms are running under {state_root}; say which one:{rows}",
        code="E_RUN_SWARM_AMBIGUOUS",
        suggestion=f"pass its bundle, e.g. --bundle {Path(found[0].bundle_path).parent} "
                   "(or run the command in that bundle's directory)",
    )
