"""``goondan repl [AGENT]``: chat with one agent of a bundle in this terminal.

Three modes, chosen from the arguments and the terminal:

* ``--input TEXT`` — one turn, then exit (rendered with streaming and tool lines on a TTY,
  only the answer otherwise; ``--json`` prints the TurnResult);
* stdin is a TTY — the interactive session (:class:`goondan.console.ReplSession`);
* stdin is not a TTY — every input line is one turn; only answers go to stdout.

Everything runs in-process (no orchestrator); conversations persist per instance key under the
state root and resume on the next start.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from goondan.commands.common import bundle_option, get_globals, instance_key_option, startup_done

if TYPE_CHECKING:
    pass

__all__ = ["repl"]


@click.command("repl")
@click.argument("agent", required=False)
@bundle_option(
    type=click.Path(file_okay=True, dir_okay=True),
    help="Bundle directory (or its goondan.yaml) [default: the current directory].",
)
@click.option("-s", "--swarm", default=None, envvar="GOONDAN_SWARM",
              help="Swarm to use [env: GOONDAN_SWARM; default: 'default' or the only one].")
@instance_key_option
@click.option("--input", "input_text", default=None, help="Run one turn with this text and exit.")
@click.option(
    "--no-stream",
    is_flag=True,
    default=False,
    help="Print answers whole instead of streaming them.",
)
@click.option("--json", "as_json", is_flag=True, default=False,
              help="Print one TurnResult JSON object per turn (with --input or piped stdin).")
@click.option("--state-root", type=click.Path(file_okay=False), default=None,
              help="System root for workspaces [env: GOONDAN_STATE_ROOT; default ~/.goondan].")
@click.option(
    "--env-file",
    default=None,
    help="Extra env file read before .env.local and .env (relative to the bundle directory).",
)
def repl(
    agent: str | None,
    bundle: str | None,
    swarm: str | None,
    instance_key: str | None,
    input_text: str | None,
    no_stream: bool,
    as_json: bool,
    state_root: str | None,
    env_file: str | None,
) -> int:
    """Chat with an agent (default: the swarm's entry agent) in this terminal.

    Interactive on a terminal: streamed answers, tool calls as they happen, /help for commands,
    Ctrl-C cancels a turn, Ctrl-D exits. With piped stdin each line is one turn and only the
    answers are printed.
    """
    import asyncio
    import os

    from goondan.config.dotenv import load_env_files
    from goondan.console import InstanceBackend, LineReader, ReplSession, TurnRenderer, run_batch
    from goondan.console.prompt import iter_input_lines
    from goondan.console.session import exit_code_for, keep_signals_on_main_thread, result_json
    from goondan.runtime import Runtime
    from goondan.secrets import mask
    from goondan.text import clean_text

    options = get_globals()
    bundle = bundle or options.bundle or "."
    if agent is not None and ("/" in agent or agent.endswith((".yaml", ".yml"))
                              or (Path(agent) / "goondan.yaml").is_file()):
        from goondan.errors import UsageError

        raise UsageError(
            f"{agent!r} looks like a path, but repl's argument is an AGENT name",
            code="E_USAGE",
            suggestion=f"give the bundle with --bundle: goondan repl --bundle {agent}",
        )
    root = options.resolve_state_root(state_root)
    if input_text is not None:
        input_text = clean_text(input_text)  # argv: undecodable bytes arrive as surrogates
    path = Path(bundle)
    load_env_files((path.parent if path.is_file() else path).resolve(), env_file, os.environ)
    runtime = Runtime.from_bundle(Path(bundle), state_root=root, swarm=swarm, stream=not no_stream)
    runner = asyncio.Runner()
    keep_signals_on_main_thread(runner)
    try:
        instance = runner.run(runtime.instance(agent, instance_key))
        # The turn a killed repl left open goes on first (docs/conversations.md "Durability").
        resumed = runner.run(instance.resume())
        if resumed is not None and resumed.finish_reason == "approval_pending":  # docs/approvals.md
            click.echo(
                "a turn waits for approval: goondan approvals list, then approve|deny ID", err=True
            )
        elif resumed is not None:
            what = mask(resumed.text) if resumed.error is None else f"[{resumed.error.get('code')}]"
            click.echo(f"resumed the interrupted turn: {what}", err=True)
        startup_done()
        backend = InstanceBackend(instance)
        stdin_tty = sys.stdin.isatty()
        stdout_tty = sys.stdout.isatty()
        color = options.color
        if input_text is not None:
            if as_json or not stdout_tty:
                result = runner.run(backend.run_turn(input_text))
                if as_json:
                    click.echo(result_json(result))
                elif result.error is None:
                    click.echo(mask(result.text))  # the model may repeat a key it saw
                if result.error is not None and not as_json:
                    _echo_error(result.error)
                return exit_code_for(result)
            from goondan.console import run_once

            renderer = TurnRenderer(sys.stdout, color=color, tty=True, stream=not no_stream)
            shown = mask(f"› {input_text}")
            click.echo(click.style(shown, bold=True) if color else shown)
            result = run_once(backend, runner, input_text, renderer)
            return exit_code_for(result)
        if not stdin_tty:
            return run_batch(
                backend,
                runner,
                iter_input_lines(sys.stdin),
                out=sys.stdout,
                err=sys.stderr,
                as_json=as_json,
            )
        reader = LineReader(root / "repl" / "history")
        session = ReplSession(
            backend, runner, reader=reader, out=sys.stdout, color=color, stream=not no_stream,
            quiet=options.quiet,
        )
        return session.run()
    finally:
        try:
            runner.run(runtime.aclose())
        finally:
            runner.close()


def _echo_error(error: dict[str, object]) -> None:
    from goondan.console.render import format_turn_error

    for line in format_turn_error(error):
        if line:
            click.echo(line, err=True)
