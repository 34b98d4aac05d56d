"""The ``goondan`` (alias ``gdn``) command line: parse, call one function, format.

This module is the single error boundary: every :class:`goondan.errors.GoondanError` is rendered
here as ``[CODE] message`` plus location, suggestion and help lines (or JSON with ``--json``) and
turned into the documented exit code. Tracebacks are shown only with ``--debug``.

Subcommands live in ``goondan/commands/<name>.py`` and are imported lazily, so ``goondan --help``
stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import sys
import traceback
from typing import Any

import click

from goondan import __version__
from goondan.commands.common import (
    GlobalOptions,
    bundle_option,
    defer_gc,
    get_globals,
    startup_done,
    use_color,
)
from goondan.errors import EXIT_GENERAL, EXIT_INTERRUPTED, EXIT_USAGE, GoondanError, help_url
from goondan.secrets import SecretMaskingFilter, mask

__all__ = ["cli", "main"]

# name -> (module, attribute, one-line help). Commands whose module is absent are hidden.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "init": ("goondan.commands.init", "init", "Create a new goondan project."),
    "validate": (
        "goondan.commands.validate",
        "validate",
        "Validate a bundle and report every problem.",
    ),
    "repl": ("goondan.commands.repl", "repl", "Chat with an agent in this terminal."),
    "run": (
        "goondan.commands.run",
        "run",
        "Run a swarm: orchestrator, agent processes, connectors.",
    ),
    "restart": ("goondan.commands.restart", "restart", "Restart the running swarm's agents."),
    "send": (
        "goondan.commands.send",
        "send",
        "Send a message to a running swarm and print the answer.",
    ),
    "serve": (
        "goondan.commands.serve",
        "serve",
        "Serve a swarm to agent clients (MCP over stdio).",
    ),
    "status": (
        "goondan.commands.status",
        "status",
        "Show running swarms: processes, uptime, restarts, queues.",
    ),
    "stop": (
        "goondan.commands.stop",
        "stop",
        "Stop a running swarm gracefully (forced after the grace period).",
    ),
    "approvals": (
        "goondan.commands.approvals",
        "approvals",
        "List, approve or deny tool calls waiting for a person.",
    ),
    "instance": ("goondan.commands.instance", "instance", "List or delete instances."),
    "inspect": (
        "goondan.commands.inspect",
        "inspect",
        "Inspect workspaces, instances and conversations.",
    ),
    "studio": (
        "goondan.commands.studio",
        "studio",
        "Serve a local web page: swarms, conversations, traces, approvals.",
    ),
    "fold": ("goondan.commands.fold", "fold", "Fold leftover conversation events into base.jsonl."),
    "store": ("goondan.commands.store", "store", "Copy state between stores, verifiably."),
    "logs": ("goondan.commands.logs", "logs", "Show orchestrator and agent process logs."),
    "doctor": ("goondan.commands.doctor", "doctor", "Check the environment and the bundle."),
    "package": (
        "goondan.commands.package",
        "package",
        "Add, list, lock and create Goondan packages.",
    ),
    "completion": (
        "goondan.commands.completion",
        "completion",
        "Print the shell completion script (bash, zsh, fish).",
    ),
}

# Commands tuned for a fast start (docs/runtime.md "Performance"): they call startup_done()
# themselves once started; every other command gets the garbage collector back before its module
# is imported.
FAST_START = frozenset({"repl", "run"})
_own_process: list[bool] = []  # set by main() when it runs the process's own command line


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (module, _, _) in COMMANDS.items() if _module_exists(module)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or not _module_exists(entry[0]):
            return None
        if _own_process:  # compiled dataclass methods of earlier starts (goondan/codecache.py)
            from goondan.codecache import install

            install()
        if cmd_name not in FAST_START:
            startup_done()
        module = importlib.import_module(entry[0])
        command: click.Command = getattr(module, entry[1])
        add_global_options(command)
        return command


    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Use the static one-liners so `--help` imports no subcommand module.
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# The global options, accepted after the subcommand too (``goondan run --state-root X``).
# (option strings, click.Option keyword arguments, GlobalOptions field)
GLOBAL_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any], str]] = [
    (
        ("--state-root",),
        {
            "type": click.Path(file_okay=False),
            "default": None,
            "help": "System root for workspaces and runtime files (as before the command).",
        },
        "state_root",
    ),
    (
        ("-b", "--bundle", "-c", "--config"),
        {
            "type": click.Path(),
            "default": None,
            "help": "Bundle directory or goondan.yaml (as before the "
            "command); -c/--config is an alias.",
        },
        "bundle",
    ),
    (
        ("--json",),
        {"is_flag": True, "default": False, "help": "JSON output (as before the command)."},
        "json",
    ),
    (
        ("-q", "--quiet"),
        {"is_flag": True, "default": False, "help": "Only errors and results."},
        "quiet",
    ),
    (
        ("--no-color",),
        {"is_flag": True, "default": False, "help": "Disable coloured output."},
        "no_color",
    ),
    (("-v", "--verbose"), {"count": True, "help": "More log output (repeatable)."}, "verbose"),
    (
        ("--debug",),
        {"is_flag": True, "default": False, "help": "Show tracebacks for internal errors."},
        "debug",
    ),
]


def _global_callback(field: str) -> Any:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value in (None, False, 0):
            return
        options = get_globals(ctx)
        if field == "state_root":
            options.state_root = value
        elif field == "bundle":
            options.bundle = value
        elif field == "json":
            options.json_errors = True
        elif field == "no_color":
            options.color = False
        elif field == "debug":
            options.debug = True
        elif field in ("quiet", "verbose"):
            if field == "quiet":
                options.quiet = True
            else:
                options.verbose += int(value)
            _configure_logging(options.verbose, options.quiet)

    return callback


def add_global_options(command: click.Command) -> None:
    """Give ``command`` (and its subcommands) the global options it does not define itself.

    An option the command already has (``--json``, ``--state-root`` of ``instance list``) is
    the command's own; the command reads the global value too (``get_globals()``).
    """
    if getattr(command, "_goondan_globals", False):
        return
    taken = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}
    for opts, kwargs, field in GLOBAL_OPTIONS:
        long = next(opt for opt in opts if opt.startswith("--"))
        if long in taken:
            continue
        free = [opt for opt in opts if opt not in taken]
        command.params.append(
            click.Option(free, expose_value=False, callback=_global_callback(field), **kwargs)
        )
    command._goondan_globals = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_global_options(sub)

def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="goondan")
@click.option(
    "--state-root",
    type=click.Path(file_okay=False),
    default=None,
    help="System root for workspaces and runtime files "
    "[env: GOONDAN_STATE_ROOT; default ~/.goondan].",
)
@bundle_option(
    type=click.Path(),
    help="Bundle directory or goondan.yaml [default: the current directory]; -c/--config is "
    "an alias.",
)
@click.option(
    "--no-color", is_flag=True, default=False, help="Disable coloured output (also: NO_COLOR)."
)
@click.option("--json", "json_errors", is_flag=True, default=False,
              help="JSON output: results on stdout, errors on stderr.")
@click.option("--debug", is_flag=True, default=False, help="Show tracebacks for internal errors.")
@click.option("-v", "--verbose", count=True, help="More log output (repeatable).")
@click.option("-q", "--quiet", is_flag=True, default=False, help="Only errors.")
@click.pass_context
def cli(
    ctx: click.Context,
    state_root: str | None,
    bundle: str | None,
    no_color: bool,
    json_errors: bool,
    debug: bool,
    verbose: int,
    quiet: bool,
) -> None:
    """goondan: a declarative agent-swarm runtime.

    Describe Models, Agents, Swarms, Tools and Extensions in goondan.yaml, then validate,
    chat (repl) or run them. Exit codes: 0 ok, 1 error, 2 usage, 3 config, 4 validation,
    5 network, 6 auth, 130 interrupted.
    """
    _configure_logging(verbose, quiet, debug=debug or os.environ.get("GOONDAN_DEBUG") == "1")
    ctx.obj = GlobalOptions(
        state_root=state_root,
        color=use_color(sys.stdout, no_color),
        json_errors=json_errors,
        debug=debug,
        verbose=verbose,
        quiet=quiet,
        bundle=bundle,
    )


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR}


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at emit time (like logging's last-resort handler),
    so a replaced stderr (test capture, embedding) is never written after it is closed."""

    _goondan_cli = True

    def __init__(self, level: int) -> None:
        super().__init__()
        self.setLevel(level)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class _TerminalFormatter(logging.Formatter):
    """Log lines for the terminal: tracebacks only with ``--debug``.

    ``-v``/``-vv`` raise the level, not the noise: a record logged with ``exc_info`` shows as one
    line ending in ``(ExcType: message)``. The record itself is left untouched, so file handlers
    (``goondan run`` logs) still get the full traceback.
    """

    def __init__(self, fmt: str, *, tracebacks: bool) -> None:
        super().__init__(fmt)
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if self.tracebacks:
            return super().format(record)
        saved = (record.exc_info, record.exc_text, record.stack_info)
        exc = record.exc_info[1] if record.exc_info else None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            text = super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved
        if exc is not None:
            text += f" ({type(exc).__name__}: {exc}; --debug shows the traceback)"
        return text


def _configure_logging(verbose: int, quiet: bool, *, debug: bool = False) -> None:
    """Log records of the ``goondan`` logger to stderr, secrets masked.

    Level: ``-q`` error, default warning (or ``GOONDAN_LOG_LEVEL``), ``-v`` info, ``-vv`` debug.
    The level is set on the handler, so file handlers added later (``goondan run``) keep theirs.
    Tracebacks of logged exceptions appear only with ``debug`` (``--debug``).
    """
    if quiet:
        level = logging.ERROR
    elif verbose:
        level = logging.INFO if verbose == 1 else logging.DEBUG
    else:
        level = _LEVELS.get(os.environ.get("GOONDAN_LOG_LEVEL", "").lower(), logging.WARNING)
    logger = logging.getLogger("goondan")
    for old in [h for h in logger.handlers if getattr(h, "_goondan_cli", False)]:
        logger.removeHandler(old)  # main() may run several times in one process (tests)
    handler = _StderrHandler(level)
    handler.setFormatter(
        _TerminalFormatter("goondan %(levelname)s [%(name)s] %(message)s", tracebacks=debug)
    )
    handler.addFilter(SecretMaskingFilter())
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > level:
        logger.setLevel(level)


def render_error(err: GoondanError, *, as_json: bool, color: bool) -> str:
    """The user-facing text (or JSON) for an error; secrets are masked."""
    if as_json:
        return mask(json.dumps(err.to_dict(), ensure_ascii=False))
    red = (lambda s: click.style(s, fg="red", bold=True)) if color else (lambda s: s)
    lines = [f"{red('[' + err.code + ']')} {err.message}"]
    if err.location:
        lines.append(f"  at: {err.location}")
    if err.suggestion:
        lines.append(f"  suggestion: {err.suggestion}")
    lines.append(f"  help: {err.help_url or help_url(err.code)}")
    return mask("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the CLI and exit with the documented code."""
    args = sys.argv[1:] if argv is None else argv
    if argv is None:  # our own process: a library caller's collector is none of our business
        defer_gc()
        _own_process.append(True)
    debug = "--debug" in args or os.environ.get("GOONDAN_DEBUG") == "1"
    as_json = "--json" in args
    color = use_color(sys.stderr, "--no-color" in args)
    try:
        result: Any = cli.main(args=args, prog_name="goondan", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except GoondanError as err:
        if debug:
            traceback.print_exc()
        click.echo(render_error(err, as_json=as_json, color=color), err=True)
        code = err.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        code = EXIT_INTERRUPTED
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code if exc.exit_code else EXIT_USAGE
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # a bug: keep the traceback behind --debug
        if debug:
            traceback.print_exc()
        else:
            click.echo(
                f"[E_INTERNAL] unexpected {type(exc).__name__}: {mask(str(exc))}\n"
                "  suggestion: re-run with --debug for a traceback and report it as a bug",
                err=True,
            )
        code = EXIT_GENERAL
    sys.stdout.flush()
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
