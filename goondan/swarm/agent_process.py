"""The agent process: one (agent, instanceKey) behind an IPC channel.

:func:`process_main` is the child entry of :class:`~goondan.swarm.spawner.ProcessSpawner`
(``spawn`` start method). Arguments (docs/orchestrator.md "Process model"): ``--bundle-dir``,
``--agent-name``, ``--instance-key``, plus ``--state-root``, ``--swarm``, ``--workdir``,
``--log-dir`` and ``--process-name`` (stdout/stderr go to
``<log-dir>/<process-name>.{stdout,stderr}.log``).

:class:`AgentWorker` is transport-agnostic and also runs in process (tests, embedding):

1. it reports ``runtime.ready`` and pumps the channel; a Turn the instance left open when its
   last process died (docs/conversations.md "Durability") runs first, reported in
   ``runtime.ready`` (``resuming``) and bracketed by ``turnStarted``/``turnFinished`` like any;
2. each ``event`` without ``metadata.inReplyTo`` is one Turn, run in arrival order, bracketed
   by ``runtime.turnStarted``/``runtime.turnFinished`` reports (the orchestrator's crash
   accounting and per-instance flow control rely on them); after a Turn whose event had
   ``replyTo`` the answer goes back with ``metadata.inReplyTo``, by one path whatever the Turn's
   end (finished, failed, cancelled): :meth:`AgentWorker._answer`. Every Turn's runtime events
   go to the orchestrator as ``runtime.delta`` reports before the answer (its event sinks get
   them); when the event has ``stream`` set the Turn is streamed: the model
   is asked for text deltas, and the orchestrator passes the events on to the requester;
3. events with ``metadata.inReplyTo`` answer this instance's own requests
   (:class:`IpcAgentRouter`);
4. ``runtime.inspect {what}`` (from the orchestrator) is answered at once, between or during
   Turns, with the instance's conversation, tools and usage (:mod:`goondan.ipc.queries`);
   ``runtime.cancel {eventId}`` (from the orchestrator) cancels that event's Turn: the running
   task is cancelled (``AgentInstance`` aborts the model request, repairs the tool pairs and
   folds), a queued one is dropped; either way the requester gets an ``E_TURN_CANCELLED``
   answer and ``runtime.turnFinished {cancelled: true}`` is reported, so queued events go on;
5. ``shutdown`` → draining: no new Turn starts, the running one finishes and folds, the
   instance is closed, then ``shutdown_ack {instanceKey, pending}`` (events that never started)
   and exit 0. EOF on the channel (orchestrator gone) drains the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

from goondan.errors import AgentError, GoondanError, IpcError, TurnCancelled
from goondan.ipc.channel import PipeTransport, Transport
from goondan.ipc.control import (
    Cancel,
    Control,
    Delta,
    Inspect,
    ListQuery,
    Query,
    Ready,
    Shutdown,
    ShutdownAck,
    SpawnQuery,
    StartError,
    TurnFinished,
    TurnStarted,
    decode_control,
    decode_shutdown,
)
from goondan.ipc.matcher import RequestMatcher, new_correlation_id
from goondan.ipc.protocol import (
    CONTROL_PREFIX,
    ORCHESTRATOR,
    IpcMessage,
)
from goondan.ipc.queries import answer_inspect
from goondan.pipeline.context import TurnResult
from goondan.runtime import approvals
from goondan.runtime.agents import TurnHandler, response_event, turn_error
from goondan.runtime.approvals import APPROVAL_DECIDED_EVENT, APPROVAL_PENDING
from goondan.types import AgentEvent, JsonObject

__all__ = [
    "AgentWorker",
    "IpcAgentRouter",
    "TurnHandler",
    "cancelled_error",
    "parse_args",
    "process_main",
]

_log = logging.getLogger("goondan.ipc")


class IpcAgentRouter:
    """:class:`~goondan.runtime.agents.AgentRouter` that talks through the orchestrator."""

    def __init__(self, transport: Transport, *, agent_name: str, instance_key: str) -> None:
        self.transport = transport
        self.agent_name = agent_name
        self.instance_key = instance_key
        self._pending: RequestMatcher[AgentEvent, str] = RequestMatcher()  # route: the target

    def __repr__(self) -> str:
        return (
            f"<IpcAgentRouter {self.agent_name}@{self.instance_key} pending={len(self._pending)}>"
        )

    async def _exchange(self, to: str, event: AgentEvent) -> AgentEvent:
        assert event.reply_to is not None
        correlation = event.reply_to.correlation_id
        future = self._pending.expect(correlation, to)
        try:
            await self.transport.send(IpcMessage.event(self.agent_name, to, event))
            return await future
        finally:
            self._pending.forget(correlation)

    async def request(self, target: str, event: AgentEvent, *, timeout_ms: int) -> AgentEvent:
        """Send a request event to ``target`` and wait for its answer (timeout: caller's)."""
        return await self._exchange(target, event)

    async def send(self, target: str, event: AgentEvent) -> None:
        """Send a notification event to ``target``."""
        await self.transport.send(IpcMessage.event(self.agent_name, target, event))

    async def deliver(self, owner: tuple[str, str], event: AgentEvent) -> None:
        """Queue ``event`` for this process's own instance, through the orchestrator (so its
        Turn is dispatched and accounted like any other event)."""
        event.instance_key = owner[1]
        await self.transport.send(IpcMessage.event(self.agent_name, owner[0], event))

    async def _query(self, query: Query) -> JsonObject:
        event = query.to_event(sender=self.agent_name, instance_key=self.instance_key)
        async with asyncio.timeout(30):
            answer = await self._exchange(ORCHESTRATOR, event)
        error = answer.metadata.get("error")
        if isinstance(error, dict):
            raise AgentError(str(error.get("message")), code=str(error.get("code") or "E_AGENT"))
        result = answer.metadata.get("result")
        return result if isinstance(result, dict) else {}

    async def spawn(
        self, owner: tuple[str, str], target: str, *, instance_key: str, cwd: str | None
    ) -> JsonObject:
        """Ask the orchestrator to start (target, instance_key)."""
        return await self._query(SpawnQuery(
            new_correlation_id(), target=target, target_instance_key=instance_key, cwd=cwd))

    async def list_instances(
        self, owner: tuple[str, str], *, include_all: bool
    ) -> list[JsonObject]:
        """Ask the orchestrator for spawned instances."""
        result = await self._query(ListQuery(new_correlation_id(), include_all=include_all))
        rows = result.get("agents")
        return list(rows) if isinstance(rows, list) else []

    def resolve(self, event: AgentEvent) -> bool:
        """Hand a response event to the waiting request; False if nobody waits (late answer)."""
        return self._pending.resolve(str(event.metadata.get("inReplyTo")), event)

    def close(self, error: GoondanError) -> None:
        """Fail every waiting request and refuse new ones (the channel is gone)."""
        self._pending.close(error)


class AgentWorker:
    """Pumps one agent instance's IPC channel (see the module docstring)."""

    def __init__(
        self, transport: Transport, *, agent_name: str, instance_key: str,
        logger: logging.Logger | None = None,
    ) -> None:
        self.transport = transport
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.logger = logger or _log
        self.router = IpcAgentRouter(transport, agent_name=agent_name, instance_key=instance_key)
        self._queue: deque[AgentEvent] = deque()
        self._wakeup = asyncio.Event()
        self._draining = False
        self._shutdown_requested = False
        self._turn_event: str | None = None  # id of the event whose Turn is running
        self._stream_sends: list[asyncio.Task[None]] = []
        self._running: tuple[str, asyncio.Task[TurnResult] | None] | None = None
        self._cancelled: set[str] = set()  # ids of running Turns asked to cancel
        self._tasks: set[asyncio.Task[None]] = set()
        self._handler: Any = None  # set by serve(); answers runtime.inspect queries
        # Events sent to join the running Turn (inputPolicy: steer): joined it, or already
        # started elsewhere; reported in its turnFinished (docs/orchestrator.md "Steering").
        self._steered: list[AgentEvent] = []
        self._steer_skipped: list[str] = []
        self._resuming: str | None = None  # id of the event whose interrupted Turn resumes
        self.turns = 0
        # The store's input queue of a scope, for the inputs whose start marker names one
        # (``goondan run --store``; goondan.swarm.durable_inputs); set by build_agent_instance.
        self.queues: Callable[[str], Any] | None = None

    def __repr__(self) -> str:
        return (
            f"<AgentWorker {self.agent_name}@{self.instance_key} queued={len(self._queue)} "
            f"draining={self._draining}>"
        )

    async def report(self, control: Control) -> None:
        """Send a control report to the orchestrator (best effort)."""
        message = control.ipc_message(
            sender=self.agent_name, to=ORCHESTRATOR, instance_key=self.instance_key
        )
        with contextlib.suppress(IpcError):
            await self.transport.send(message)

    def on_runtime_event(self, payload: JsonObject) -> None:
        """Instance listener: forward the running Turn's events as ``runtime.delta`` reports."""
        event_id = self._turn_event
        if event_id is None:
            return
        # PipeTransport.send queues the frame before its first await, so the tasks keep order.
        task = asyncio.ensure_future(self.report(Delta(event_id, payload)))
        self._stream_sends.append(task)

    async def _flush_stream(self) -> None:
        sends, self._stream_sends = self._stream_sends, []
        if sends:
            await asyncio.gather(*sends, return_exceptions=True)


    def request_drain(self) -> None:
        """Stop after the running Turn (SIGTERM in the child, or tests)."""
        self._draining = True
        self._wakeup.set()

    async def _read_loop(self) -> None:
        while True:
            message = await self.transport.recv()
            if message is None:
                # Orchestrator gone: finish the running turn, then exit (no orphans).
                self.router.close(
                    IpcError("the orchestrator closed the channel", code="E_IPC_CLOSED")
                )
                self.request_drain()
                return
            shutdown = decode_shutdown(message)
            if isinstance(shutdown, Shutdown):
                self._shutdown_requested = True
                self.logger.info(
                    "shutdown requested (reason=%s, gracePeriodMs=%s)",
                    shutdown.reason, shutdown.grace_period_ms,
                )
                self.request_drain()
            elif message.type == "event":
                event = message.agent_event()
                control = decode_control(event)
                if isinstance(control, Cancel):
                    self.cancel(control.event_id)
                elif isinstance(control, Inspect) and event.reply_to is not None:
                    self._track(asyncio.ensure_future(self._inspect(event)))  # goondan.ipc.queries
                elif "inReplyTo" in event.metadata:
                    # Before the control-prefix check: the orchestrator answers spawn / list
                    # queries with ``runtime.answer`` events.
                    if not self.router.resolve(event):
                        self.logger.debug(
                            "dropping late answer %s", event.metadata.get("inReplyTo")
                        )
                elif event.type.startswith(CONTROL_PREFIX):  # known or not, never a Turn
                    self.logger.debug("ignoring control event %s", event.type)
                elif event.type == APPROVAL_DECIDED_EVENT:
                    # Beside the queue: inputs queued behind a parked turn wait for this one.
                    self._track(asyncio.ensure_future(self._resume_parked(event)))
                elif event.steer_into is not None:
                    self._steer(event)
                else:
                    self._queue.append(event)
                    self._wakeup.set()

    def _steer(self, event: AgentEvent) -> None:
        """Hand ``event`` to the running Turn it was sent to join, its start claimed first (no
        ``await`` in between: the Turn cannot end meanwhile). Not running any more: dropped here,
        the orchestrator queues it again (it is not in the Turn's ``turnFinished.steered``)."""
        handler, running = self._handler, self._running
        can_steer = getattr(handler, "can_steer", None)
        if (
            running is None
            or running[0] != event.steer_into
            or not callable(can_steer)
            or not can_steer()
        ):
            return
        if self._queued(event) is not None:
            written = (
                bool(handler.input_written(event)) if hasattr(handler, "input_written") else False
            )
            if not self._claim_now(event, written):
                self._steer_skipped.append(event.id)  # started by another process
                return
        handler.steer(event)
        self._steered.append(event)

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _inspect(self, event: AgentEvent) -> None:
        message = await answer_inspect(self._handler, event, agent=self.agent_name)
        with contextlib.suppress(IpcError):
            await self.transport.send(message)

    def cancel(self, event_id: str) -> bool:
        """Cancel the Turn of ``event_id`` (running: its task is cancelled; queued: dropped).

        Returns False when this worker neither runs nor holds that event (already finished)."""
        queued = next((e for e in self._queue if e.id == event_id), None)
        if queued is not None:
            self._queue.remove(queued)
            self.logger.info("event %s cancelled before its turn started", event_id)
            finish = asyncio.ensure_future(self._finish_cancelled(queued))
            self._tasks.add(finish)
            finish.add_done_callback(self._tasks.discard)
            return True
        if self._running is None or self._running[0] != event_id:
            return False
        self.logger.info("cancelling the turn of event %s", event_id)
        self._cancelled.add(event_id)
        turn = self._running[1]
        if turn is not None:
            turn.cancel()
        return True

    async def _finish_cancelled(self, event: AgentEvent) -> None:
        await self._answer(event, None, cancelled_error(), "error")
        await self.report(TurnFinished(event.id, "error", ok=False, cancelled=True))

    async def _answer(
        self,
        event: AgentEvent,
        text: str | None,
        error: JsonObject | None,
        finish: str,
        approvals_pending: Any = None,
    ) -> None:
        """The one way an answer leaves an agent process: after ``event``'s Turn (finished,
        failed, cancelled or parked on approvals) and before its ``turnFinished``, when ``event``
        is a request."""
        if event.reply_to is None:
            return
        answer = response_event(event, agent_name=self.agent_name, instance_key=self.instance_key,
                                text=text, error=error)
        answer.reply_target = event.reply_to.target
        answer.metadata["finishReason"] = finish
        if finish == APPROVAL_PENDING:
            answer.metadata["approvals"] = approvals_pending or []
        await self._flush_stream()  # every streamed event reaches the front-end before the answer
        with contextlib.suppress(IpcError):
            await self.transport.send(
                IpcMessage.event(self.agent_name, event.reply_to.target or ORCHESTRATOR, answer)
            )

    async def _resume_parked(self, event: AgentEvent) -> None:
        """A decision was stored: the instance resumes its parked turn (docs/approvals.md); its
        answer goes to a caller that waits for the final answer (``send --wait``), the others
        were answered when it parked."""
        running = self._running[1] if self._running is not None else None
        if running is not None and getattr(self._handler, "parked", None) is None:
            # decided while the turn that asks is still in its step (a connector that answers
            # at once, on approval.requested): it parks first, and that is the turn resumed
            await asyncio.wait([running])
        parked = getattr(self._handler, "parked", None)
        try:
            result = await self._handler.run(event)
            original = AgentEvent.from_dict(parked.input) if parked is not None else None
            if original is not None and approvals.answers(original, result, True):
                await self._answer(original, result.text, turn_error(result), result.finish_reason)
        except Exception as exc:  # the process stays up; the decision stays stored
            self.logger.error("resuming the parked turn failed: %s", exc)
        finally:
            self._wakeup.set()  # queued inputs may run now

    async def _next_event(self) -> AgentEvent | None:
        while True:
            if self._draining:
                return None
            if self._queue and getattr(self._handler, "parked", None) is None:
                return self._queue.popleft()
            self._wakeup.clear()
            await self._wakeup.wait()

    async def serve(self, handler: TurnHandler) -> int:
        """Run until drained; returns the process exit code (0)."""
        self._handler = handler
        subscribe = getattr(handler, "subscribe", None)
        if callable(subscribe):
            subscribe(self.on_runtime_event, everything=True)  # the orchestrator's sinks get all
        reader = asyncio.ensure_future(self._read_loop())
        # AgentInstance: the journal's open turn
        interrupted = getattr(handler, "interrupted", None)
        resuming: JsonObject | None = None
        if interrupted is not None:
            resumed = AgentEvent.from_dict(interrupted.input)
            self._resuming, resuming = resumed.id, resumed.to_dict()
            self._queue.appendleft(resumed)
        await self.report(Ready(os.getpid(), journal=bool(getattr(handler, "journaled", False)),
                                resuming=resuming))
        if getattr(handler, "parked", None) is not None:  # decisions stored while no process ran
            self._track(asyncio.ensure_future(self._resume_parked(AgentEvent(type=APPROVAL_DECIDED_EVENT))))
        try:
            while (event := await self._next_event()) is not None:
                await self._run_turn(handler, event)
        finally:
            with contextlib.suppress(Exception):
                await handler.close()
        if self._tasks:  # answers of events cancelled before they started
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._shutdown_requested:
            with contextlib.suppress(IpcError):
                await self.transport.send(
                    ShutdownAck(self.instance_key, list(self._queue)).ipc_message(self.agent_name)
                )
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await self.transport.aclose()
        return 0

    async def _claim(self, handler: TurnHandler, event: AgentEvent) -> bool:
        """Reserve the start of a stored input (its :attr:`AgentEvent.start_marker`); True for
        one that was not stored. A reservation left by a process that died is taken over unless
        the handler's ``input_written`` finds the event's input in the conversation
        (docs/orchestrator.md "Durable inputs")."""
        if self._queued(event) is None:
            return True
        check = getattr(handler, "input_written", None)
        written = bool(check(event)) if callable(check) else False
        return await asyncio.to_thread(self._claim_now, event, written)

    def _queued(self, event: AgentEvent) -> tuple[Any, str] | None:
        """(the input queue, input id) its start marker names (goondan.swarm.durable_inputs)."""
        from goondan.swarm.durable_inputs import marker_queue

        return marker_queue(event.start_marker, self.queues)

    def _claim_now(self, event: AgentEvent, written: bool) -> bool:
        """Reserve the start of ``event`` in its input queue (blocking)."""
        from goondan.swarm.durable_inputs import claim_in_queue

        queued = self._queued(event)
        return queued is None or claim_in_queue(queued[0], self.agent_name, self.instance_key,
                                                queued[1], written)

    async def _confirm(self, event: AgentEvent) -> None:
        """The claimed Turn ran (or ended): its start is final, the event is never run again."""
        from goondan.swarm.durable_inputs import confirm_in_queue

        queued = self._queued(event)
        if queued is not None:
            await asyncio.to_thread(confirm_in_queue, queued[0], self.agent_name,
                                    self.instance_key, queued[1])

    async def _run_turn(self, handler: TurnHandler, event: AgentEvent) -> None:
        self._running = (event.id, None)
        if event.id != self._resuming and not await self._claim(handler, event):
            # Already started by another process (one orphaned by a killed orchestrator).
            self.logger.info("event %s already had its turn; not run again", event.id)
            self._running = None
            if event.was_steered and event.reply_to is not None:
                # it joined a Turn whose process died: that Turn's caller is answered, not this one
                await self._answer(
                    event,
                    None,
                    {
                        "code": "E_AGENT_CRASHED",
                        "message": "the turn this input "
                        "joined was interrupted; the input is in the conversation",
                    },
                    "error",
                )
            elif event.reply_to is not None:
                # its Turn finished in a process that died before the answer left it (a pooled
                # or Ray host holds answers a moment before they reach the orchestrator): the
                # caller that still waits gets the answer recorded in the conversation
                recorded = getattr(handler, "recorded_answer", None)
                answer = recorded(event) if callable(recorded) else None
                if answer is not None:
                    await self._answer(event, answer, None, "text_response")
            await self.report(
                TurnFinished(event.id, "error", ok=True, cancelled=False, duplicate=True)
            )
            return
        await self.report(TurnStarted(event.id))
        error: JsonObject | None
        text: str | None = None
        cancelled = False
        streamed = event.stream
        self._turn_event = event.id
        restart: dict[str, Any] = {}
        parked: Any = None  # a parked turn's pending approvals, sent with its answer
        try:
            if event.id in self._cancelled:  # cancelled while turnStarted was being sent
                raise asyncio.CancelledError
            # Model deltas are asked for only for a streamed Turn (``stream`` of ``run``).
            turn = handler.run(event, stream=True) if streamed else handler.run(event)
            task = asyncio.ensure_future(turn)
            self._running = (event.id, task)
            result = await task
            text, error, finish = result.text, turn_error(result), result.finish_reason
            parked = result.metadata.get("approvals") if finish == APPROVAL_PENDING else None
            if result.metadata.get("restartRequested") is True:  # e.g. base tool self-restart
                reason = result.metadata.get("restartReason")
                restart = {
                    "restart_requested": True,
                    "restart_reason": str(reason) if reason is not None else None,
                }
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if event.id not in self._cancelled or (current is not None and current.cancelling()):
                raise  # the worker itself is being stopped (in-process kill)
            cancelled, error, finish = True, cancelled_error(), "error"
        except Exception as exc:  # the handler's own failure; the process stays up
            self.logger.error("turn for event %s failed: %s", event.id, exc)
            finish = "error"
            error = {"code": getattr(exc, "code", "E_AGENT_TURN_FAILED"), "message": str(exc)}
        finally:
            self._running = None
            self._cancelled.discard(event.id)
            self._turn_event = None
        steered, skipped = self._steered, self._steer_skipped
        self._steered, self._steer_skipped = [], []
        for joined in (event, *steered):
            await self._confirm(joined)
        await self._flush_stream()
        self.turns += 1
        for joined in (event, *steered):  # the Turn's answer is the answer of every input it took
            # a park answers with its approvals, unless the caller waits for the final answer
            # (``send --wait``): then the resumed turn answers it (_resume_parked)
            if approvals.answers(joined, _result_of(text, error, finish), False):
                await self._answer(joined, text, error, finish, parked)
        await self.report(
            TurnFinished(
                event.id,
                finish,
                ok=error is None,
                cancelled=cancelled,
                **restart,
                steered=(*(e.id for e in steered), *skipped),
            )
        )


def cancelled_error() -> JsonObject:
    """The structured error of a Turn cancelled through ``runtime.cancel`` (exit 130)."""
    return {"code": TurnCancelled.code, "message": "the turn was cancelled"}


# -- the child process ---------------------------------------------------------------------------

def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse the agent process arguments."""
    return _parser().parse_args(argv)


@functools.cache
def _parser() -> argparse.ArgumentParser:
    # Built once: a Ray host parses the arguments of every instance it opens (docs/scaling.md).
    parser = argparse.ArgumentParser(prog="goondan-agent", add_help=False)
    parser.add_argument("--bundle-dir", required=True)
    parser.add_argument("--agent-name", required=True)
    parser.add_argument("--instance-key", required=True)
    parser.add_argument("--state-root", default=None)
    parser.add_argument("--swarm", default=None)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--log-dir", default=None)
    parser.add_argument("--process-name", default=None)
    parser.add_argument("--max-depth", type=int, default=None)
    # a PostgreSQL URL (docs/storage.md), passed through the spawn pipe, never a command line
    parser.add_argument("--store", default=None)
    # TOKEN:NAME, the orchestrator's lease on that store: every write fenced by it
    parser.add_argument("--store-lease", default=None)
    return parser


HandlerBuilder = Callable[[argparse.Namespace, AgentWorker], Awaitable[TurnHandler]]


def run_child(conn: Connection, argv: list[str], build: HandlerBuilder) -> None:
    """Common child main: logs, signals, the worker loop; exits with its code."""
    from goondan.ipc.logs import configure_process_logging, redirect_output
    from goondan.tools.processes import enter_agent_process, owner_env, sweep

    enter_agent_process()  # the owner markers of every process its tools start
    args = parse_args(argv)
    if args.log_dir:
        redirect_output(Path(args.log_dir), args.process_name or args.agent_name)
    configure_process_logging(agent=args.agent_name, instanceKey=args.instance_key)
    # Ctrl-C in a terminal reaches the whole process group; the orchestrator decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = asyncio.run(_child(conn, args, build))
    sweep(owner_env())  # background jobs kept on purpose, MCP servers not closed (docs/tools.md)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


async def _child(conn: Connection, args: argparse.Namespace, build: HandlerBuilder) -> int:
    transport = PipeTransport(conn)
    worker = AgentWorker(transport, agent_name=args.agent_name, instance_key=args.instance_key)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.request_drain)
    try:
        handler = await build(args, worker)
    except GoondanError as err:
        _log.error("agent %s failed to start: [%s] %s", args.agent_name, err.code, err.message)
        await worker.report(StartError(err.code, err.message))
        await transport.aclose()
        return 3
    return await worker.serve(handler)


async def build_agent_instance(args: argparse.Namespace, worker: AgentWorker, *,
                               bundle: Any | None = None, storage: Any = None) -> TurnHandler:
    """Load the bundle (unless a host that runs many instances passes the one it loaded) and
    open the ``AgentInstance`` wired to the orchestrator; ``storage``: the store a host shares
    between its instances (else the one ``--store`` names, else the JSONL state root)."""
    from goondan.config.cache import load_bundle_cached
    from goondan.runtime.agents import DEFAULT_MAX_DEPTH, AgentsFactory, SwarmCatalog
    from goondan.runtime.instance import AgentInstance
    from goondan.workspace.paths import resolve_state_root, workspace_id_for

    state_root = resolve_state_root(args.state_root)
    if bundle is None:
        # The CLI process has just loaded the same bundle: its cache entry is reused
        # (docs/bundle-cache.md).
        bundle = await asyncio.to_thread(
            load_bundle_cached, Path(args.bundle_dir), state_root=state_root
        )
    assert bundle is not None
    swarm = bundle.swarm_spec(args.swarm)
    spec = bundle.agent_spec(args.agent_name, swarm=swarm.name)
    catalog = SwarmCatalog(swarm.name, swarm.entry_agent, tuple(swarm.agents))
    factory = AgentsFactory(
        worker.router, catalog, agent_name=args.agent_name, instance_key=args.instance_key,
        max_depth=args.max_depth or DEFAULT_MAX_DEPTH, request_timeout_ms=spec.request_timeout_ms,
    )
    lease = getattr(args, "store_lease", None)
    if storage is None and getattr(args, "store", None):  # goondan run --store
        from goondan.storage.backends import open_backend
        from goondan.storage.url import parse_store

        url = args.store
        if lease:  # failover: this process's sessions are named by the lease token
            from goondan.swarm.leadership import lease_application_name, parse_lease_arg

            url = lease_application_name(url, parse_lease_arg(lease)[0])
        storage = await asyncio.to_thread(open_backend, parse_store(url))
    if storage is not None and lease:  # failover (goondan/swarm/leadership.py)
        from goondan.swarm.leadership import fence_instance

        storage = await asyncio.to_thread(
            fence_instance, storage, lease, workspace_id_for(bundle.root, bundle.package_name),
            args.agent_name, args.instance_key)
    if storage is not None:  # None: the JSONL state root
        worker.queues = functools.partial(
            storage.queue, workspace_id_for(bundle.root, bundle.package_name))
    instance = await AgentInstance.open(
        spec,
        storage=storage,
        state_root=state_root,
        workspace_id=workspace_id_for(bundle.root, bundle.package_name),
        instance_key=args.instance_key,
        max_steps_per_turn=getattr(swarm, "max_steps_per_turn", None),
        workdir=Path(args.workdir) if args.workdir else None,
        agents_factory=factory,  # no on_outgoing: the worker answers (AgentWorker._answer)
        stream=False,
    )
    return instance


def process_main(conn: Connection, argv: list[str]) -> None:
    """Entry of a real agent process (``ProcessSpawner``'s default target)."""
    run_child(conn, argv, build_agent_instance)


def _result_of(text: str | None, error: JsonObject | None, finish: str) -> TurnResult:
    """The worker's view of a Turn's end as a :class:`TurnResult` (for ``approvals.answers``)."""
    return TurnResult("", cast(Any, finish), error=error)
