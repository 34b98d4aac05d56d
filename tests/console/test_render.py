"""Console pieces: multi-line input, tool lines, streamed text, answers and errors."""

from __future__ import annotations

import io

from goondan.console.prompt import join_multiline
from goondan.console.render import Style, TurnRenderer, short_args
from goondan.console.session import format_message, result_json
from goondan.conversation.messages import Message
from goondan.errors import help_url
from goondan.pipeline.context import TurnResult
from goondan.secrets import register_secret
from goondan.types import ToolCall


def feeder(lines: list[str]):  # type: ignore[no-untyped-def]
    items = iter(lines)
    return lambda: next(items)


def test_backslash_continuation() -> None:
    assert join_multiline("first \\", feeder(["second\\", "third"])) == "first \nsecond\nthird"


def test_triple_quote_block() -> None:
    assert join_multiline('"""', feeder(["a", "  b", '"""'])) == "a\n  b"
    assert join_multiline('"""start', feeder(['end"""'])) == "start\nend"
    assert join_multiline('"""one line"""', feeder([])) == "one line"
    assert join_multiline("plain", feeder([])) == "plain"


def test_short_args_cuts_and_masks() -> None:
    register_secret("sk-render-secret")
    assert short_args({"a": 1, "b": "x"}) == 'a=1, b="x"'
    assert "sk-render-secret" not in short_args({"key": "sk-render-secret"})
    assert len(short_args({"text": "y" * 500})) == 60


def test_renderer_streams_text_and_prints_tool_lines() -> None:
    out = io.StringIO()
    renderer = TurnRenderer(out, tty=False, stream=True)
    renderer.start_turn()
    renderer.handle({"type": "llm.delta", "kind": "text", "text": "Let me "})
    renderer.handle({"type": "llm.delta", "kind": "text", "text": "check."})
    renderer.handle({"type": "tool.called", "toolCallId": "c1", "toolName": "units__convert",
                     "args": {"value": 12}})
    renderer.handle({"type": "tool.completed", "toolCallId": "c1", "toolName": "units__convert",
                     "status": "ok", "latencyMs": 1.25})
    renderer.handle(
        {"type": "tool.called", "toolCallId": "c2", "toolName": "files__read", "args": {}}
    )
    renderer.handle({"type": "tool.failed", "toolCallId": "c2", "toolName": "files__read",
                     "errorCode": "E_TOOL_FAILED", "errorMessage": "nope", "latencyMs": 2})
    renderer.handle({"type": "llm.delta", "kind": "text", "text": "Done."})
    renderer.end_turn(TurnResult("t", "text_response", response_message=Message.assistant("Done.")))
    assert out.getvalue().splitlines() == [
        "Let me check.",
        "  ✓ units__convert(value=12)  1.2 ms",
        "  ✗ files__read()  E_TOOL_FAILED: nope  2.0 ms",
        "Done.",
    ]


def test_renderer_prints_whole_answer_without_stream_and_errors() -> None:
    out = io.StringIO()
    renderer = TurnRenderer(out, tty=False, stream=False)
    renderer.start_turn()
    renderer.handle({"type": "llm.delta", "kind": "text", "text": "ignored"})
    renderer.end_turn(
        TurnResult("t", "text_response", response_message=Message.assistant("Whole."))
    )
    renderer.start_turn()
    renderer.end_turn(TurnResult("t", "error", error={"code": "E_LLM_HTTP", "message": "boom"}))
    renderer.cancelled()
    assert out.getvalue().splitlines() == [
        "Whole.", "[E_LLM_HTTP] boom", f"  help: {help_url('E_LLM_HTTP')}", "(turn cancelled)"]


def test_format_message_and_result_json() -> None:
    style = Style(False)
    assert format_message(Message.user("hi"), style) == "you › hi"
    call = Message.assistant("", [ToolCall("c", "units__list", {})])
    assert format_message(call, style) == "  → units__list()"
    result = TurnResult("t1", "text_response", response_message=Message.assistant("ok"),
                        metadata={"traceId": "a" * 32})
    line = result_json(result)
    assert '"turnId": "t1"' in line and '"traceId"' in line


def test_an_answer_whose_stream_was_cut_is_printed_whole() -> None:
    """The orchestrator stopped streaming to a client that did not read (``eventsDropped``): the
    chat prints the whole answer after the part it streamed, not the cut text alone."""
    out = io.StringIO()
    renderer = TurnRenderer(out, color=False, tty=False, stream=True)
    renderer.start_turn()
    renderer.handle({"type": "llm.delta", "kind": "text", "text": "the beginn"})
    renderer.end_turn(TurnResult(turn_id="t", finish_reason="text_response",
                                 response_message=Message.assistant("the beginning and the end"),
                                 metadata={"eventsDropped": 2}))
    lines = out.getvalue().splitlines()
    assert lines[0] == "the beginn" and lines[-1] == "the beginning and the end"
