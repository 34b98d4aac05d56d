"""The connector process: one Connection's ``run(ctx)`` behind an IPC channel.

:func:`process_main` is the ``connector`` entry of :data:`goondan.swarm.spawner.WORKER_ENTRIES`.
Arguments: ``--bundle-dir --connection-name --connector-name --state-root [--swarm]
[--log-dir --process-name]``. The process:

1. loads the bundle, finds the Connection, resolves ``config``/``secrets`` to strings (secrets
   registered for masking; unset values are left out and named in a warning) and loads the
   Connector's entry module; any failure is reported as ``runtime.startError {code, message}``
   (``E_CONNECTOR``) and the process exits 3;
2. reports ``runtime.ready`` and awaits ``run(ctx)`` (a sync ``def run(ctx)`` runs in a daemon
   thread of its own with the same ``ctx``: Decision 18). ``ctx.emit(event)`` sends
   ``runtime.emit {event}`` with a ``replyTo`` and waits for the orchestrator's
   ``runtime.answer {result: {id, duplicate, dropped}}`` (sent after the durable append) or
   ``{error}`` (raised as :class:`ConnectorEventError`). ``ctx.ask(event)`` sends the same
   with ``answer: true``: the answer comes when the Turn ended, ``runtime.delta`` messages of
   its event id before it go to the caller's ``on_progress``, and cancelling the call sends
   ``runtime.cancel {eventId}`` (:mod:`goondan.connectors.asking`). A
   ``runtime.approvalRequested`` from the orchestrator goes to the handler of
   ``ctx.on_approval``; ``ctx.decide_approval`` sends ``runtime.approvalDecided`` and waits for
   its ``runtime.answer`` (docs/approvals.md "Connectors");
3. ``shutdown``, SIGTERM or EOF on the channel (orchestrator gone) cancel ``run`` (a sync
   ``run`` sees ``ctx.stopping`` set and gets :data:`SYNC_STOP_GRACE_S` to return) and the
   process exits 0; ``run`` returning exits 0; ``run`` raising is reported as
   ``runtime.connectorError {code: E_CONNECTOR, message}`` and the process exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import logging
import os
import signal
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from goondan.connectors.asking import ProgressFn, TurnAnswer
from goondan.connectors.event import ConnectorContext, ConnectorEvent, EmitReceipt
from goondan.errors import ConnectorError, ConnectorEventError, GoondanError, IpcError
from goondan.ipc import control
from goondan.ipc.channel import PipeTransport, Transport
from goondan.ipc.protocol import ORCHESTRATOR
from goondan.secrets import mask
from goondan.types import JsonObject
from goondan.workspace.files import private_dirs

__all__ = ["ConnectorWorker", "parse_args", "process_main", "serve"]

_log = logging.getLogger("goondan.connectors.process")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse the connector process arguments."""
    parser = argparse.ArgumentParser(prog="goondan-connector", add_help=False)
    parser.add_argument("--bundle-dir", required=True)
    parser.add_argument("--connection-name", required=True)
    parser.add_argument("--connector-name", required=True)
    parser.add_argument("--state-root", default=None)
    parser.add_argument("--swarm", default=None)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--process-name", default=None)
    return parser.parse_args(argv)


class ConnectorWorker:
    """The connector side of the channel: ``emit`` requests, control, and stop signals."""

    def __init__(self, transport: Transport, *, connection_name: str) -> None:
        self.transport = transport
        self.connection_name = connection_name
        self._pending: dict[str, asyncio.Future[control.Answer]] = {}
        self._progress: dict[str, ProgressFn] = {}  # event id -> the on_progress of its ask
        self.stop_requested = asyncio.Event()
        self.ctx: ConnectorContext | None = None  # set once opened: approval requests go to it
        self._tasks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<ConnectorWorker {self.connection_name} pending={len(self._pending)}>"

    async def report(self, message: control.Control) -> None:
        """Send a control message (a report, or an ``emit`` query) to the orchestrator."""
        await self.transport.send(message.ipc_message(
            sender=self.connection_name, to=ORCHESTRATOR, instance_key=self.connection_name,
            source_kind="connector"))

    async def report_quietly(self, message: control.Control) -> None:
        """:meth:`report`, best effort: a closed channel means the orchestrator is gone."""
        with contextlib.suppress(IpcError):
            await self.report(message)

    async def emit(self, event: ConnectorEvent) -> EmitReceipt:
        """Hand ``event`` to the orchestrator; returns after its durable append."""
        correlation = f"corr_{uuid.uuid4().hex}"
        future: asyncio.Future[control.Answer] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = future
        try:
            await self.report(control.Emit(correlation_id=correlation, event=event.to_dict()))
            answer = await future
        finally:
            self._pending.pop(correlation, None)
        error = answer.error
        if isinstance(error, dict):
            if error.get("code") == ConnectorEventError.code:
                raise ConnectorEventError(str(error.get("message")))
            raise ConnectorError(
                str(error.get("message")), code=str(error.get("code") or "E_CONNECTOR")
            )
        result = answer.result if isinstance(answer.result, dict) else {}
        return EmitReceipt(
            str(result.get("id") or event.id),
            duplicate=bool(result.get("duplicate")),
            dropped=bool(result.get("dropped")),
        )

    async def ask(self, event: ConnectorEvent, agent: str | None = None,
                  on_progress: ProgressFn | None = None, *,
                  wait_for_approval: bool = False) -> TurnAnswer:
        """Hand ``event`` to the orchestrator and wait for its Turn's answer; cancelling this
        cancels the Turn."""
        correlation = f"corr_{uuid.uuid4().hex}"
        future: asyncio.Future[control.Answer] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = future
        if on_progress is not None:
            self._progress[event.id] = on_progress
        try:
            await self.report(control.Emit(correlation_id=correlation, event=event.to_dict(),
                                             answer=True, agent=agent,
                                             wait_for_approval=wait_for_approval))
            answer = await future
        except asyncio.CancelledError:
            await asyncio.shield(self.report_quietly(control.Cancel(event.id, "cancelled")))
            raise
        finally:
            self._pending.pop(correlation, None)
            self._progress.pop(event.id, None)
        error = answer.error
        if isinstance(error, dict):
            if error.get("code") == ConnectorEventError.code:
                raise ConnectorEventError(str(error.get("message")))
            if error.get("code") == "E_TURN_CANCELLED":
                return TurnAnswer(EmitReceipt(event.id), error_code="E_TURN_CANCELLED",
                                  error_message=str(error.get("message") or "cancelled"))
            raise ConnectorError(
                str(error.get("message")), code=str(error.get("code") or "E_CONNECTOR")
            )
        return TurnAnswer.from_dict(answer.result, event.id)

    async def decide(self, approval: str, approve: bool, by: str, via: str,
                     args: JsonObject | None, note: str | None,
                     reason: str | None) -> JsonObject:
        """Send a decision (``runtime.approvalDecided``) and wait for the orchestrator's answer."""
        correlation = f"corr_{uuid.uuid4().hex}"
        future: asyncio.Future[control.Answer] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = future
        try:
            await self.report(control.ApprovalDecided(
                correlation_id=correlation, approval_id=approval, approve=approve, by=by, via=via,
                args=args, note=note, reason=reason))
            answer = await future
        finally:
            self._pending.pop(correlation, None)
        if isinstance(answer.error, dict):
            raise ConnectorError(str(answer.error.get("message")),
                                 code=str(answer.error.get("code") or "E_CONNECTOR"))
        return answer.result if isinstance(answer.result, dict) else {}

    def _announce(self, message: control.ApprovalRequested) -> None:
        handler = self.ctx.approval_handler if self.ctx is not None else None
        if handler is None:
            _log.info("approval %s not announced: this connector announces no approvals",
                      message.approval.get("id"))
            return

        async def announce() -> None:
            try:
                await handler(dict(message.approval), dict(message.properties))
            except Exception:  # a connector's bug must not stop the read loop
                _log.exception("announcing approval %s failed", message.approval.get("id"))

        task = asyncio.ensure_future(announce())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def read_loop(self) -> None:
        """Resolve answers; ``shutdown`` or EOF sets :attr:`stop_requested`."""
        while True:
            try:
                message = await self.transport.recv()
            except IpcError as err:
                _log.error("bad message from the orchestrator: %s", err.message)
                message = None
            if message is None:
                self._fail(IpcError("the orchestrator closed the channel", code="E_IPC_CLOSED"))
                self.stop_requested.set()
                return
            if message.type == "shutdown":
                self.stop_requested.set()
            elif message.type == "event":
                try:
                    answer = control.decode_control(message.agent_event())
                except IpcError as err:
                    _log.error("bad control message from the orchestrator: %s", err.message)
                    continue
                if isinstance(answer, control.Answer):
                    future = self._pending.get(answer.in_reply_to)
                    if future is not None and not future.done():
                        future.set_result(answer)
                elif isinstance(answer, control.ApprovalRequested):
                    self._announce(answer)
                elif isinstance(answer, control.Delta):
                    listener = self._progress.get(answer.event_id)
                    if listener is not None:
                        try:
                            listener(answer.payload)
                        except Exception:  # a connector's bug must not stop the answers
                            _log.exception("on_progress failed")

    def _fail(self, error: GoondanError) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)


def _start_error(message: str) -> ConnectorError:
    return ConnectorError(message, code="E_CONNECTOR")


async def _open(
    args: argparse.Namespace, worker: ConnectorWorker
) -> tuple[Callable[..., Any], ConnectorContext]:
    """Load the bundle and the entry module; build the context."""
    from goondan.config.cache import load_bundle_cached
    from goondan.connectors.inbox import connection_dir
    from goondan.connectors.spec import connections_for_swarm, resolve_connection_values
    from goondan.tools.loader import load_entry_module
    from goondan.workspace.paths import resolve_state_root

    state_root = resolve_state_root(args.state_root)
    bundle = await asyncio.to_thread(
        load_bundle_cached, Path(args.bundle_dir), state_root=state_root
    )
    swarm = bundle.swarm_spec(args.swarm)
    spec = next(
        (c for c in connections_for_swarm(bundle, swarm.name) if c.name == args.connection_name),
        None,
    )
    if spec is None:
        raise _start_error(
            f"Connection {args.connection_name!r} is not bound to Swarm {swarm.name!r}"
        )
    config, secrets, unset = resolve_connection_values(spec, os.environ)
    if unset:
        _log.warning(
            "Connection %s: unset values left out of the context: %s", spec.name, ", ".join(unset)
        )
    try:
        module = await asyncio.to_thread(load_entry_module, spec.entry, kind="connector")
    except GoondanError as err:
        raise _start_error(f"Connector {spec.connector!r}: {err.message}") from err
    run = getattr(module, "run", None)
    if not callable(run):
        raise _start_error(f"Connector {spec.connector!r} entry {spec.entry.name} has no "
                           "'async def run(ctx)' (or 'def run(ctx)')")
    state_dir = (
        connection_dir(state_root, bundle.root, bundle.package_name, swarm.name, spec.name)
        / "state"
    )
    private_dirs(state_dir)
    agents = {}
    for name in swarm.agents:
        resource = bundle.get("Agent", name)
        description = resource.spec.get("description") if resource is not None else None
        agents[name] = description.strip() if isinstance(description, str) else ""
    ctx = ConnectorContext(
        connection_name=spec.name, connector_name=spec.connector, config=config, secrets=secrets,
        emit=worker.emit, ask=worker.ask, decide=worker.decide, state_dir=state_dir,
        loop=asyncio.get_running_loop(), agents=agents, entry_agent=swarm.entry_agent,
    )
    return run, ctx


# How long a stopping connector process waits for a sync ``run`` to return after
# ``ctx.stopping`` is set (the supervisor's SIGKILL comes after 5 s).
SYNC_STOP_GRACE_S = 2.0


async def _run_in_thread(run: Callable[..., Any], ctx: ConnectorContext) -> None:
    """A sync ``run(ctx)`` in a daemon thread (Decision 18): its return or exception is this
    coroutine's. Cancelling it sets ``ctx.stopping`` and waits up to
    :data:`SYNC_STOP_GRACE_S` for the thread to return; a thread that ignores it is left
    behind (a daemon thread does not keep the process alive)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def body() -> None:
        try:
            result = run(ctx)
        except BaseException as exc:  # reported as the connector's crash, like an async run's
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=body, name=f"connector-{ctx.connection_name}", daemon=True).start()
    try:
        # a cancel must not cancel ``done``: the grace below waits on it
        result = await asyncio.shield(done)
    except asyncio.CancelledError:
        ctx.stopping.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(done), SYNC_STOP_GRACE_S)
        raise
    if inspect.isawaitable(result):  # a plain def that returned a coroutine
        await result


def _start(run: Callable[..., Any], ctx: ConnectorContext) -> asyncio.Future[Any]:
    if asyncio.iscoroutinefunction(run):
        coroutine: Awaitable[Any] = run(ctx)
        return asyncio.ensure_future(coroutine)
    return asyncio.ensure_future(_run_in_thread(run, ctx))


async def serve(
    transport: Transport, args: argparse.Namespace, *, handle_sigterm: bool = False
) -> int:
    """Run one Connection's connector until it returns, fails or is told to stop (also by
    SIGTERM with ``handle_sigterm``, as in a connector process); returns the exit code."""
    worker = ConnectorWorker(transport, connection_name=args.connection_name)
    reader = asyncio.ensure_future(worker.read_loop())
    if handle_sigterm:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop_requested.set)
    try:
        run, ctx = await _open(args, worker)
        worker.ctx = ctx
    except Exception as exc:  # any start failure is reported the same way, once
        message = exc.message if isinstance(exc, GoondanError) else f"{type(exc).__name__}: {exc}"
        _log.error("connection %s failed to start: %s", args.connection_name, mask(message))
        await worker.report_quietly(control.StartError(code="E_CONNECTOR", message=mask(message)))
        reader.cancel()
        await transport.aclose()
        return 3
    await worker.report_quietly(control.Ready(pid=os.getpid()))
    task = _start(run, ctx)
    stop = asyncio.ensure_future(worker.stop_requested.wait())
    code = 0
    try:
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    except Exception as exc:  # run(ctx) raised: a crash of this connector
        # a reported failure (a port taken): its message, no traceback
        if isinstance(exc, GoondanError):
            message = exc.message
            _log.error(
                "connection %s: connector %s failed: %s",
                args.connection_name,
                args.connector_name,
                mask(message),
            )
            _log.debug(
                "connection %s: traceback of the failure", args.connection_name, exc_info=True
            )
        else:
            message = f"{type(exc).__name__}: {exc}"
            _log.exception(
                "connection %s: connector %s failed", args.connection_name, args.connector_name
            )
        await worker.report_quietly(
            control.ConnectorError(code="E_CONNECTOR", message=mask(message))
        )
        code = 1
    finally:
        stop.cancel()
        if not task.done():  # serve itself was cancelled (a hosted worker killed): run goes too
            task.cancel()
            reader.cancel()
    if code == 0 and not worker.stop_requested.is_set():
        await worker.report_quietly(control.Completed())
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    await transport.aclose()
    return code


def process_main(conn: Connection, argv: list[str]) -> None:
    """Entry of a connector process (the ``connector`` worker kind)."""
    from goondan.ipc.logs import configure_process_logging, redirect_output

    args = parse_args(argv)
    if args.log_dir:
        redirect_output(Path(args.log_dir), args.process_name or args.connection_name)
    configure_process_logging(connection=args.connection_name, connector=args.connector_name)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = asyncio.run(serve(PipeTransport(conn), args, handle_sigterm=True))
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)

