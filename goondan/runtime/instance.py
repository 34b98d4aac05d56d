"""``AgentInstance``: one (agent, instanceKey) — a FIFO of events, one turn at a time.

The instance is transport-agnostic: it consumes :class:`AgentEvent`s and produces
:class:`TurnResult`s (plus, for requests from other agents, a response event handed to
``on_outgoing``), so the same object runs inside the embedding API, ``goondan repl`` and an
orchestrator's agent process.

Per turn (docs/runtime.md "Errors and cancellation", "Persistence", "Tracing"):

* status ``processing``; a ``turnId``; the event's ``traceId`` (or a new one) and a turn span;
* every MessageEvent emitted by the core or by middleware goes to the in-memory
  :class:`ConversationState` *and* durably to ``events.jsonl`` (tagged with the turn id);
* after the whole turn chain returned: tool pairs repaired if the turn failed, fold-commit
  into ``base.jsonl``, dirty extension state saved, status ``idle``, ``turn.completed`` or
  ``turn.failed`` emitted;
* an exception ends the turn with ``finishReason: error`` and a structured error; the instance
  stays usable. Cancellation (Ctrl-C) aborts the model request, repairs, commits what was
  emitted and re-raises :class:`asyncio.CancelledError`;
* the turn journal (``turn.jsonl``, :mod:`goondan.runtime.resume`) holds ``turn.started`` from
  before the first message event until the answer is committed and handed to ``on_outgoing``.
  An instance that opens with a turn still open resumes it (:meth:`AgentInstance.resume`, and
  before any other event) unless opened with ``resume_interrupted=False``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from goondan.conversation.messages import MessageEvent
from goondan.conversation.repair import repair_tool_pairs
from goondan.conversation.state import ConversationState
from goondan.errors import AgentError, GoondanError
from goondan.llm.base import LanguageModel, ModelSpec
from goondan.pipeline.context import TurnResult
from goondan.pipeline.tracing import Span, start_span
from goondan.runtime import approvals
from goondan.runtime.agents import turn_answer
from goondan.runtime.eventlog import RuntimeEventLog, max_bytes_from_env
from goondan.runtime.failed_turns import failed_turn_events
from goondan.runtime.inputs import (
    UnavailableAgents,
    connector_input_written,
    default_model_factory,
    model_spec_for,
    recorded_answer,
)
from goondan.runtime.ledger import cost_of
from goondan.runtime.observe import EventListener, RuntimeObserver, TracedAgentCalls
from goondan.runtime.outcomes import CANCELLED_ERROR, TurnOutcome, turn_started
from goondan.runtime.resume import (
    ResumePoint,
    TurnRecorder,
    interrupted_error,
    plan_resume,
    resume_mode,
)
from goondan.runtime.span_store import StoreSpanLog, span_log_for
from goondan.runtime.turn import TurnEnv, TurnRunner, error_dict
from goondan.types import AgentEvent, TokenUsage, ToolCatalogItem, new_id, new_trace_id
from goondan.workspace.approvals import ApprovalStore

if TYPE_CHECKING:
    from goondan.config import AgentSpec
    from goondan.extensions.loader import ExtensionSet
    from goondan.pipeline.events import EventBus
    from goondan.pipeline.registry import PipelineRegistry
    from goondan.storage.contract import InstanceStorage, StorageBackend
    from goondan.tools.executor import ToolExecutor
    from goondan.tools.registry import ToolRegistry
    from goondan.workspace.journal import OpenTurn
    from goondan.workspace.store import ConversationStore

__all__ = [
    "PROCESSING_STATUS_DELAY_S",
    "AgentInstance",
    "AgentsApiFactory",
    "InstanceStatus",
    "ModelFactory",
    "OutgoingHandler",
]

# A turn still running after this long records "processing" in the status file; quicker turns
# write only their "idle" (docs/runtime.md "Performance").
PROCESSING_STATUS_DELAY_S = 0.1

InstanceStatus = Literal["idle", "processing", "draining", "closed"]
ModelFactory = Callable[[ModelSpec], LanguageModel]
OutgoingHandler = Callable[[AgentEvent], Awaitable[None]]
_log = logging.getLogger("goondan.runtime")


class AgentsApiFactory(Protocol):
    """Builds ``ctx.agents`` / ``ToolContext.runtime`` for one turn (the ``agents_factory`` hook).

    :class:`goondan.runtime.agents.AgentsFactory` implements it for the embedding API and for
    agent processes (docs/runtime.md "Agent-to-agent hooks").
    """

    def __call__(
        self, input_event: AgentEvent, *, turn_id: str, trace_id: str, span_id: str
    ) -> Any: ...


def _parent_span(event: AgentEvent) -> str | None:
    return event.parent_span_id


class AgentInstance:
    """One conversation of one agent: FIFO queue, one turn at a time, durable history."""

    def __init__(
        self,
        spec: AgentSpec,
        *,
        instance_key: str,
        store: ConversationStore,
        model: LanguageModel,
        pipeline: PipelineRegistry,
        tools: ToolRegistry,
        executor: ToolExecutor,
        bus: EventBus | None = None,
        extensions: ExtensionSet | None = None,
        state: ConversationState | None = None,
        max_steps_per_turn: int | None = None,
        workdir: Path | None = None,
        agents_factory: AgentsApiFactory | None = None,
        on_outgoing: OutgoingHandler | None = None,
        stream: bool = True,
        logger: logging.Logger | None = None,
        interrupted: OpenTurn | None = None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.instance_key = instance_key
        self.store = store
        self.model = model
        self.pipeline = pipeline
        self.tools = tools
        self.bus = bus
        self.extensions = extensions
        self.state = state if state is not None else ConversationState(())
        self.agents_factory = agents_factory
        self.on_outgoing = on_outgoing
        self.logger = logger or _log
        self.observer = RuntimeObserver(spec.name, instance_key, bus=bus, logger=self.logger)
        self.env = TurnEnv(
            spec=spec,
            instance_key=instance_key,
            model=model,
            pipeline=pipeline,
            tools=tools,
            executor=executor,
            observer=self.observer,
            max_steps_per_turn=max_steps_per_turn or getattr(spec, "max_steps_per_turn", 32) or 32,
            workdir=Path(workdir or getattr(spec, "workdir", None) or Path.cwd()),
            logger=self.logger,
        )
        self.stream = stream
        self.status: InstanceStatus = "idle"
        self.usage = TokenUsage()
        self.turn_count = 0
        self._lock = asyncio.Lock()
        self._parked_changed = asyncio.Event()  # docs/approvals.md
        self._rest_status: Any = "idle"  # what a committed turn leaves: idle, waitingForApproval
        self._accepting = True
        self._status_write: asyncio.Future[None] | None = None
        self._status_timer: asyncio.TimerHandle | None = None
        self._runner: TurnRunner | None = None  # the running turn (steer() hands it input)
        self.parked: OpenTurn | None = None  # the turn parked on approvals: no new turn starts
        # runtime-events.jsonl (docs/observability.md); attached by open().
        self.event_log: RuntimeEventLog | None = None
        self.span_log: StoreSpanLog | None = None  # the store's span table, when it has one
        # The turn journal (absent from stores without one) and the turn left open in it, which
        # resume() — or the next run() — finishes first (docs/conversations.md "Durability").
        self.recorder = TurnRecorder(getattr(store, "journal", None), spec.name, instance_key)
        self.interrupted = interrupted
        self.resumed: TurnResult | None = None  # the result of that turn, once resumed

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        spec: AgentSpec,
        *,
        state_root: Path,
        workspace_id: str,
        instance_key: str,
        model: LanguageModel | None = None,
        model_factory: ModelFactory | None = None,
        env: Mapping[str, str] | None = None,
        max_steps_per_turn: int | None = None,
        workdir: Path | None = None,
        agents_factory: AgentsApiFactory | None = None,
        on_outgoing: OutgoingHandler | None = None,
        stream: bool = True,
        logger: logging.Logger | None = None,
        resume_interrupted: bool = True,
        storage: StorageBackend | None = None,
    ) -> AgentInstance:
        """Open (or create) the instance's storage, recover it, load tools and extensions.

        A turn left open by a process that died is resumed by :meth:`resume` (and before any
        other event); ``resume_interrupted=False`` closes it with ``E_TURN_INTERRUPTED`` tool
        results instead, without answering it. ``storage``: the backend holding the instance
        (docs/storage.md); None is the JSONL state root ``state_root``."""
        from goondan.extensions import load_extensions
        from goondan.pipeline.events import EventBus
        from goondan.pipeline.registry import PipelineRegistry
        from goondan.tools.executor import ToolExecutor
        from goondan.tools.output import ToolSettings
        from goondan.tools.registry import ToolRegistry
        from goondan.workspace import InstanceStore

        log = logger or _log
        store: InstanceStorage
        if storage is None:
            store = await asyncio.to_thread(
                InstanceStore.open, state_root, workspace_id, spec.name, instance_key
            )
        else:
            store = await asyncio.to_thread(
                storage.open_instance, workspace_id, spec.name, instance_key
            )
        pipeline = PipelineRegistry()
        tools = ToolRegistry()
        try:
            interrupted = await asyncio.to_thread(store.journal.open_turn)
            mode = resume_mode(interrupted, resume_interrupted=resume_interrupted)
            state = await asyncio.to_thread(
                store.load, keep_open_calls=mode in ("resume", "parked")
            )
            if mode == "drop":
                assert interrupted is not None
                await asyncio.to_thread(
                    TurnRecorder(store.journal, spec.name, instance_key).turn_ended,
                    interrupted.turn_id,
                    "error",
                )
                interrupted = None
            for diagnostic in store.recovery_diagnostics:
                log.warning("%s: %s", diagnostic.code, diagnostic.message)
            bus = EventBus(logger=log)
            await asyncio.to_thread(tools.load_bindings, list(spec.tools))
            if spec.mcp_servers:
                from goondan.mcp import McpToolProvider

                # Lazy: each server starts when the first step builds its catalog (docs/mcp.md).
                for server in spec.mcp_servers:
                    await tools.add_provider(McpToolProvider(server, env=env, logger=log))
            for remote in spec.a2a_agents:  # lazy too: the card is read at the first catalog
                from goondan.a2a.provider import A2aToolProvider

                await tools.add_provider(A2aToolProvider(remote, env=env, logger=log))
            extensions = await load_extensions(
                list(spec.extensions),
                pipeline=pipeline,
                tools=tools,
                bus=bus,
                state_store=store,
                logger=log,
                agent_name=spec.name,
                instance_key=instance_key,
            )
            if model is None:
                model_spec = model_spec_for(spec.model, os.environ if env is None else env)
                model = (model_factory or default_model_factory(spec))(model_spec)
        except BaseException:
            try:
                await tools.aclose()
            finally:
                await asyncio.to_thread(store.close)
            raise
        instance = cls(
            spec,
            instance_key=instance_key,
            store=store,
            model=model,
            pipeline=pipeline,
            tools=tools,
            executor=ToolExecutor(tools, settings=ToolSettings.from_spec(spec)),
            bus=bus,
            extensions=extensions,
            state=state,
            max_steps_per_turn=max_steps_per_turn,
            workdir=workdir,
            agents_factory=agents_factory,
            on_outgoing=on_outgoing,
            stream=stream,
            logger=log,
            interrupted=interrupted if mode in ("resume", "guard") else None,
        )
        instance.env.approvals = approvals.ApprovalGate.of(
            spec, store, ApprovalStore(state_root, workspace_id) if storage is None
            else storage.approvals(workspace_id))
        instance.parked = interrupted if mode == "parked" else None
        max_bytes = max_bytes_from_env(os.environ if env is None else env)
        if max_bytes and isinstance(store, InstanceStore):  # runtime-events.jsonl: JSONL only
            instance.event_log = RuntimeEventLog(store.paths.dir, max_bytes=max_bytes)
            instance.observer.add_sink(instance.event_log)
        elif max_bytes:  # a store that keeps spans itself (PostgreSQL's goondan_spans)
            instance.span_log = span_log_for(storage, workspace_id)
            if instance.span_log is not None:
                instance.observer.add_sink(instance.span_log)
        return instance

    @property
    def journaled(self) -> bool:
        """True when turns are journaled: one cut short by a crash resumes at the next open."""
        return self.recorder.journal is not None

    @property
    def cost(self) -> float | None:
        """US dollars of this instance's turns so far (``None`` without the Model's
        ``spec.pricing``).

        Cost is linear in tokens, so the cost of the summed usage is the exact sum of the turns'."""
        return cost_of(self.usage, self.env.pricing)

    # -- public API --------------------------------------------------------------------------------
    def subscribe(self, listener: EventListener, *, everything: bool = False) -> Callable[[], None]:
        """Receive every runtime event payload (including ``llm.delta``); returns unsubscribe.

        ``everything`` adds the events outside the documented stream (``llm.*``, ``agent.*``)."""
        return self.observer.subscribe(listener, everything=everything)

    @property
    def messages(self) -> list[Any]:
        """The conversation as it stands (``next_messages``)."""
        return list(self.state.next_messages)

    def catalog(self) -> list[ToolCatalogItem]:
        """The tool catalog a step would start from (config tools, then extension tools)."""
        return self.env.catalog()

    def input_written(self, event: AgentEvent) -> bool:
        """True when the conversation holds the input of ``event`` (a connector event or a stored
        input, :func:`~goondan.runtime.inputs.input_tag`): a Turn for it started (in an earlier
        process that died) — the claim check of an agent process."""
        return connector_input_written(self.state.next_messages, event)

    def recorded_answer(self, event: AgentEvent) -> str | None:
        """The answer of ``event``'s finished Turn, from the conversation (None: not there) —
        for a redelivered event whose answer was lost with the process that ran it."""
        return recorded_answer(self.state.next_messages, event)

    def steer(self, event: AgentEvent) -> bool:
        """Hand ``event`` to the running turn: it joins that turn's conversation before the
        next model request (goondan.runtime.steering) and the turn's answer is its answer. False
        when no turn runs or it is past taking input: run ``event`` as its own turn instead."""
        return self._runner is not None and self._runner.steering.put(event)

    def can_steer(self) -> bool:
        """True while :meth:`steer` would take an event (a turn runs and takes input)."""
        return self._runner is not None and self._runner.steering.open

    def submit(self, event: AgentEvent | str) -> asyncio.Task[TurnResult]:
        """Queue ``event`` (FIFO) and return the task that resolves to its TurnResult."""
        self._check_accepting()
        return asyncio.ensure_future(self.run(event))

    async def run(self, event: AgentEvent | str, *, stream: bool | None = None) -> TurnResult:
        """Run one turn for ``event`` after every earlier event; cancelling aborts the turn.

        ``stream`` (default: the instance's ``stream`` setting) asks the model for incremental
        output, published as ``llm.delta`` events."""
        self._check_accepting()
        if isinstance(event, str):
            event = AgentEvent(type="message", input=event, instance_key=self.instance_key)
        stream = self.stream if stream is None else stream
        if event.type == approvals.APPROVAL_DECIDED_EVENT:  # a decision: the parked turn goes on
            async with self._lock:
                return await self._resume_parked(stream=stream)
        while True:
            if self.parked is not None:  # new input waits until the parked turn ends
                await self._parked_changed.wait()
            async with self._lock:
                self._check_accepting()
                resumed = await self._resume_locked()
                if resumed is not None and resumed[0].id == event.id:
                    return resumed[1]  # this event's turn was the interrupted one
                if self.parked is None:
                    return await self._execute(event, stream=stream)
                self._parked_changed.clear()

    async def resume(self) -> TurnResult | None:
        """Finish the turn a dead process left open (None when there is none).

        Same ``turnId`` and input event, so its answer reaches the original ``replyTo``
        through ``on_outgoing``; see :mod:`goondan.runtime.resume` for what each tool call of
        the interrupted step gets. After three crash resumes the turn ends with
        ``E_TURN_INTERRUPTED`` instead (the crash-loop guard). A turn parked on approvals goes on
        when a decision was stored meanwhile (docs/approvals.md)."""
        async with self._lock:
            await self._resume_locked()
            if self.parked is not None:
                self.resumed = await self._resume_parked(stream=self.stream)
            return self.resumed

    async def _resume_locked(self) -> tuple[AgentEvent, TurnResult] | None:
        turn, self.interrupted = self.interrupted, None
        if turn is None:
            return None
        if resume_mode(turn, resume_interrupted=True) == "guard":
            event = AgentEvent.from_dict(turn.input)
            result = TurnResult(turn.turn_id, "error", error=interrupted_error(turn))
            self.logger.warning("[E_TURN_INTERRUPTED] turn %s was interrupted %d times; it is not "
                                "resumed again", turn.turn_id, turn.crash_resumes + 1)
            await self._answer(event, result, event.trace_id or new_trace_id())
            self.recorder.turn_ended(turn.turn_id, "error")
            self.resumed = result
            return event, result
        point = plan_resume(self.state.next_messages, turn)
        self.recorder.turn_resumed(turn.turn_id, turn.resumes + 1)
        self.logger.info(
            "resuming turn %s (interrupted %d time(s))", turn.turn_id, turn.crash_resumes + 1
        )
        self.resumed = await self._execute(point.event, stream=self.stream, resume=point)
        return point.event, self.resumed

    async def apply_message_events(self, events: list[MessageEvent]) -> None:
        """Record message events outside any turn (``/clear``), durably, then fold-commit."""
        async with self._lock:
            self._check_accepting()
            await self._resume_locked()  # an edit never lands in the middle of a turn
            turn_id = new_id("edit")
            for event in events:
                self._emit(turn_id, event)
            await self._commit()

    async def fold(self) -> int:
        """Fold pending events into ``base.jsonl`` now; returns the message count."""
        async with self._lock:
            await self._commit()
            return len(self.state.next_messages)

    async def drain(self) -> None:
        """Stop taking events and wait for the running turn (including its fold) to finish."""
        if self._accepting:
            self._accepting = False
            self._parked_changed.set()  # inputs waiting on a parked turn fail with E_AGENT_DRAINING
            if self.status == "idle":
                self.status = "draining"
        async with self._lock:
            pass

    async def close(self) -> None:
        """Drain, then release the model, the extension state and the instance lock."""
        if self.status == "closed":
            return
        await self.drain()
        self.status = "closed"
        try:
            if self.bus is not None:
                await self.bus.drain()
            await self._flush_extension_state_or_warn(closing=True)
            await self.model.aclose()
        finally:
            try:
                await self.tools.aclose()
            finally:
                if self.event_log is not None:
                    await asyncio.to_thread(self.event_log.close)
                if self.span_log is not None:
                    await asyncio.to_thread(self.span_log.close)
                await asyncio.to_thread(self.store.close)

    async def __aenter__(self) -> AgentInstance:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"AgentInstance(agent={self.name!r}, instance_key={self.instance_key!r}, "
            f"status={self.status!r}, messages={len(self.state)})"
        )

    # -- one turn ----------------------------------------------------------------------------------
    def _check_accepting(self) -> None:
        if not self._accepting:
            raise AgentError(
                f"agent instance {self.name}:{self.instance_key} is shutting down",
                code="E_AGENT_DRAINING",
                suggestion="Send the event again after the agent has restarted.",
            )

    def _emit(self, turn_id: str, event: MessageEvent) -> None:
        diagnostic = self.state.emit(event)
        if diagnostic is not None:
            self.logger.warning("%s: %s", diagnostic.code, diagnostic.message)
        # Durable before the turn goes on: a crash after this line keeps the event.
        self.store.append_event(event, turn_id)

    def _agents_for(self, event: AgentEvent, turn_id: str, span: Span) -> Any:
        if self.agents_factory is None:
            return UnavailableAgents()
        api = self.agents_factory(
            event, turn_id=turn_id, trace_id=span.trace_id, span_id=span.span_id
        )
        # agent.* events reach typed sinks only; without one the API is used as it is.
        return TracedAgentCalls(api, self.observer.emit, span) if self.observer.traced else api

    async def _resume_parked(self, *, stream: bool) -> TurnResult:
        """Resume the parked turn once a decision is stored (docs/approvals.md)."""
        self.parked, point = await approvals.resumable(self.env.approvals, self.store,
                                                       self.state.next_messages, self.recorder)
        if not isinstance(point, ResumePoint):
            return point
        return await self._execute(point.event, stream=stream, resume=point, after_park=True)

    async def _execute(self, event: AgentEvent, *, stream: bool,
                       resume: ResumePoint | None = None, after_park: bool = False) -> TurnResult:
        turn_id = resume.turn.turn_id if resume is not None else new_id("turn")
        span = start_span(
            "turn", "turn", trace_id=event.trace_id or None, parent_span_id=_parent_span(event)
        )
        self.status = "processing"
        # The status file is advisory (docs/runtime.md "Performance"): "processing" is recorded
        # only once the turn has run for PROCESSING_STATUS_DELAY_S, so a quick turn writes the
        # status once (the "idle" of its commit, which refreshes updatedAt). A longer turn's write
        # overlaps its model request and is awaited before the commit.
        self._status_timer = asyncio.get_running_loop().call_later(
            PROCESSING_STATUS_DELAY_S, self._record_processing
        )
        self.observer.emit(turn_started(turn_id, event, span))
        agents = self._agents_for(event, turn_id, span)
        runner = TurnRunner(
            self.env,
            self.state,
            lambda ev: self._emit(turn_id, ev),
            event,
            turn_id=turn_id,
            span=span,
            agents=agents,
            tool_runtime=agents if self.agents_factory is not None else None,
            recorder=self.recorder,
            resume=resume,
        )
        self._runner = runner
        if self.env.approvals is not None:  # this turn's approvals only
            self.env.approvals.reset()
        try:
            result = await runner.run(stream=stream)
        except asyncio.CancelledError:
            # Ctrl-C / shutdown: keep what was emitted, make it provider-valid, fold, re-raise.
            cancelled = TurnResult(turn_id, "error", error=dict(CANCELLED_ERROR))
            self._runner = None
            await self._finalize(runner.outcome(cancelled, cancelled=True))
            self.recorder.turn_ended(turn_id, "error")
            raise
        except Exception as exc:
            result = TurnResult(turn_id, "error", error=error_dict(exc))
            self.logger.debug("turn %s failed", turn_id, exc_info=exc)
        self._runner = None
        await self._finalize(runner.outcome(result))
        # The turn stays open in the journal until its answer is handed over: a crash before
        # this point resumes it, and a resumed turn whose answer is written just sends it.
        if approvals.answers(event, result, after_park):
            await self._answer(event, result, span.trace_id)
        # a parked turn stays open (turn.parked)
        if result.finish_reason != approvals.APPROVAL_PENDING:
            self.recorder.turn_ended(turn_id, result.finish_reason)
        return result

    async def _answer(self, event: AgentEvent, result: TurnResult, trace_id: str) -> None:
        if event.reply_to is not None and self.on_outgoing is not None:
            await self.on_outgoing(
                turn_answer(
                    event, result, trace_id, agent_name=self.name, instance_key=self.instance_key
                )
            )

    async def _finalize(self, outcome: TurnOutcome) -> None:
        """End a turn from its outcome: repair, fold-commit, go idle, report ``turn.*``.

        The commit runs in a worker thread; a second Ctrl-C must not leave it half done, so it
        is shielded and awaited to its end before the cancellation goes on.
        """
        if outcome.result.finish_reason == "error":
            self._record_failed_turn(outcome.turn_id, outcome.result)
        if outcome.needs_repair:
            self._repair(outcome.turn_id)
        outcome.result.metadata.update(outcome.metadata())
        parks = outcome.result.finish_reason == approvals.APPROVAL_PENDING
        self._rest_status = approvals.WAITING_STATUS if parks else "idle"
        try:
            work = asyncio.ensure_future(self._commit())
            try:
                await asyncio.shield(work)
            except asyncio.CancelledError:
                await work
                raise
            finally:
                self.status = "idle" if self._accepting else "draining"
            # a worker-thread hop only for a turn that parks (the rest: no I/O, no hop)
            self.parked = None if not parks else await asyncio.to_thread(
                approvals.park, self.env.approvals, self.store, outcome.turn_id, parks)
            self._parked_changed.set()  # set when a turn parks or ends: waiting input looks again
            if not outcome.cancelled and self.bus is not None:
                await self.bus.drain()
        finally:
            # Exactly one turn.completed / turn.failed per turn.started, even if a second
            # cancellation or a storage error cut the commit short.
            self.usage = self.usage + outcome.usage
            if not outcome.cancelled:
                self.turn_count += 1
            ended = outcome.ended()
            ended.cost = cost_of(outcome.usage, self.env.pricing)
            self.observer.emit(ended)

    async def _commit(self) -> None:
        """Fold the pending events into the store, record ``idle``, save extension state."""
        if self._status_timer is not None:
            self._status_timer.cancel()
            self._status_timer = None
        pending, self._status_write = self._status_write, None
        if pending is not None:
            try:
                await pending
            except Exception as exc:  # advisory only; the conversation itself is what matters
                self.logger.warning("could not record the instance status: %s", exc)
        self.state = await asyncio.to_thread(self._commit_and_idle)
        await self._flush_extension_state_or_warn()

    def _record_processing(self) -> None:
        self._status_timer = None
        self._status_write = asyncio.ensure_future(
            asyncio.to_thread(self.store.set_status, "processing")
        )

    async def _flush_extension_state_or_warn(self, *, closing: bool = False) -> None:
        try:
            await self._flush_extension_state()
        except GoondanError as exc:
            # The conversation is committed; failed states stay dirty and are retried at the
            # next turn end (and at close), so the turn's result is delivered and the process
            # exits 0: a warning, not an error (docs/extensions.md, "State").
            then = (
                "this last change of the state is lost"
                if closing
                else "the state is retried at the next turn end"
            )
            self.logger.warning(
                "[%s] %s; the conversation is saved, %s", exc.code, exc.message, then
            )

    def _commit_and_idle(self) -> ConversationState:
        # One worker-thread hop instead of two: the status is advisory, so recording "idle"
        # before the extension states are flushed changes nothing a reader could rely on.
        committed = self.store.commit(self.state)
        self.store.set_status(self._rest_status)
        return committed

    async def _flush_extension_state(self) -> None:
        flush = getattr(self.extensions, "flush_state", None)
        if flush is not None:
            outcome = flush()
            if asyncio.iscoroutine(outcome):
                await outcome

    def _record_failed_turn(self, turn_id: str, result: TurnResult) -> None:
        # docs/conversations.md "When a turn fails": the input is kept once (marked), or the
        # whole turn is dropped when it did not fit the context window.
        code = str((result.error or {}).get("code") or "")
        for event in failed_turn_events(self.state.next_messages, self.state.events, code):
            self._emit(turn_id, event)

    def _repair(self, turn_id: str) -> None:
        # A repair in mid-history is "remove, re-append moved messages, append results": it is
        # logged in ONE write so a kill cannot keep the removes and lose the re-appends.
        repairs = repair_tool_pairs(self.state.next_messages)
        if not repairs:
            return
        for repair in repairs:
            diagnostic = self.state.emit(repair)
            if diagnostic is not None:
                self.logger.warning("%s: %s", diagnostic.code, diagnostic.message)
        self.store.append_events(repairs, turn_id)


