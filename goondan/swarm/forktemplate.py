"""The fork server's template process: pre-imported, bundle-loaded, it forks agent processes.

An agent process spends most of its start importing the runtime and loading the bundle. The
template (started by :class:`~goondan.swarm.forkserver.ForkServer`, with the ``spawn`` start
method, never by forking the orchestrator) does both once, and then answers spawn requests
with ``os.fork()``: a new agent process costs a fork, not an interpreter start
(docs/scaling.md "The fork server").

The control channel is a ``SOCK_SEQPACKET`` Unix socket pair (one record per message). The
orchestrator sends one request at a time: a pickle of ``(target, argv, environ, cwd, sys.path,
name)`` with the child end of the instance's pipe attached (``SCM_RIGHTS``). The template
answers ``["forked", pid]`` or ``["failed", reason]``, and later ``["exit", pid, exitcode]``
when it reaped that child (``exitcode`` as ``multiprocessing`` spells it: negative = ended by
that signal). It sends ``["ready"]`` once its imports are done.

Before each fork the template takes the request's environment, working directory and
``sys.path`` (what a ``spawn`` child started at that moment would inherit) and, for the agent
entry (:func:`~goondan.swarm.agent_process.process_main`), the bundle: loaded once and loaded
again when one of its files (those ``--watch`` follows), the environment or the working
directory changed, so an instance forked after an edit sees the edited bundle. It is
single-threaded and runs no event loop (a fork with threads is unsafe): it waits in
``poll()`` on the socket and on one ``pidfd`` per child. It refuses to fork (``failed``) if a
thread ever appears. End of file on the socket (the orchestrator is gone) ends it; its
children keep running and see end of file on their own pipes.

The forked child closes the template's socket and pidfds (it holds only its own pipe), resets
the signal mask and SIGINT as every agent process does (:func:`child_entry`; the template
installs no other handler), names itself as a spawned child is named, records the orchestrator
(not the template) as the owner of its tools' processes, and runs the entry. ``random`` is
re-seeded by CPython's own at-fork hook; the process group is the orchestrator's, as for a
spawned child. Its exit code is what the entry's ``sys.exit`` gave (1 for an uncaught
exception, as in a ``spawn`` child), after the ``atexit`` handlers ran.

:func:`start_early` lets ``goondan run`` start the template before it imports asyncio and the
orchestrator (the imports then run in parallel with the command's); the first fork server takes
it (:func:`take_early`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import pickle
import select
import signal
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "FORK_SERVER_ENV",
    "WARM_IMPORTS",
    "discard_early",
    "fork_server_enabled",
    "start_early",
    "start_template",
    "take_early",
    "template_main",
]

# What every agent process imports before its first request (goondan/swarm/agent_process.py).
WARM_IMPORTS = (
    "goondan.swarm.agent_process",
    "goondan.runtime.instance",
    "goondan.config.cache",
    "goondan.config.bundle",
    "goondan.llm.registry",
    "goondan.llm.http",
    "goondan.extensions.loader",
    "concurrent.futures.thread",  # asyncio.to_thread's executor
)
MAX_REQUEST = 4 * 1024 * 1024  # the largest request record (environment, sys.path, argv)
FORK_SERVER_ENV = "GOONDAN_FORK_SERVER"

Signature = tuple[tuple[str, int, int], ...]


def fork_server_enabled(env: Any = os.environ) -> bool:
    """True where the fork server is used: Linux with ``pidfd_open`` (kernel 5.3+), unless
    ``GOONDAN_FORK_SERVER`` is ``0``/``false``/``no``/``off``."""
    if (env.get(FORK_SERVER_ENV) or "").strip().lower() in ("0", "false", "no", "off"):
        return False
    return _pidfd_works()


def _pidfd_works() -> bool:
    if sys.platform != "linux" or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def _send(sock: socket.socket, *record: Any) -> None:
    with contextlib.suppress(OSError):
        sock.send(json.dumps(record).encode())


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


class _Template:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.children: dict[int, int] = {}  # pidfd -> pid
        self.poller = select.poll()
        self.bundles: dict[tuple[str, str | None], tuple[Any, Signature, dict[str, str], str]] = {}
        self.orchestrator = os.getppid()  # the template is the orchestrator's child

    def serve(self) -> None:
        self.poller.register(self.sock, select.POLLIN)
        while True:
            for fd, _ in self.poller.poll():
                if fd != self.sock.fileno():
                    self._reap(fd)
                elif not self._request():
                    return

    def _reap(self, pidfd: int) -> None:
        pid = self.children.pop(pidfd)
        self.poller.unregister(pidfd)
        os.close(pidfd)
        try:
            _, status = os.waitpid(pid, 0)
            code: int | None = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = None
        _send(self.sock, "exit", pid, code)

    def _request(self) -> bool:
        try:
            data, fds, flags, _ = socket.recv_fds(self.sock, MAX_REQUEST, 1)
        except OSError:
            return False
        if not data:
            return False  # the orchestrator closed the socket
        try:
            if flags & socket.MSG_TRUNC or len(fds) != 1:
                raise ValueError("malformed request")
            target, argv, environ, cwd, path, name = pickle.loads(data)
            pid = self._fork(target, argv, environ, cwd, path, name, fds[0])
        except (Exception, SystemExit) as err:  # the orchestrator spawns this one instead
            _send(self.sock, "failed", f"{type(err).__name__}: {err}")
        else:
            _send(self.sock, "forked", pid)
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return True

    def _fork(self, target: Any, argv: list[str], environ: dict[str, str], cwd: str,
              path: list[str], name: str, fd: int) -> int:
        if os.environ != environ:
            os.environ.clear()
            os.environ.update(environ)
        if os.getcwd() != cwd:
            os.chdir(cwd)
        sys.path[:] = path
        bundle = self._bundle(argv) if _is_agent_entry(target) else None
        if _threads() > 1:
            raise RuntimeError("the template has threads: it cannot fork safely")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = self._child(target, argv, name, fd, bundle)
            finally:
                os._exit(code)
        pidfd = os.pidfd_open(pid)
        self.children[pidfd] = pid
        self.poller.register(pidfd, select.POLLIN)
        return pid

    def _bundle(self, argv: list[str]) -> Any:
        """The loaded bundle for these agent arguments, or None (the child then loads it and
        reports what is wrong with it)."""
        from goondan.config.cache import load_bundle_cached
        from goondan.swarm.agent_process import parse_args
        from goondan.workspace.paths import resolve_state_root

        args = parse_args(argv)
        key = (args.bundle_dir, args.state_root)
        environ, cwd = dict(os.environ), os.getcwd()
        entry = self.bundles.get(key)
        if entry is not None:
            bundle, signature, loaded_env, loaded_cwd = entry
            if (loaded_env, loaded_cwd) == (environ, cwd) and (
                bundle.watched_signature() == signature
            ):
                return bundle
        self.bundles.pop(key, None)
        try:
            bundle = load_bundle_cached(
                Path(args.bundle_dir), state_root=resolve_state_root(args.state_root)
            )
        except Exception:  # the child loads it again and reports the error as it always does
            return None
        # The signature is taken after the load: an edit racing it is caught by the ``--watch``
        # restart that follows it.
        self.bundles[key] = (bundle, bundle.watched_signature(), environ, cwd)
        _import_providers(bundle)
        return bundle

    def _child(self, target: Any, argv: list[str], name: str, fd: int, bundle: Any) -> int:
        import functools
        import multiprocessing
        from multiprocessing.connection import Connection

        from goondan.swarm.spawner import child_entry

        self.sock.close()
        for pidfd in self.children:
            os.close(pidfd)
        self.children.clear()
        self.bundles.clear()
        multiprocessing.current_process().name = name
        from goondan.tools.processes import enter_agent_process

        enter_agent_process(self.orchestrator)  # the owner of its tools' processes, not us
        conn = Connection(fd)
        if bundle is not None:
            from goondan.swarm.agent_process import build_agent_instance, run_child

            build = functools.partial(build_agent_instance, bundle=bundle)
            target = functools.partial(run_child, build=build)
        try:
            child_entry(target, conn, argv)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # as a spawned child's interpreter does when it ends
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        return code


def _import_providers(bundle: Any) -> None:
    """Import the built-in model adapters the bundle's Models use, once, for every child (a
    third-party provider's code is left to the child: it might start threads)."""
    from goondan.config.providers import find_provider
    from goondan.llm.registry import load_factory

    for model in bundle.of_kind("Model"):
        row = find_provider(model.spec.get("provider"))
        if row is not None and row.distribution is None:
            with contextlib.suppress(Exception):
                load_factory(row)


def _is_agent_entry(target: Any) -> bool:
    from goondan.swarm.agent_process import process_main

    return target is process_main


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def template_main(sock: socket.socket) -> None:
    """Entry of the template process (``spawn`` start method): import, report ready, serve."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's to handle
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
    # The imports create long-lived objects only: collecting while they load is wasted work,
    # and freezing them keeps the agents' later collections small (figures: commands/common.py
    # defer_gc).
    gc.disable()
    from goondan.codecache import install, save

    install()  # compiled dataclass methods of earlier starts
    try:
        for name in WARM_IMPORTS:
            importlib.import_module(name)
    finally:
        gc.freeze()
        gc.enable()
    save()
    sock.setblocking(True)
    _send(sock, "ready")
    _Template(sock).serve()


def start_template() -> tuple[Any, socket.socket]:
    """Start a template process (``spawn``); returns ``(process, orchestrator's socket)``.

    Started with SIGINT and SIGTERM blocked (the template clears the mask once it ignores
    SIGINT), and with the calling thread's mask restored afterwards."""
    import multiprocessing

    from goondan.swarm.procstart import start_process

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    context = multiprocessing.get_context("spawn")
    process = context.Process(target=template_main, args=(theirs,), name="goondan-fork-template",
                              daemon=True)
    has_mask = hasattr(signal, "pthread_sigmask")
    mask = (
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        if has_mask
        else None
    )
    try:
        start_process(process)
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        theirs.close()
    return process, ours


_early: tuple[Any, socket.socket] | None = None


def start_early() -> None:
    """Start the template now, for the first fork server of this process (``goondan run``)."""
    global _early
    if _early is None and fork_server_enabled(os.environ):
        _early = start_template()
        atexit.register(discard_early)


def take_early() -> tuple[Any, socket.socket] | None:
    """The template :func:`start_early` started, once (``None`` if there is none)."""
    global _early
    early, _early = _early, None
    return early


def discard_early() -> None:
    """Stop the early template if no fork server took it."""
    early = take_early()
    if early is not None:
        process, sock = early
        sock.close()  # end of file: it exits once its imports are done
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.terminate()
        with contextlib.suppress(OSError, ValueError, AssertionError):
            process.join(5)
