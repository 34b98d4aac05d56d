"""Middleware contexts and results (seed 000 §3-4, seed 004 §13.3)."""

from __future__ import annotations

import dataclasses

from goondan.pipeline.context import (
    StepContext,
    StepResult,
    ToolCallContext,
    Turn,
    TurnContext,
    TurnResult,
)
from goondan.types import ToolCall
from tests.support.pipeline_harness import step_ctx, tool_call_ctx, turn_ctx


def test_v1_turn_messages_structure_is_gone() -> None:
    """seed 004 §13.3.4 rule 6: no v1 ctx.turn.messages.base/events/next/emit; use
    conversationState."""
    assert "messages" not in {f.name for f in dataclasses.fields(Turn)}
    assert not hasattr(step_ctx().turn, "messages")
    assert not hasattr(turn_ctx(), "turn")
    for ctx in (turn_ctx(), step_ctx()):
        assert hasattr(ctx, "conversation_state") and callable(ctx.emit_message_event)


def test_step_result_shape() -> None:
    """seed 000 §4.7: StepResult {status, hasToolCalls, toolCalls, toolResults, metadata}."""
    result = StepResult("completed", True, [ToolCall("c", "a__b", {})])
    assert {f.name for f in dataclasses.fields(StepResult)} == {
        "status", "has_tool_calls", "tool_calls", "tool_results", "metadata",
    }
    assert result.tool_results == [] and result.metadata == {}


def test_turn_result_to_dict() -> None:
    """runtime.md §2: TurnResult {turnId, responseMessage?, finishReason, error?}."""
    assert TurnResult("t1", "max_steps").to_dict() == {"turnId": "t1", "finishReason": "max_steps"}


def test_contexts_are_distinct_types() -> None:
    """seed 000 §4.1-4.3: three context interfaces."""
    assert {type(turn_ctx()), type(step_ctx()), type(tool_call_ctx())} == {
        TurnContext, StepContext, ToolCallContext,
    }
