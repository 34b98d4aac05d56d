"""Test support for the pipeline, tool and extension areas.

* context factories (``turn_ctx``, ``step_ctx``, ``tool_ctx``, ``tool_context``);
* :class:`RecordingAgents`, a ``ctx.agents`` that records requests/sends;
* :class:`FileStateStore`, a file-backed extension state store shaped like ``InstanceStore``
  (``<root>/<agent>:<instanceKey>/extensions/<name>.json``);
* :class:`MiniTurnDriver`, a small Turn → Step → ToolCall loop around a
  :class:`~goondan.llm.testing.ScriptedModel` that drives the real chains, registry, catalog
  and executor the way the runtime does (runtime.md §7), so the pipeline area can be tested
  end to end without depending on the runtime package.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.state import ConversationState
from goondan.llm.base import ModelRequest
from goondan.llm.testing import ScriptedModel
from goondan.pipeline.context import (
    Step,
    StepContext,
    StepResult,
    ToolCallContext,
    Turn,
    TurnContext,
    TurnResult,
)
from goondan.pipeline.registry import PipelineRegistry
from goondan.tools.context import ToolContext
from goondan.tools.executor import ToolExecutor
from goondan.tools.registry import ToolRegistry
from goondan.types import (
    AgentEvent,
    JsonObject,
    ToolCall,
    ToolCallResult,
    new_span_id,
    new_trace_id,
)
from tests.support.aio import run as run  # older imports of run from here

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
EXT_FIXTURES = FIXTURES / "extensions"
TOOL_FIXTURES = FIXTURES / "tools"


class RecordingAgents:
    """``ctx.agents`` double: answers every request with ``"echo:<input>"``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None, int | None]] = []

    async def request(
        self, target: str, input: str | None = None, *, instance_key: str | None = None,
        timeout_ms: int | None = None, metadata: JsonObject | None = None,
    ) -> dict[str, Any]:
        self.calls.append(("request", target, input, timeout_ms))
        return {"target": target, "response": f"echo:{input}"}

    async def send(
        self, target: str, input: str | None = None, *, instance_key: str | None = None,
        metadata: JsonObject | None = None,
    ) -> dict[str, Any]:
        self.calls.append(("send", target, input, 0))
        return {"accepted": True}


def turn_ctx(state: ConversationState | None = None, **overrides: Any) -> TurnContext:
    state = state if state is not None else ConversationState()
    values: dict[str, Any] = dict(
        agent_name="coder", instance_key="user-1", turn_id="turn-1", trace_id=new_trace_id(),
        input_event=AgentEvent(type="message", input="hi"), conversation_state=state,
        agents=RecordingAgents(), emit_message_event=state.emit, span_id=new_span_id(),
    )
    values.update(overrides)
    return TurnContext(**values)


def step_ctx(state: ConversationState | None = None, **overrides: Any) -> StepContext:
    state = state if state is not None else ConversationState()
    trace = new_trace_id()
    values: dict[str, Any] = dict(
        agent_name="coder", instance_key="user-1", turn_id="turn-1", trace_id=trace,
        turn=Turn(id="turn-1", agent_name="coder", input_event=AgentEvent(type="message"),
                  trace_id=trace),
        step_index=0, conversation_state=state, agents=RecordingAgents(),
        emit_message_event=state.emit,
    )
    values.update(overrides)
    return StepContext(**values)


def tool_call_ctx(**overrides: Any) -> ToolCallContext:
    values: dict[str, Any] = dict(
        agent_name="coder", instance_key="user-1", turn_id="turn-1", trace_id=new_trace_id(),
        step_index=0, tool_name="bash__exec", tool_call_id="call-1", args={"command": "ls"},
    )
    values.update(overrides)
    return ToolCallContext(**values)


def tool_context(workdir: Path | str = ".", **overrides: Any) -> ToolContext:
    values: dict[str, Any] = dict(
        agent_name="coder", instance_key="user-1", turn_id="turn-1", trace_id=new_trace_id(),
        tool_call_id="call-1", message=None, workdir=Path(workdir),
    )
    values.update(overrides)
    return ToolContext(**values)


def ok_result(
    call_id: str = "call-1", name: str = "bash__exec", output: Any = "ok"
) -> ToolCallResult:
    return ToolCallResult.success(call_id, name, output)


class FileStateStore:
    """Extension states as JSON files, one directory per (agent, instanceKey)."""

    def __init__(self, root: Path, agent: str, instance_key: str) -> None:
        self.dir = root / f"{agent}:{instance_key}" / "extensions"
        self.writes: list[str] = []

    def load_extension_state(self, name: str) -> Any:
        path = self.dir / f"{name}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def save_extension_state(self, name: str, value: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / f"{name}.json").write_text(json.dumps(value, indent=2), encoding="utf-8")
        self.writes.append(name)


@dataclass
class Binding:
    """Duck-typed stand-in for ``goondan.config`` Tool/Extension bindings."""

    name: str
    entry: Path
    exports: list[Any] = field(default_factory=list)
    config: JsonObject = field(default_factory=dict)
    package: str | None = None
    error_message_limit: int = 1000
    timeout_ms: int = 120_000
    root: Path = FIXTURES


@dataclass
class Export:
    name: str
    description: str = ""
    parameters: JsonObject | None = None


def ext_binding(name: str, *, file: str | None = None, config: JsonObject | None = None) -> Binding:
    return Binding(name=name, entry=EXT_FIXTURES / f"{file or name.replace('-', '_')}.py",
                   config=dict(config or {}))


@dataclass
class MiniTurnDriver:
    """A faithful, small Turn → Step → ToolCall loop (runtime.md §7) for the pipeline tests."""

    pipeline: PipelineRegistry
    tools: ToolRegistry
    model: ScriptedModel
    bindings: list[Any] = field(default_factory=list)
    state: ConversationState = field(default_factory=ConversationState)
    workdir: Path = Path(".")
    max_steps: int = 8
    agent_name: str = "coder"
    instance_key: str = "user-1"
    offered: list[list[str]] = field(default_factory=list)  # catalog names per LLM call
    handler_args: list[JsonObject] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.executor = ToolExecutor(self.tools)
        self.log = logging.getLogger("tests.driver")

    async def run_turn(self, text: str, *, turn_id: str = "turn-1") -> TurnResult:
        trace = new_trace_id()
        self.state.emit(MessageEvent.append(Message.user(text)))
        event = AgentEvent(type="message", input=text)
        turn = Turn(id=turn_id, agent_name=self.agent_name, input_event=event, trace_id=trace)
        agents = RecordingAgents()
        ctx = TurnContext(
            agent_name=self.agent_name, instance_key=self.instance_key, turn_id=turn_id,
            trace_id=trace, input_event=event, conversation_state=self.state, agents=agents,
            emit_message_event=self.state.emit, span_id=new_span_id(),
        )

        async def turn_core(tctx: TurnContext) -> TurnResult:
            last: Message | None = None
            for index in range(self.max_steps):
                step = Step(id=f"{turn_id}-step-{index}", index=index)
                turn.steps.append(step)
                sctx = StepContext(
                    agent_name=self.agent_name, instance_key=self.instance_key, turn_id=turn_id,
                    trace_id=trace, turn=turn, step_index=index,
                    conversation_state=self.state, agents=agents,
                    emit_message_event=self.state.emit,
                    tool_catalog=self.tools.catalog(self.bindings), metadata=tctx.metadata,
                )
                result = await self.pipeline.run_step(sctx, self._step_core)
                last = self.state.next_messages[-1] if self.state.next_messages else None
                if not result.has_tool_calls:
                    return TurnResult(turn_id, "text_response", response_message=last)
            return TurnResult(turn_id, "max_steps", response_message=last)

        return await self.pipeline.run_turn(ctx, turn_core)

    async def _step_core(self, sctx: StepContext) -> StepResult:
        catalog = list(sctx.tool_catalog)
        self.offered.append([item.name for item in catalog])
        response = await self.model.generate(
            ModelRequest(messages=self.state.to_llm_messages(), tools=catalog)
        )
        assistant = Message.assistant(response.text, response.tool_calls,
                                      step_id=f"{sctx.turn_id}-step-{sctx.step_index}")
        self.state.emit(MessageEvent.append(assistant))
        if not response.tool_calls:
            return StepResult("completed", False)
        results: list[ToolCallResult] = []
        for call in response.tool_calls:
            cctx = ToolCallContext(
                agent_name=sctx.agent_name, instance_key=sctx.instance_key,
                turn_id=sctx.turn_id, trace_id=sctx.trace_id, step_index=sctx.step_index,
                tool_name=call.name, tool_call_id=call.id, args=dict(call.args),
            )

            async def core(c: ToolCallContext, _msg: Message = assistant) -> ToolCallResult:
                self.handler_args.append(dict(c.args))
                context = ToolContext(
                    agent_name=c.agent_name, instance_key=c.instance_key, turn_id=c.turn_id,
                    trace_id=c.trace_id, tool_call_id=c.tool_call_id, message=_msg,
                    workdir=self.workdir,
                )
                return await self.executor.execute(
                    ToolCall(c.tool_call_id, c.tool_name, c.args), catalog=catalog,
                    context=context,
                )

            result = await self.pipeline.run_tool_call(cctx, core)
            results.append(result)
            self.state.emit(MessageEvent.append(Message.tool_result(result)))
        return StepResult("completed", True, list(response.tool_calls), results)
