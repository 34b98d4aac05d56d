"""Middleware contexts and the results each chain returns (docs/extensions.md "Contexts").

One context object is created per chain invocation and shared by every layer of that chain,
so what an outer layer changes before ``await ctx.next()`` (``tool_catalog``, ``args``,
``metadata``) is what inner layers and the core see. ``ctx.next()`` runs the next inner layer;
the chain runner (``goondan.pipeline.chain``) binds it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from goondan.conversation.messages import Message, MessageEvent
from goondan.types import AgentEvent, JsonObject, ToolCall, ToolCallResult, ToolCatalogItem

if TYPE_CHECKING:
    from goondan.conversation.state import ConversationState

__all__ = [
    "MiddlewareAgentsApi",
    "StepContext",
    "StepResult",
    "ToolCallContext",
    "Turn",
    "TurnContext",
    "TurnResult",
]

# How a turn ended; not the model's own stop reason (``goondan.llm.base.FinishReason``).
# ``approval_pending``: the turn parked until a person decides (docs/approvals.md).
TurnFinishReason = Literal["text_response", "max_steps", "error", "approval_pending"]


@dataclass
class TurnResult:
    """``{turnId, responseMessage?, finishReason, error?}`` (docs/runtime.md
    "TurnResult and finish reasons")."""

    turn_id: str
    finish_reason: TurnFinishReason
    response_message: Message | None = None
    error: JsonObject | None = None
    metadata: JsonObject = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.response_message.text if self.response_message is not None else ""

    def to_dict(self) -> JsonObject:
        out: JsonObject = {"turnId": self.turn_id, "finishReason": self.finish_reason}
        if self.response_message is not None:
            out["responseMessage"] = self.response_message.to_dict()
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class StepResult:
    """``{status, hasToolCalls, toolCalls, toolResults, metadata}`` (docs/extensions.md
    "Contexts")."""

    status: Literal["completed", "failed"]
    has_tool_calls: bool
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolCallResult] = field(default_factory=list)
    metadata: JsonObject = field(default_factory=dict)


@dataclass
class Step:
    """One step of a turn (docs/runtime.md "The turn loop")."""

    id: str
    index: int
    tool_catalog: list[ToolCatalogItem] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolCallResult] = field(default_factory=list)
    status: Literal["llm_call", "tool_exec", "completed", "failed"] = "llm_call"


@dataclass
class Turn:
    """The running turn as step middleware sees it (read-only by convention)."""

    id: str
    agent_name: str
    input_event: AgentEvent
    trace_id: str
    steps: list[Step] = field(default_factory=list)
    status: Literal["running", "completed", "failed"] = "running"
    metadata: JsonObject = field(default_factory=dict)


class MiddlewareAgentsApi(Protocol):
    """``ctx.agents`` on turn and step contexts (docs/extensions.md "Contexts")."""

    async def request(
        self,
        target: str,
        input: str | None = None,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
        metadata: JsonObject | None = None,
    ) -> dict[str, Any]: ...

    async def send(
        self,
        target: str,
        input: str | None = None,
        *,
        instance_key: str | None = None,
        metadata: JsonObject | None = None,
    ) -> dict[str, Any]: ...


NextFn = Callable[[], Awaitable[Any]]


class _ChainContext:
    """Base for the three contexts: holds the ``next`` binding installed by the chain runner."""

    _next_binding: Callable[[], Awaitable[Any]] | None = None

    async def next(self) -> Any:
        """Run the next inner middleware (or the core) and return its result."""
        binding = self._next_binding
        if binding is None:
            from goondan.errors import PipelineError

            raise PipelineError(
                "ctx.next() called outside a middleware chain",
                code="E_PIPELINE_NO_CHAIN",
            )
        return await binding()


@dataclass(eq=False)
class TurnContext(_ChainContext):
    agent_name: str
    instance_key: str
    turn_id: str
    trace_id: str
    input_event: AgentEvent
    conversation_state: ConversationState
    agents: MiddlewareAgentsApi
    emit_message_event: Callable[[MessageEvent], None]
    metadata: JsonObject = field(default_factory=dict)
    span_id: str = ""
    parent_span_id: str | None = None

    async def next(self) -> TurnResult:
        result: TurnResult = await super().next()
        return result


@dataclass(eq=False)
class StepContext(_ChainContext):
    agent_name: str
    instance_key: str
    turn_id: str
    trace_id: str
    turn: Turn
    step_index: int
    conversation_state: ConversationState
    agents: MiddlewareAgentsApi
    emit_message_event: Callable[[MessageEvent], None]
    tool_catalog: list[ToolCatalogItem] = field(default_factory=list)
    metadata: JsonObject = field(default_factory=dict)
    span_id: str = ""
    parent_span_id: str | None = None
    # The system prompt this step sends (the Agent's prompt); step middleware may replace or
    # clear it before next() (docs/extensions.md), e.g. base `context-message`.
    system_prompt: str | None = None

    async def next(self) -> StepResult:
        result: StepResult = await super().next()
        return result


@dataclass(eq=False)
class ToolCallContext(_ChainContext):
    """Deliberately has no ``agents`` attribute: a tool call never calls another agent itself."""

    agent_name: str
    instance_key: str
    turn_id: str
    trace_id: str
    step_index: int
    tool_name: str
    tool_call_id: str
    args: JsonObject
    metadata: JsonObject = field(default_factory=dict)
    span_id: str = ""
    parent_span_id: str | None = None
    # Set by require_approval(); read by the core (docs/approvals.md). ``approved`` is true when
    # the call runs after a person approved it: asking again then changes nothing.
    approval_reason: str | None = None
    approval_required: bool = False
    approved: bool = False

    def require_approval(self, reason: str | None = None) -> None:
        """Ask a person before this call runs; call it before ``await ctx.next()``.

        The core then does not run the tool: the turn parks until the approval is decided
        (docs/approvals.md). A call that is already approved (the resumed turn) runs."""
        if self.approved:
            return
        self.approval_required = True
        if reason is not None:
            self.approval_reason = str(reason)

    async def next(self) -> ToolCallResult:
        result: ToolCallResult = await super().next()
        return result
