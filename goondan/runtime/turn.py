"""One turn: user message → turn chain → step loop → step chain → LLM call → tool-call chains.

The loop (docs/runtime.md "The turn loop"):

1. the input event's text is appended as a user message *before* the turn chain, so turn
   middleware sees it in ``conversation_state.events``;
2. the turn chain wraps the step loop; each step gets a fresh catalog (config tools, then
   extension tools) that step middleware may edit before ``next()``;
3. the core step makes exactly one model call (system prompt, ``to_llm_messages()``, the
   step's catalog, the Agent's params), appends the assistant message (always, with
   ``source: {type: assistant, stepId}``), then runs every tool call through the toolCall chain
   (in model order, or concurrently with ``parallelToolCalls``) and appends one ``role: tool``
   message per result, in call order;
4. the loop repeats while the model calls tools, up to ``maxStepsPerTurn`` (``max_steps``);
   a text answer while ``requiredTools`` are unmet appends a reminder and counts as a step.

Each step's chain result is classified once (:func:`goondan.runtime.outcomes.classify_step`)
and the loop branches on the outcome type. :class:`TurnRunner` raises on failure;
:class:`goondan.runtime.instance.AgentInstance` sums the turn up as a
:class:`~goondan.runtime.outcomes.TurnOutcome` (``finishReason: error`` for an exception) and
finalises it: repair, fold-commit, events.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.conversation.messages import Message, MessageEvent, MessageSource
from goondan.errors import BudgetExceededError, GoondanError, LlmBadResponseError, help_url
from goondan.llm.base import LanguageModel, ModelRequest, ModelResponse, StreamDelta
from goondan.pipeline.chain import middleware_failure
from goondan.pipeline.context import (
    MiddlewareAgentsApi,
    Step,
    StepContext,
    StepResult,
    ToolCallContext,
    Turn,
    TurnContext,
    TurnResult,
)
from goondan.pipeline.tracing import CURRENT_SPAN, Span, elapsed_ms
from goondan.runtime.approvals import park_call, parked_turn
from goondan.runtime.budget import TRACE_COST_KEY
from goondan.runtime.events import (
    LlmCallEnded,
    LlmCallStarted,
    LlmDelta,
    StepEnded,
    StepStarted,
    ToolCalled,
    ToolEnded,
    span_ids,
)
from goondan.runtime.ledger import Budget, Pricing, cost_of
from goondan.runtime.observe import RuntimeObserver
from goondan.runtime.outcomes import (
    StepFailed,
    StepOutcome,
    ToolsRan,
    TurnOutcome,
    classify_step,
    first_error,
    settle_result,
    usage_delta,
)
from goondan.runtime.resume import ResumePoint, TurnRecorder, finish_interrupted_step, turn_input
from goondan.runtime.steering import SteerQueue
from goondan.tools.context import ToolContext
from goondan.types import (
    AgentEvent,
    JsonObject,
    TokenUsage,
    ToolCall,
    ToolCallResult,
    ToolCatalogItem,
    new_id,
    new_span_id,
)

if TYPE_CHECKING:
    from goondan.config import AgentSpec
    from goondan.conversation.state import ConversationState
    from goondan.pipeline.registry import PipelineRegistry
    from goondan.runtime.approvals import ApprovalGate
    from goondan.tools.executor import ToolExecutor
    from goondan.tools.registry import ToolRegistry

__all__ = ["TurnEnv", "TurnRunner", "error_dict"]

MAX_STEPS_FALLBACK = "I stopped because this turn reached its limit of {limit} steps."
REQUIRED_TOOLS_NOTE = "(The required tools were not called: {tools}.)"
REQUIRED_TOOLS_REMINDER = (
    "Before answering you must call at least one of these tools: {tools}. Call one now."
)
# Sent (never stored) with the one re-ask that follows an empty reply (docs/models.md).
EMPTY_REPLY_NUDGE = (
    "Your previous reply was empty. Answer the user's last message, or call one of the tools."
)
# A tool output with one of these set to true asks for a restart of this agent after the turn
# (the reference's runtime restart signal; base tool `self-restart`, docs/base-package.md).
RESTART_FLAGS = ("restartRequested", "runtimeRestart", "__goondanRestart")


def error_dict(exc: BaseException) -> JsonObject:
    """The structured ``TurnResult.error`` of an exception:
    ``{code, message, suggestion?, helpUrl}``."""
    if isinstance(exc, GoondanError):
        out: JsonObject = {"code": exc.code, "message": exc.message}
        if exc.suggestion:
            out["suggestion"] = exc.suggestion
        out["helpUrl"] = exc.help_url or help_url(exc.code)
        return out
    blamed = middleware_failure(exc)  # raised by an extension's middleware: name it
    if blamed is not None:
        return error_dict(blamed)
    return error_dict(GoondanError(f"{type(exc).__name__}: {exc}", code="E_TURN_FAILED"))


@dataclass
class TurnEnv:
    """Everything of one agent instance a turn needs; shared by all its turns."""

    spec: AgentSpec
    instance_key: str
    model: LanguageModel
    pipeline: PipelineRegistry
    tools: ToolRegistry
    executor: ToolExecutor
    observer: RuntimeObserver
    max_steps_per_turn: int
    workdir: Path
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("goondan.runtime"))
    approvals: ApprovalGate | None = None  # docs/approvals.md; None: no call ever waits

    @functools.cached_property
    def pricing(self) -> Pricing | None:
        """The Model's ``spec.pricing`` (``None``: costs are not computed)."""
        return Pricing.from_dict(getattr(getattr(self.spec, "model", None), "pricing", None))

    @functools.cached_property
    def budget(self) -> Budget:
        """The agent's budget (Swarm ``policy.budget`` merged with Agent ``spec.budget``)."""
        return Budget.from_dicts(getattr(self.spec, "budget", None))

    def catalog(self) -> list[ToolCatalogItem]:
        """A step's starting catalog as it stands: config tools then the others (fresh copies)."""
        return self.tools.catalog(self.spec.tools)

    async def step_catalog(self, turn_id: str | None = None) -> list[ToolCatalogItem]:
        """This step's starting catalog, after picking up tool providers' changes."""
        return await self.tools.step_catalog(self.spec.tools, turn_id=turn_id)


class TurnRunner:
    """Runs one turn against a conversation; counts steps, tool calls, errors and tokens."""

    def __init__(
        self,
        env: TurnEnv,
        state: ConversationState,
        emit: Callable[[MessageEvent], None],
        event: AgentEvent,
        *,
        turn_id: str,
        span: Span,
        agents: MiddlewareAgentsApi,
        tool_runtime: Any = None,
        recorder: TurnRecorder | None = None,
        resume: ResumePoint | None = None,
    ) -> None:
        self.env = env
        # The turn journal (docs/conversations.md "Durability"), and where a resumed turn goes on.
        self.recorder = recorder or TurnRecorder(None, env.spec.name, env.instance_key)
        self.resume = resume
        self.state = state
        self.emit = emit
        self.event = event
        self.span = span
        self.agents = agents
        self.tool_runtime = tool_runtime
        self.turn = Turn(
            id=turn_id, agent_name=env.spec.name, input_event=event, trace_id=span.trace_id
        )
        self.usage = TokenUsage()
        self.tool_call_count = 0
        self.error_count = 0
        self.last_assistant: Message | None = None
        # True once a step raised: tool calls may be left without results even if a turn
        # middleware caught the exception and returned a normal result.
        self.interrupted = False
        self._current_step: Step | None = None
        self._step_span: Span | None = None
        self._stream = True
        self.restart_reason: str | None = None  # set when a tool output asked for a restart
        self.steering = SteerQueue()  # input that joins this turn (inputPolicy: steer)

    @property
    def turn_id(self) -> str:
        return self.turn.id

    def outcome(self, result: TurnResult, *, cancelled: bool = False) -> TurnOutcome:
        """This turn summed up for finalisation (a cancellation counts as one more error)."""
        return TurnOutcome(
            result,
            span=self.span,
            input_event=self.event,
            step_count=len(self.turn.steps),
            tool_call_count=self.tool_call_count,
            error_count=self.error_count + (1 if cancelled else 0),
            usage=self.usage,
            cancelled=cancelled,
            interrupted=self.interrupted,
        )

    # -- turn ------------------------------------------------------------------------------------
    async def run(self, *, stream: bool = True) -> TurnResult:
        """Append the input as a user message, then run the turn chain around the step loop.

        ``stream`` asks the model for incremental output (``llm.delta`` events)."""
        self._stream = stream
        # One append, or a failed turn's input reused (docs/conversations.md "When a turn fails").
        events, input_id = turn_input(self.state.next_messages, self.event, self.resume)
        if self.resume is None:
            self.recorder.turn_started(self.turn_id, self.event, input_id)
        for event in events:
            self.emit(event)
        ctx = TurnContext(
            agent_name=self.env.spec.name,
            instance_key=self.env.instance_key,
            turn_id=self.turn_id,
            trace_id=self.span.trace_id,
            input_event=self.event,
            conversation_state=self.state,
            agents=self.agents,
            emit_message_event=self.emit,
            span_id=self.span.span_id,
            parent_span_id=self.span.parent_span_id,
        )
        try:
            result = await self.env.pipeline.run_turn(ctx, self._turn_core)
        finally:
            self.steering.close(self.emit)  # what it took and did not show the model: recorded
        self.turn.status = "failed" if result.finish_reason == "error" else "completed"
        if self.restart_reason is not None:
            result.metadata["restartRequested"] = True
            result.metadata["restartReason"] = self.restart_reason
        return result

    async def _turn_core(self, ctx: TurnContext) -> TurnResult:
        required = list(self.env.spec.required_tools or ())
        satisfied = not required
        limit = self.env.max_steps_per_turn
        index = 0
        resume = self.resume
        gate = self.env.approvals
        if resume is not None:  # steps already taken count toward the limit
            index, satisfied = (
                resume.steps_taken,
                satisfied or bool(resume.tools_ok & set(required)),
            )
            if resume.final is not None:  # the answer was written before the crash
                return TurnResult(self.turn_id, "text_response", response_message=resume.final)
            if resume.calls:
                await finish_interrupted_step(self, resume)
                if gate is not None and gate.pending:  # an approval of the step still waits
                    return parked_turn(self.turn_id, gate)
        while True:
            self.steering.drain(self.emit)  # steered input, before the next model request
            if index >= limit:
                return self._finish_max_steps(limit, required if not satisfied else [])
            step = Step(id=f"{self.turn_id}-step-{index}", index=index)
            self.turn.steps.append(step)
            outcome = await self._run_step(step)
            index += 1
            if isinstance(outcome, StepFailed):
                return TurnResult(self.turn_id, "error", error=dict(outcome.error))
            if gate is not None and gate.pending:  # parks: the decision resumes it
                return parked_turn(self.turn_id, gate)
            refused = next(
                (
                    r.error
                    for r in outcome.tool_results
                    if r.error is not None and r.error.code == BudgetExceededError.code
                ),
                None,
            )
            if refused is not None:
                # A budget of the trace stopped a nested request: this turn ends too, and so does
                # every turn waiting on it (docs/observability.md "Budgets").
                raise BudgetExceededError(refused.message, suggestion=refused.suggestion)
            if not satisfied and any(
                r.ok and r.tool_name in required for r in outcome.tool_results
            ):
                satisfied = True
            if isinstance(outcome, ToolsRan) or self.steering.pending:  # steered: answer it too
                continue
            if not satisfied:
                reminder = Message.create(
                    "user",
                    REQUIRED_TOOLS_REMINDER.format(tools=", ".join(required)),
                    source=MessageSource("system"),
                    metadata={"goondan.requiredToolsReminder": True},
                )
                self.emit(MessageEvent.append(reminder))
                continue
            return TurnResult(self.turn_id, "text_response", response_message=outcome.message)

    def _finish_max_steps(self, limit: int, unmet: list[str]) -> TurnResult:
        # Like the reference runtime: close the turn with an assistant message so the user sees
        # why it stopped and the conversation ends on a regular answer.
        text = self.last_assistant.text if self.last_assistant is not None else ""
        if not text:
            text = MAX_STEPS_FALLBACK.format(limit=limit)
        if unmet:
            text = f"{text}\n\n{REQUIRED_TOOLS_NOTE.format(tools=', '.join(unmet))}"
        last_step = self.turn.steps[-1].id if self.turn.steps else None
        message = Message.assistant(text, step_id=last_step, metadata={"goondan.maxSteps": True})
        self.emit(MessageEvent.append(message))
        return TurnResult(self.turn_id, "max_steps", response_message=message)

    # -- step ------------------------------------------------------------------------------------
    async def _run_step(self, step: Step) -> StepOutcome:
        span = self.span.child(f"step {step.index}", "step")
        where: dict[str, Any] = {
            "turn_id": self.turn_id,
            "step_id": step.id,
            "step_index": step.index,
        }
        self.env.observer.emit(StepStarted(**span_ids(span), **where))
        errors_before = self.error_count
        usage_before = self.usage

        async def core(c: StepContext) -> StepResult:
            return await self._step_core(c, step, span)

        try:
            catalog = await self.env.step_catalog(self.turn_id)  # in the span: an MCP start wait
            step.tool_catalog = list(catalog)
            ctx = StepContext(
                agent_name=self.env.spec.name,
                instance_key=self.env.instance_key,
                turn_id=self.turn_id,
                trace_id=self.span.trace_id,
                turn=self.turn,
                step_index=step.index,
                conversation_state=self.state,
                agents=self.agents,
                emit_message_event=self.emit,
                tool_catalog=catalog,
                span_id=span.span_id,
                parent_span_id=span.parent_span_id,
                system_prompt=self.env.spec.system_prompt or None,
            )
            result = await self.env.pipeline.run_step(ctx, core)
        except BaseException as exc:
            step.status = "failed"
            self.interrupted = True
            self.error_count += 1
            latency = span.finish(error=exc).duration_ms
            self.env.observer.emit(StepEnded(
                **span_ids(span), **where, failed=True, latency_ms=latency,
                error_message="cancelled" if isinstance(exc, asyncio.CancelledError) else str(exc),
            ))
            raise
        outcome = classify_step(result, self.last_assistant)
        failure = outcome.error_message if isinstance(outcome, StepFailed) else None
        step.status = "failed" if failure is not None else "completed"
        if failure is not None:
            self.error_count += 1
        latency = span.finish(error=failure).duration_ms
        delta = usage_delta(self.usage, usage_before)
        self.env.observer.emit(StepEnded(
            **span_ids(span), **where, failed=failure is not None,
            tool_call_count=len(result.tool_calls),
            error_count=self.error_count - errors_before,
            token_usage=delta.to_dict(), cost=cost_of(delta, self.env.pricing),
            latency_ms=latency, error_message=failure,
        ))
        return outcome

    async def _step_core(self, ctx: StepContext, step: Step, span: Span) -> StepResult:
        env = self.env
        catalog = [ToolCatalogItem.coerce(item) for item in ctx.tool_catalog]
        step.tool_catalog = catalog
        request = ModelRequest(
            messages=ctx.conversation_state.llm_view(),
            tools=catalog,
            system=ctx.system_prompt or None,
            params=dict(env.spec.params or {}),
        )
        self._current_step, self._step_span = step, span
        step.status = "llm_call"
        response = await self._generate(request, step, span)
        # dataclasses.replace keeps ToolCall.invalid_args (malformed arguments the executor
        # answers with E_TOOL_INVALID_ARGS).
        calls = [
            c if c.id else dataclasses.replace(c, id=new_id("call")) for c in response.tool_calls
        ]
        text = response.text
        assistant = Message.assistant(
            text, calls, step_id=step.id, call_options=response.tool_call_options or None,
            reasoning=response.reasoning or None,
        )
        self.emit(MessageEvent.append(assistant))
        self.last_assistant = assistant
        step.tool_calls = calls
        metadata: JsonObject = {
            "finishReason": response.finish_reason,
            "tokenUsage": response.usage.to_dict(),
        }
        if not calls:
            return StepResult("completed", False, metadata=metadata)
        step.status = "tool_exec"
        self.tool_call_count += len(calls)
        results: list[ToolCallResult]
        if env.spec.parallel_tool_calls and len(calls) > 1:
            tasks: list[asyncio.Task[ToolCallResult]] = []
            try:
                async with asyncio.TaskGroup() as group:
                    for call in calls:
                        tasks.append(group.create_task(
                            self.run_tool_call(step, span, call, assistant, catalog)
                        ))
            except BaseExceptionGroup as failure:
                # Keep the results that finished (the rest are repaired), and fail the turn with
                # the first real error, so its code and message reach the TurnResult.
                for task in tasks:
                    if task.done() and not task.cancelled() and task.exception() is None:
                        self.emit(MessageEvent.append(Message.tool_result(task.result())))
                raise first_error(failure) from None
            results = [t.result() for t in tasks if not self._parked(t.result())]
            for result in results:
                self.emit(MessageEvent.append(Message.tool_result(result)))
        else:
            results = []
            for call in calls:
                # Appended one by one so a crash mid-step keeps every finished result.
                result = await self.run_tool_call(step, span, call, assistant, catalog)
                if not self._parked(result):  # a parked call gets its result when decided
                    self.emit(MessageEvent.append(Message.tool_result(result)))
                    results.append(result)
        step.tool_results = results
        return StepResult("completed", True, calls, results, metadata)

    def _parked(self, result: ToolCallResult) -> bool:
        gate = self.env.approvals
        return gate is not None and result.tool_call_id in gate.pending

    def _check_budget(self) -> None:
        """End the turn when it passed ``maxTokensPerTurn``, or its cost took the trace past
        ``maxCostPerTrace`` (the trace's cost when this turn was requested, plus its own)."""
        budget = self.env.budget
        limit = budget.max_tokens_per_turn
        if limit is not None and self.usage.total_tokens > limit:
            raise BudgetExceededError(
                f"turn used {self.usage.total_tokens} tokens, over maxTokensPerTurn {limit}",
                suggestion="raise spec.budget.maxTokensPerTurn, or lower the Model's maxTokens",
            )
        cost_limit = budget.max_cost_per_trace
        own = cost_of(self.usage, self.env.pricing)
        if cost_limit is not None and own is not None:
            inherited = self.event.metadata.get(TRACE_COST_KEY)
            spent = own + (float(inherited) if isinstance(inherited, (int, float)) else 0.0)
            if spent > cost_limit:
                raise BudgetExceededError(
                    f"trace {self.span.trace_id} cost ${spent:.6f}, "
                    f"over maxCostPerTrace ${cost_limit}",
                    suggestion="raise maxCostPerTrace, or use a cheaper Model",
                )

    async def _generate(self, request: ModelRequest, step: Step, span: Span) -> ModelResponse:
        """One model call. An empty reply (no tool calls, blank text) is asked again once with
        a note (not stored); a second empty reply fails the step with E_LLM_EMPTY_RESPONSE
        instead of storing a placeholder answer (docs/models.md "Tool calls the model gets
        wrong, and empty replies")."""
        env = self.env
        for attempt in range(2):
            response = await self._call_model(request, step, span)
            self.usage = self.usage + response.usage
            self._check_budget()
            if response.tool_calls or response.text.strip():
                return response
            env.logger.warning("%s: the model returned an empty reply (attempt %d of 2)",
                               env.spec.name, attempt + 1)
            request = dataclasses.replace(
                request,
                messages=[*request.messages, {"role": "user", "content": EMPTY_REPLY_NUDGE}],
            )
        raise LlmBadResponseError(
            "the model returned an empty reply twice (no text and no tool calls)",
            code="E_LLM_EMPTY_RESPONSE",
            suggestion="Try again; if it persists, check the Model's maxTokens and that the model "
            "supports the tools it was given.",
        )

    async def _call_model(
        self, request: ModelRequest, step: Step, step_span: Span
    ) -> ModelResponse:
        """One model request; an ``llm`` span when a sink traces (``RuntimeObserver.traced``)."""
        env, stream = self.env, self._stream
        on_delta = self._on_delta if stream else None
        if not env.observer.traced:  # nobody receives llm.* events: do not build them
            return await env.model.generate(request, stream=stream, on_delta=on_delta)
        # The llm span's ids and clock, without a Span object: nothing reads it but these events.
        trace_id, parent_id, span_id = step_span.trace_id, step_span.span_id, new_span_id()
        started = time.perf_counter()
        model, provider = env.model.model or None, getattr(env.model, "provider", None)
        if env.observer.wants("llm.started"):  # the exporter and the event log skip it
            env.observer.emit(LlmCallStarted(
                trace_id=trace_id, span_id=span_id, parent_span_id=parent_id, turn_id=self.turn_id,
                step_id=step.id, model=model, provider=provider, stream=stream,
                message_count=len(request.messages), tool_count=len(request.tools),
            ))
        try:
            response = await env.model.generate(request, stream=stream, on_delta=on_delta)
        except BaseException as exc:
            env.observer.emit(LlmCallEnded(
                trace_id=trace_id, span_id=span_id, parent_span_id=parent_id, turn_id=self.turn_id,
                step_id=step.id, model=model, provider=provider, failed=True,
                latency_ms=elapsed_ms(started, time.perf_counter()),
                error_message="cancelled" if isinstance(exc, asyncio.CancelledError) else str(exc),
            ))
            raise
        env.observer.emit(LlmCallEnded(
            trace_id=trace_id, span_id=span_id, parent_span_id=parent_id,
            turn_id=self.turn_id, step_id=step.id, model=model, provider=provider,
            finish_reason=response.finish_reason, token_usage=response.usage.to_dict(),
            cost=cost_of(response.usage, env.pricing), tool_call_count=len(response.tool_calls),
            latency_ms=elapsed_ms(started, time.perf_counter()),
        ))
        return response

    def _on_delta(self, delta: StreamDelta) -> None:
        step, span = self._current_step, self._step_span
        event = LlmDelta(
            **(span_ids(span) if span is not None else {}),
            turn_id=self.turn_id,
            step_id=step.id if step else None,
            step_index=step.index if step else None,
            kind=delta.kind,
            text=delta.text,
        )
        if delta.kind == "tool_call":
            event.index, event.tool_call_id, event.tool_name = (
                delta.index, delta.tool_call_id, delta.tool_name
            )
        self.env.observer.emit(event)

    # -- tool call -------------------------------------------------------------------------------
    async def run_tool_call(
        self,
        step: Step,
        step_span: Span,
        call: ToolCall,
        message: Message,
        catalog: list[ToolCatalogItem],
    ) -> ToolCallResult:
        env = self.env
        span = step_span.child(call.name, "toolCall")
        gate = env.approvals
        approved = gate.approved.get(call.id) if gate is not None else None
        ctx = ToolCallContext(
            agent_name=env.spec.name,
            instance_key=env.instance_key,
            turn_id=self.turn_id,
            trace_id=self.span.trace_id,
            step_index=step.index,
            tool_name=call.name,
            tool_call_id=call.id,
            # A deep copy: middleware may edit nested values in place, while the assistant
            # message (already recorded) must keep the model's own arguments.
            args=copy.deepcopy(approved.args if approved is not None else call.args),
            span_id=span.span_id,
            parent_span_id=span.parent_span_id,
            approved=approved is not None,
        )
        where: dict[str, Any] = {
            "turn_id": self.turn_id,
            "step_id": step.id,
            "step_index": step.index,
            "tool_call_id": call.id,
            "tool_name": call.name,
        }
        env.observer.emit(ToolCalled(**span_ids(span), **where, args=call.args))

        async def core(c: ToolCallContext) -> ToolCallResult:
            rule = gate.needed(c) if gate is not None else None
            if gate is not None and rule is not None:  # not run: the request is durable first
                return await park_call(gate, c, rule, env.observer, span)
            tool_context = ToolContext(
                agent_name=env.spec.name,
                instance_key=env.instance_key,
                turn_id=self.turn_id,
                trace_id=self.span.trace_id,
                tool_call_id=call.id,
                message=message,
                workdir=env.workdir,
                logger=env.logger,
                runtime=self.tool_runtime,
                idempotency_key=self.recorder.key(self.turn_id, call.id),
            )
            actual = dataclasses.replace(call, args=c.args)  # keeps invalid_args

            def started(tool: Any) -> None:  # the ledger: durable before the handler runs
                self.recorder.call_started(self.turn_id, call.id, call.name, tool.idempotent,
                                           tool_context.idempotency_key)

            return await env.executor.execute(actual, catalog=catalog, context=tool_context,
                                              on_start=started)

        token = CURRENT_SPAN.set(span)
        try:
            result = await env.pipeline.run_tool_call(ctx, core)
        except BaseException as exc:
            self.error_count += 1
            latency = span.finish(error=exc).duration_ms
            cancelled = isinstance(exc, asyncio.CancelledError)
            env.observer.emit(ToolEnded(
                **span_ids(span), **where, failed=True, status="error", latency_ms=latency,
                error_code="E_TURN_CANCELLED" if cancelled else str(error_dict(exc)["code"]),
                error_message="cancelled" if cancelled else str(exc),
            ))
            raise
        finally:
            CURRENT_SPAN.reset(token)
        result = settle_result(result, call)
        output = result.output
        if (
            result.ok
            and isinstance(output, dict)
            and any(output.get(k) is True for k in RESTART_FLAGS)
        ):
            reason = output.get("restartReason")
            self.restart_reason = (
                reason.strip() if isinstance(reason, str) and reason.strip() else call.name
            )
        latency = span.finish().duration_ms
        error = None if result.ok else result.error
        if not result.ok:
            self.error_count += 1
        env.observer.emit(ToolEnded(
            **span_ids(span), **where, failed=not result.ok, status=result.status,
            latency_ms=latency,
            error_code=error.code if error is not None else None,
            error_message=error.message if error is not None else None,
        ))
        return result

