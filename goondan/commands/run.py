"""``goondan run``: run a swarm — an orchestrator with one process per agent instance.

Front-ends (the orchestrator is the same in all of them):

* ``--input TEXT`` / ``--input-file FILE|-`` — one request per line to the entry agent, print
  the answers, stop, exit 0 (with a ``cli`` Connection, lines are its events: docs/connectors.md);
* stdin is a TTY (default) — an interactive chat with the entry agent, REPL look and feel
  (Ctrl-C cancels the entry agent's running Turn in its process, see ``runtime.cancel``);
* stdin is not a TTY — each line is one request; answers go to stdout, then stop at EOF;
* ``--foreground`` — headless: no stdin connector; runs until SIGTERM/SIGINT (for service
  managers; talk to it with ``goondan restart`` and read it with ``goondan logs``).

``.env`` files are loaded first (``--env-file``, ``.env.local``, ``.env``; the real environment
wins). See docs/orchestrator.md.

One orchestrator per swarm and state root: the swarm's lock is taken before anything starts. When
the swarm already runs, ``run`` attaches to it (:mod:`goondan.swarm.attach`): the chat, piped lines,
``--input`` and ``--input-file`` go to the running swarm over its control socket, ``--detach``
reports it, ``--foreground`` fails with ``E_RUN_ALREADY_RUNNING``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import bundle_option, get_globals, instance_key_option, startup_done
from goondan.commands.store_option import store_option

__all__ = ["run"]


@click.command("run")
@click.argument("path", required=False, type=click.Path(file_okay=True, dir_okay=True))
@bundle_option(
    type=click.Path(file_okay=True, dir_okay=True),
    help="Bundle directory (or its goondan.yaml) [default: PATH, else the current directory].",
)
@click.option("-s", "--swarm", default=None, envvar="GOONDAN_SWARM",
              help="Swarm to run [env: GOONDAN_SWARM; default: 'default' or the only one].")
@click.option("-w", "--watch", is_flag=True, default=False,
              help="Restart only the agents whose resources or entry files change (history kept).")
@click.option(
    "--input",
    "input_text",
    default=None,
    help="Send one message to the entry agent, print the answer, exit.",
)
@click.option(
    "--input-file",
    "input_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="Send each line of FILE ('-' = stdin) as one message, print the answers, exit.",
)
@click.option("--foreground", is_flag=True, default=False,
              help="Run headless until SIGTERM/SIGINT (no stdin chat).")
@click.option(
    "-d",
    "--detach",
    is_flag=True,
    default=False,
    help="Run headless in the background; return once the swarm is ready, or stands by for "
    "another node (--store) (stop: goondan stop).",
)
@click.option(
    "--ready-timeout",
    "ready_timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    envvar="GOONDAN_READY_TIMEOUT",
    metavar="SECONDS",
    help="With --detach: how long to wait for the agents and connectors to run before failing "
    "[env: GOONDAN_READY_TIMEOUT].",
)
@click.option("--env-file", default=None, help="Extra .env file read before .env.local and .env.")
@instance_key_option
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where agent instances run: local processes, or Ray host actors (docs/scaling.md; "
    "needs pip install 'pygoondan[ray]').",
)
@click.option("--ray-address", default=None, metavar="auto|ray://HOST:PORT",
              help="With --engine ray: the cluster to join (default: start a local Ray).")
@click.option("--no-install", is_flag=True, default=False,
              help="Accepted for compatibility; no effect (run never installs packages).")
@click.option("--lock-fd", "lock_fd", type=int, default=None, hidden=True)  # from `run --detach`
@store_option
def run(
    path: str | None, bundle: str | None, swarm: str | None, watch: bool, input_text: str | None,
    foreground: bool, detach: bool, env_file: str | None, instance_key: str | None,
    input_file: str | None = None,
    engine: str = "local", ray_address: str | None = None, no_install: bool = False,
    lock_fd: int | None = None, ready_timeout: float = 60.0, store: str | None = None,
) -> int:
    """Run a swarm: one supervised process per agent instance, agents spawned on demand.

    Chat with the entry agent on a terminal (Ctrl-C cancels the running answer, Ctrl-D stops
    the swarm), pipe lines in, send one
    message with --input, or run headless with --foreground. Agent-to-agent calls go through
    the orchestrator; crashed agents are respawned with their history.

    When the bundle has a Connection of the built-in `cli` connector, the chat, piped lines,
    --input and --input-file are that Connection's events, routed by its ingress rules.
    The swarm's other Connections run as supervised connector processes.

    When the swarm already runs (same bundle and state root), run attaches to it: the chat,
    piped lines, --input and --input-file go to the running swarm, and leaving does not stop it.
    """
    if input_text is not None and input_file is not None:
        raise click.UsageError("use either --input or --input-file, not both")
    if detach and (foreground or input_text is not None or input_file is not None):
        raise click.UsageError("--detach runs headless: it cannot be combined with --foreground, "
                               "--input or --input-file")
    options = get_globals()
    if engine == "local" and not (detach or foreground):
        # The fork server's template imports the runtime while this process loads the bundle
        # and sets up the service (goondan/swarm/forktemplate.py; docs/scaling.md).
        from goondan.swarm.forktemplate import start_early

        start_early()
    from goondan.config.cache import load_bundle_cached
    from goondan.swarm.service import SwarmService, load_env_files

    if path is not None and bundle is not None and Path(path).resolve() != Path(bundle).resolve():
        raise click.UsageError(f"two bundles given: PATH {path} and --bundle {bundle}")
    chosen = Path(path or bundle or options.bundle or ".")
    from goondan.commands.store_option import resolve_store

    # --store / GOONDAN_STORE: the conversations, queues and approvals; the runtime files stay
    # under the local state root (docs/orchestrator.md "The store")
    location, state_root = resolve_store(store, options.resolve_state_root)
    project_root = (chosen.parent if chosen.is_file() else chosen).resolve()
    real_env = dict(os.environ)
    load_env_files(project_root, env_file, os.environ, real_env=real_env)
    loaded = load_bundle_cached(chosen, state_root=state_root)  # docs/bundle-cache.md
    if ray_address is not None and engine != "ray":
        raise click.UsageError("--ray-address needs --engine ray")
    if detach and engine != "local":
        raise click.UsageError(
            "--detach runs the local engine only; run --engine ray with --foreground"
        )
    storage: Any = None
    leadership: Any = None  # goondan.swarm.leadership.Leadership on PostgreSQL
    if location.kind == "postgres":
        from goondan.storage.backends import open_backend

        storage = open_backend(location)  # E_STORE_UNAVAILABLE / _POSTGRES_MISSING now, not later
        # one active orchestrator per swarm and store; every write fenced by its lease
        leadership = _leadership(storage, loaded, swarm, state_root)
        storage = storage.with_fence(leadership.fence)
    service = SwarmService(
        loaded,
        storage=storage,
        store_url=location.url,
        state_root=state_root,
        swarm=swarm,
        watch=watch,
        env_file=env_file,
        real_env=real_env,
        engine=engine,
        ray_address=ray_address,
    )
    # starting Ray takes seconds: say so (docs/scaling.md)
    if engine == "ray" and not options.quiet:
        service.spawner.progress = lambda text: click.echo(text, err=True)  # type: ignore[attr-defined]
    # --lock-fd: the orchestrator `run --detach` starts; its parent took the lock
    if lock_fd is not None and not service.lock.adopt(lock_fd):
        from goondan.errors import ConfigError

        raise ConfigError(
            f"--lock-fd {lock_fd} is not the lock of swarm {service.swarm.name!r}",
            code="E_RUN_START_FAILED",
            suggestion="start the swarm with 'goondan run --detach'",
        )
    startup_done()  # cli.FAST_START: the collector was paused while the service was set up
    lines = _input_lines(input_text, input_file)
    if lock_fd is None:
        from goondan.swarm.attach import SwarmGone, claim_or_attach

        while (found := claim_or_attach(service)) is not None:  # None: this process runs it
            from goondan.swarm.stored import check_same_store

            check_same_store(found[0], location, where="--store")  # a PostgreSQL store: its own
            try:
                return _attach(
                    service,
                    found,
                    lines,
                    instance_key or found[0].instance_key,
                    foreground=foreground,
                    detach=detach,
                    as_json=options.json_errors,
                    color=options.color,
                    quiet=options.quiet,
                )
            except SwarmGone as gone:  # it stopped before taking a line: start it here instead
                lines = gone.lines
    if detach:
        # `run --detach`'s orchestrator gets the store URL in its environment, not its argv
        store_env = {"GOONDAN_STORE": str(location.url)} if location.url is not None else {}
        return _detach(
            service,
            {**real_env, **store_env},
            env_file,
            as_json=options.json_errors,
            quiet=options.quiet,
            ready_timeout=ready_timeout,
        )
    if leadership is not None:  # a standby until this node holds the swarm's lease
        leadership.acquire(lambda text: _standing_by(service, leadership, text, lock_fd,
                                                     quiet=options.quiet))
        # every agent's arguments carry the lease (pooled and Ray hosts build them with the
        # ProcessSpawner they hold as ``local``)
        argv_spawner: Any = getattr(service.spawner, "local", service.spawner)
        argv_spawner.extra_args += ["--store-lease", leadership.lease_arg()]
    try:
        if foreground:
            code = _headless(service, quiet=options.quiet)
        else:
            code = _chat(service, lines, instance_key or service.instance_key,
                         color=options.color, quiet=options.quiet)
    finally:
        if leadership is not None:
            leadership.close()
    if leadership is not None and leadership.lost:
        from goondan.errors import WorkspaceError

        raise WorkspaceError(
            f"this node lost the swarm's lease {leadership.name!r} (it could not renew it in "
            "time) and stopped; the store refused its writes from that moment",
            code="E_STORE_LEASE_LOST", location=leadership.name,
            suggestion="another node is active now (goondan status --store URL --json); start "
            "this one again to stand by")
    return code


def _leadership(storage: Any, loaded: Any, swarm: str | None, state_root: Path) -> Any:
    """The swarm's lease on a PostgreSQL store (docs/orchestrator.md "Failover")."""
    from goondan.swarm.leadership import Leadership
    from goondan.workspace.paths import workspace_id_for

    return Leadership.open(storage.db, workspace_id_for(loaded.root, loaded.package_name),
                           loaded.swarm_spec(swarm).name, state_root)


def _standing_by(service: Any, leadership: Any, text: str, lock_fd: int | None, *,
                 quiet: bool) -> None:
    """Announce that this node stands by; the orchestrator ``run --detach`` started (it has
    ``--lock-fd``) also records it, which its parent waits for (docs/orchestrator.md
    "Failover")."""
    if not quiet:
        click.echo(text, err=True)
    if lock_fd is not None:
        from goondan.storage.url import mask_url
        from goondan.swarm.daemon import write_standby

        url = service.store_url
        write_standby(service, leadership.holder or {}, mask_url(url) if url else None)


def _input_lines(input_text: str | None, input_file: str | None) -> Iterable[str] | None:
    if input_text is not None:
        from goondan.text import clean_text

        return [clean_text(input_text)]
    if input_file is not None:
        from goondan.console.prompt import iter_input_lines

        # the file stays open until the process exits: lines are read as they are sent
        source = sys.stdin if input_file == "-" else open(input_file, encoding="utf-8")  # noqa: SIM115
        return iter_input_lines(source)
    return None


def _attach(
    service: object,
    found: tuple[Any, Any],
    input_lines: Iterable[str] | None,
    conversation: str,
    *,
    foreground: bool,
    detach: bool,
    as_json: bool,
    color: bool,
    quiet: bool,
) -> int:
    """The swarm already runs: ``--foreground`` fails, ``--detach`` reports it, the chat and the
    line modes talk to it over its control socket (docs/orchestrator.md
    "One orchestrator per swarm")."""
    import asyncio
    import json

    from goondan.console import LineReader, ReplSession
    from goondan.swarm.attach import AttachedBackend
    from goondan.swarm.forktemplate import discard_early
    from goondan.swarm.service import SwarmService, already_running

    assert isinstance(service, SwarmService)
    discard_early()  # no agent process starts here: the running swarm has its own
    active, status = found
    if foreground:
        raise already_running(
            service.swarm.name, service.bundle.root, service.instance_key, active.pid
        )
    if detach:
        if as_json:
            click.echo(json.dumps(active.to_dict(), ensure_ascii=False))
        elif not quiet:
            click.echo(
                f"Swarm {active.swarm} already runs "
                f"(instanceKey={active.instance_key}, pid={active.pid})"
            )
        return 0
    backend = AttachedBackend(active, status, instance_key=conversation)
    runner = asyncio.Runner()
    try:
        if input_lines is not None or not sys.stdin.isatty():
            return _send_lines(backend, runner, input_lines)
        banner = (
            f"goondan run · swarm {backend.swarm} · entry "
            f"agent {backend.agent_name} · attached to the "
            f"running orchestrator (pid {active.pid}); leaving does not stop it"
        )
        reader = LineReader(service.state_root / "repl" / "history")
        session = ReplSession(backend, runner, reader=reader, out=sys.stdout, color=color,
                              stream=True, banner=banner, quiet=quiet)
        return session.run()
    finally:
        runner.close()


def _one_line(backend: Any, runner: Any, text: str, rest: Iterator[str]) -> Any:
    """One line to the swarm (a blank one: only counted); attached, :class:`SwarmGone` (with
    this line and the rest) if nothing listens any more: this ``run`` may then start the swarm."""
    from goondan.ipc.controlwire import ControlUnreachable
    from goondan.swarm.attach import AttachedBackend, SwarmGone

    try:
        return runner.run(backend.run_turn(text) if text.strip() else backend.skip_line(text))
    except ControlUnreachable:
        if not isinstance(backend, AttachedBackend):
            raise
        import itertools

        raise SwarmGone(itertools.chain([text], rest)) from None


def _send_lines(backend: Any, runner: Any, input_lines: Iterable[str] | None) -> int:
    """One request per line (``--input``, ``--input-file``, piped stdin); answers on stdout."""
    from goondan.console.prompt import iter_input_lines
    from goondan.console.render import format_turn_error
    from goondan.console.session import exit_code_for
    from goondan.secrets import mask

    lines = iter(input_lines if input_lines is not None else iter_input_lines(sys.stdin))
    code = 0
    for text in lines:
        result = _one_line(backend, runner, text, lines)
        if not text.strip():
            continue
        if result.error is None:
            click.echo(mask(result.text))
        else:
            for line in filter(None, format_turn_error(result.error)):
                click.echo(line, err=True)
            code = exit_code_for(result)
    return code


def _detach(service: object, real_env: dict[str, str], env_file: str | None, *, as_json: bool,
            quiet: bool, ready_timeout: float = 60.0) -> int:
    """Start ``goondan run --foreground`` in its own session and wait until it is ready: its
    agents and connectors run (``E_RUN_START_FAILED`` with the reason otherwise)."""
    import json

    from goondan.swarm.daemon import detached_argv, start_detached
    from goondan.swarm.service import SwarmService

    assert isinstance(service, SwarmService)
    argv = detached_argv(
        service.state_root,
        service.bundle.root,
        service.swarm.name,
        watch=service.watch,
        env_file=env_file,
    )
    lock_fd = service.lock.fd
    # claim_or_attach took it: the child adopts it (no gap without a holder)
    assert lock_fd is not None
    try:
        active = start_detached(
            [*argv, "--lock-fd", str(lock_fd)],
            state_root=service.state_root,
            key=service.key,
            log_dir=service.log_dir,
            env=real_env,
            cwd=Path.cwd(),
            pass_fds=(lock_fd,),
            timeout_s=ready_timeout,
        )
    finally:
        service.lock.release()  # the orchestrator holds it now (or it exited, releasing it)
    if active.standby is not None:
        return _report_standby(active, service.bundle.root, as_json=as_json, quiet=quiet)
    if as_json:
        click.echo(json.dumps(active.to_dict(), ensure_ascii=False))
    elif not quiet:
        where = service.bundle.root
        click.echo(f"Swarm {service.swarm.name} started in the background "
                   f"(instanceKey={active.instance_key}, pid={active.pid})")
        click.echo(f"  talk:   goondan send --bundle {where} TEXT")
        click.echo(f"  status: goondan status --bundle {where}")
        click.echo(f"  logs:   goondan logs --bundle {where}")
        click.echo(f"  stop:   goondan stop --bundle {where}")
    return 0


def _report_standby(active: Any, where: Path, *, as_json: bool, quiet: bool) -> int:
    """``run --detach`` whose orchestrator stands by: another node holds the swarm's lease."""
    import json

    holder = active.standby
    if as_json:
        click.echo(json.dumps({"standby": True, "active": holder, "pid": active.pid,
                               "swarm": active.swarm, "instanceKey": active.instance_key},
                              ensure_ascii=False))
    elif not quiet:
        click.echo(f"Swarm {active.swarm} is standing by in the background (pid={active.pid}): "
                   f"its lease is held by {holder.get('host', '?')} pid {holder.get('pid', '?')} "
                   f"({holder.get('stateRoot', '?')}); this node takes over when that one stops "
                   "renewing it")
        click.echo(f"  status: goondan status --store URL --bundle {where}")
        click.echo(f"  stop:   goondan stop --bundle {where}")
    return 0


def _headless(service: object, *, quiet: bool = False) -> int:
    import asyncio
    import signal

    from goondan.swarm.service import SwarmService

    assert isinstance(service, SwarmService)

    got: list[int] = []  # the signal that stopped it

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop_on(sig: int) -> None:
            got.append(sig)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop_on, sig)
        async with service:
            if not quiet:
                click.echo(
                    f"Orchestrator started (instanceKey={service.instance_key}, pid={os.getpid()})",
                    err=True,
                )
                click.echo(f"  logs: goondan logs --bundle {service.bundle.root}", err=True)
            await stop.wait()
        # SIGTERM is the service manager's normal stop (0); Ctrl-C is an interruption (130)
        return 130 if got and got[0] == signal.SIGINT else 0

    return asyncio.run(main())


def _chat(service: object, input_lines: Iterable[str] | None, conversation: str, *, color: bool,
          quiet: bool) -> int:
    import asyncio
    import signal

    from goondan.console import LineReader, ReplSession
    from goondan.console.session import keep_signals_on_main_thread
    from goondan.swarm.frontend import OrchestratorBackend, ServiceThread
    from goondan.swarm.service import SwarmService

    assert isinstance(service, SwarmService)
    thread = ServiceThread(service)
    terminate = _TerminateOnSigterm()
    terminate.install()
    thread.start()
    runner = asyncio.Runner()
    keep_signals_on_main_thread(runner, (signal.SIGINT, signal.SIGTERM))
    try:
        backend = OrchestratorBackend(thread, instance_key=conversation)
        if input_lines is not None or not sys.stdin.isatty():
            return _send_lines(backend, runner, input_lines)
        where = (f"Connection {backend.connection.name}" if backend.connection is not None
                 else f"conversation {conversation}")
        banner = (f"goondan run · swarm {service.swarm.name} · entry agent {backend.agent_name} · "
                  f"{where} (each agent is its own process)")
        reader = LineReader(service.state_root / "repl" / "history")
        session = ReplSession(backend, runner, reader=reader, out=sys.stdout, color=color,
                              stream=True, banner=banner, quiet=quiet)
        with _log_above_prompt(reader, color=color):
            return session.run()
    except _Terminated:
        return 128 + signal.SIGTERM  # the swarm is stopped gracefully below
    finally:
        try:
            runner.close()
        finally:
            thread.stop()
            terminate.uninstall()


@contextlib.contextmanager
def _log_above_prompt(reader: Any, *, color: bool) -> Iterator[None]:
    """During the chat, background records (warnings, crashed agents, watch reloads) are printed
    above the prompt instead of raw on stderr, where they would overwrite what is typed."""
    import logging

    from goondan.console.prompt import AbovePromptHandler

    logger = logging.getLogger("goondan")
    plain = [h for h in logger.handlers if getattr(h, "_goondan_cli", False)]
    handler = AbovePromptHandler(reader, color=color)  # INFO: only the events it shows
    for old in plain:
        logger.removeHandler(old)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for old in plain:
            logger.addHandler(old)


class _Terminated(BaseException):
    """SIGTERM: leave the chat (unlike Ctrl-C, which only cancels the running turn)."""


class _TerminateOnSigterm:
    """SIGTERM raises :class:`_Terminated` in the main thread, reliably.

    Python runs signal handlers only when the main thread executes bytecode. A SIGTERM that
    lands after readline printed the prompt but before it blocks in ``select()`` would wait for
    the next key press; so the C-level wakeup fd tells a watcher thread, which re-delivers the
    signal to the main thread every 0.2 s until the handler has run.
    """

    def __init__(self) -> None:
        self.handled = threading.Event()
        self._read, self._write = os.pipe()
        self._previous: Any = None
        self._previous_fd = -1

    def install(self) -> None:
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write)
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        threading.Thread(target=self._watch, name="goondan-sigterm", daemon=True).start()

    def uninstall(self) -> None:
        signal.signal(signal.SIGTERM, self._previous)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write)  # ends the watcher

    def _handle(self, signum: int, frame: object) -> None:
        if not self.handled.is_set():  # a second SIGTERM must not break the graceful stop
            self.handled.set()
            raise _Terminated

    def _watch(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        main = threading.main_thread().ident
        while data := os.read(self._read, 64):
            if signal.SIGTERM in data:
                while main is not None and not self.handled.wait(0.2):
                    signal.pthread_kill(main, signal.SIGTERM)
        os.close(self._read)
