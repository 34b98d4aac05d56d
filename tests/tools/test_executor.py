"""ToolExecutor: catalog gating, schema check, handler errors, timeouts (seed 002 §2.3, §2.4, §9,
§10)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation.messages import Message
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.secrets import register_secret
from goondan.tools.executor import ToolExecutor, ToolFailure, truncate_error_message
from goondan.tools.loader import load_entry_module
from goondan.tools.registry import ToolRegistry
from goondan.types import ToolCall, ToolCallResult, ToolSource
from tests.support.aio import run
from tests.support.hostile_bundles import write_bundle
from tests.support.pipeline_harness import TOOL_FIXTURES, Binding, Export, tool_context

EXPORTS = ["echo", "aecho", "fail", "afail", "hang", "block", "bad-output", "nan-output",
           "noop", "anoop", "where", "lambda"]


def make(
    limit: int = 1000, timeout_ms: int = 120_000, **params: Any
) -> tuple[ToolExecutor, list[Any]]:
    registry = ToolRegistry()
    binding = Binding(
        name="basic", entry=TOOL_FIXTURES / "basic.py",
        exports=[Export(e, parameters=params.get(e)) for e in EXPORTS],
        error_message_limit=limit, timeout_ms=timeout_ms,
    )
    registry.load_bindings([binding])
    return ToolExecutor(registry), registry.catalog([binding])


def execute(executor: ToolExecutor, name: str, args: Any = None, catalog: Any = None,
            **ctx: Any) -> ToolCallResult:
    call = ToolCall("call-1", name, args if args is not None else {})
    return run(executor.execute(call, catalog=catalog if catalog is not None else [name],
                                context=tool_context(**ctx)))


def test_sync_handler_runs_in_a_worker_thread_and_async_on_the_loop() -> None:
    """Issue 4 Build 2: sync handlers go through asyncio.to_thread; async handlers are awaited."""
    executor, _ = make()
    result = execute(executor, "basic__echo", {"x": 1})
    assert result.ok and result.output == {"echo": {"x": 1}, "thread": True}
    assert result.tool_call_id == "call-1" and result.tool_name == "basic__echo"
    assert execute(executor, "basic__aecho", {"y": 2}).output == {"echo": {"y": 2}}
    assert execute(executor, "basic__lambda", {"z": 3}).output == {"echo": {"z": 3}}
    assert execute(executor, "basic__noop").output is None
    assert execute(executor, "basic__anoop").ok


def test_calls_outside_the_step_catalog_are_refused() -> None:
    """seed 002 §2.3 rules 1, 2, 4 / §9.1-9.2: not in catalog → structured E_TOOL_NOT_IN_CATALOG."""
    executor, catalog = make()
    step_catalog = [i for i in catalog if i.name != "basic__echo"]
    result = execute(executor, "basic__echo", {}, catalog=step_catalog)
    assert result.status == "error" and result.error is not None
    assert result.error.to_dict() == {
        "message": "Tool 'basic__echo' is not available in the current Tool Catalog.",
        "code": "E_TOOL_NOT_IN_CATALOG",
        "name": "ToolNotInCatalogError",
        "suggestion": result.error.suggestion,
        "helpUrl": "docs/errors.md#e_tool_not_in_catalog",
    }
    assert "spec.tools" in (result.error.suggestion or "")
    unknown = execute(executor, "unknown__action", {}, catalog=catalog)
    assert unknown.error is not None and unknown.error.code == "E_TOOL_NOT_IN_CATALOG"
    close = execute(executor, "basic__ech", {}, catalog=catalog)
    assert "Did you mean 'basic__echo'" in (close.error.suggestion or "")  # type: ignore[union-attr]


def test_registry_calls_only_with_an_explicit_policy() -> None:
    """seed 002 §2.3 rule 3 / §9.1: registry-direct calls are enabled only explicitly."""
    executor, _ = make()
    assert executor.allow_registry_calls is False
    permissive = ToolExecutor(executor.registry, allow_registry_calls=True)
    assert execute(permissive, "basic__aecho", {"a": 1}, catalog=[]).ok


def test_unknown_tool_in_catalog_is_not_found() -> None:
    """Issue 4 Build 2: a catalog entry with no registered handler → E_TOOL_NOT_FOUND."""
    executor, _ = make()
    result = execute(executor, "ghost__run", {}, catalog=[{"name": "ghost__run"}])
    assert result.error is not None and result.error.code == "E_TOOL_NOT_FOUND"


def test_handler_exception_becomes_an_error_result() -> None:
    """seed 002 §2.4 rule 1 / §10.3: exceptions are returned as ToolResult (code E_TOOL, name =
    class)."""
    executor, _ = make()
    result = execute(executor, "basic__fail", {"message": "request failed"})
    assert result.status == "error" and result.error is not None
    assert (result.error.code, result.error.name, result.error.message) == (
        "E_TOOL", "ValueError", "request failed"
    )
    assert result.error.help_url == "docs/errors.md#e_tool"
    assert result.error.suggestion  # seed 002 §2.4 rule 4 (SHOULD)
    aresult = execute(executor, "basic__afail", {})
    assert aresult.error is not None and aresult.error.name == "PermissionError"


def test_error_message_limit_and_truncation_suffix() -> None:
    """seed 002 §2.4 rule 2 / §10.4: error.message is cut to errorMessageLimit with '...
    (truncated)'."""
    executor, _ = make(limit=40)
    result = execute(executor, "basic__fail", {"message": "x" * 100})
    assert result.error is not None
    assert result.error.message == "x" * 25 + "... (truncated)"
    assert len(result.error.message) == 40
    assert execute(executor, "basic__fail", {"message": "y" * 40}).error.message == "y" * 40  # type: ignore[union-attr]


def test_default_error_message_limit_is_1000() -> None:
    """seed 002 §2.4 rule 3 / §4.3: without errorMessageLimit the limit is 1000 characters."""
    registry = ToolRegistry()
    registry.load_bindings([{"name": "basic", "entry": TOOL_FIXTURES / "basic.py",
                             "exports": [{"name": "fail"}]}])
    result = execute(ToolExecutor(registry), "basic__fail", {"message": "z" * 5000})
    assert result.error is not None and len(result.error.message) == 1000
    assert result.error.message.endswith("... (truncated)")


def test_truncate_error_message_function() -> None:
    """seed 002 §10.4: reference truncateErrorMessage behaviour, including tiny limits."""
    assert truncate_error_message("short", 10) == "short"
    assert truncate_error_message("a" * 20, 18) == "aaa... (truncated)"
    assert truncate_error_message("a" * 20, 5) == "aaaaa"


def test_invalid_arguments_name_the_failing_path() -> None:
    """Issue 4 Build 2: args are checked against the export's schema → E_TOOL_INVALID_ARGS with the
    path."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    executor, _ = make(echo=schema)
    bad = execute(executor, "basic__echo", {"n": "1"})
    assert bad.error is not None and bad.error.code == "E_TOOL_INVALID_ARGS"
    assert "$.n: expected integer, got string" in bad.error.message
    assert execute(executor, "basic__echo", {}).error.message.endswith(
        "$.n: required property is missing"
    )  # type: ignore[union-attr]
    assert execute(executor, "basic__echo", {"n": 1}).ok


def test_non_json_output_is_an_error() -> None:
    """Issue 4 Build 2: handler output must be JSON (E_TOOL_OUTPUT)."""
    executor, _ = make()
    for name in ("basic__bad-output", "basic__nan-output"):
        result = execute(executor, name)
        assert result.error is not None and result.error.code == "E_TOOL_OUTPUT", name


def test_async_handler_timeout() -> None:
    """Issue 4 Build 2: per-call timeout (Tool spec.timeoutMs) → E_TOOL_TIMEOUT."""
    executor, _ = make(timeout_ms=30)
    result = execute(executor, "basic__hang")
    assert result.error is not None and result.error.code == "E_TOOL_TIMEOUT"
    assert "30 ms" in result.error.message


def test_sync_handler_timeout_does_not_block_the_loop() -> None:
    """Issue 4 Build 2: a blocking sync handler times out while its thread keeps running."""
    module = load_entry_module(TOOL_FIXTURES / "basic.py", cache=True)
    module.RELEASE.clear()
    executor, _ = make(timeout_ms=50)

    async def main() -> ToolCallResult:
        try:
            return await executor.execute(
                ToolCall("c", "basic__block", {}), catalog=["basic__block"], context=tool_context()
            )
        finally:
            module.RELEASE.set()  # let the worker thread finish so the loop can close

    result = run(main())
    assert module.STARTED.is_set()
    assert result.error is not None and result.error.code == "E_TOOL_TIMEOUT"


def test_default_timeout_is_120_seconds() -> None:
    """Issue 4 Build 2: timeoutMs defaults to 120 s."""
    executor, _ = make()
    assert executor.registry.get("basic__hang").timeout_ms == 120_000  # type: ignore[union-attr]


def test_cancellation_propagates() -> None:
    """execute() never raises, except asyncio.CancelledError (turn cancellation must work)."""
    executor, _ = make()

    async def main() -> None:
        task = asyncio.create_task(
            executor.execute(ToolCall("c", "basic__hang", {}), catalog=["basic__hang"],
                             context=tool_context())
        )
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())


def test_tool_failure_sets_code_and_suggestion() -> None:
    """seed 002 §10.1: a handler can report its own code, suggestion and helpUrl."""
    registry = ToolRegistry()

    def handler(ctx, input):  # type: ignore[no-untyped-def]
        raise ToolFailure("quota exceeded", code="E_QUOTA", suggestion="wait a minute",
                          help_url="https://example.test/quota")

    registry.register({"name": "api__call"}, handler, source=ToolSource("extension", "x"))
    result = execute(ToolExecutor(registry), "api__call")
    assert result.error is not None
    assert result.error.to_dict() == {
        "message": "quota exceeded", "code": "E_QUOTA", "name": "ToolFailure",
        "suggestion": "wait a minute", "helpUrl": "https://example.test/quota",
    }


def test_secrets_never_reach_error_results() -> None:
    """Project rule: secrets never appear in errors (tool errors go back to the model)."""
    register_secret("sk-test-SECRET-12345")
    executor, _ = make()
    result = execute(executor, "basic__fail", {"message": "bad key sk-test-SECRET-12345"})
    assert result.error is not None and "SECRET" not in result.error.message
    assert "***" in result.error.message


WHERE_TOOL = """
def show(ctx, input):
    message = ctx.message
    return {
        "workdir": str(ctx.workdir), "resolved": str(ctx.resolve_path(input.get("path", "a.txt"))),
        "messageId": message.id if message is not None else None,
        "messageCalls": [c.id for c in message.tool_calls] if message is not None else [],
        "toolCallId": ctx.tool_call_id, "traceId": ctx.trace_id, "turnId": ctx.turn_id,
    }


handlers = {"show": show}
"""


def test_tool_context_carries_workdir_message_and_ids(tmp_path: Path, state_root: Path) -> None:
    """seed 002 §2.5 rules 1, 2, 4 / §7.3, through a real turn: the handler's ``ctx`` has the
    Agent's workdir (relative paths resolve in it), the assistant message that holds the call
    (as stored in the conversation), the call's id, and the turn's trace and turn ids."""
    bundle = write_bundle(
        tmp_path / "b",
        script=["unused"],
        tools={"where": (WHERE_TOOL, ["show"])},
        agent_extra="  workdir: ./work\n",
    )
    (bundle / "work").mkdir()
    model = ScriptedModel([
        {"text": "looking", "toolCalls": [{"name": "where__show", "args": {}},
                                          {"name": "where__show", "args": {"path": "/etc/hosts"}}]},
        "done",
    ])

    async def main() -> tuple[Any, list[Message]]:
        async with Runtime.from_bundle(bundle, state_root=state_root, models={"a": model}) as rt:
            result = await rt.run_turn("a", "where am I?")
            return result, list((await rt.instance("a")).messages)

    result, messages = run(main())
    [assistant] = [m for m in messages if m.tool_calls]
    calls = [c.id for c in assistant.tool_calls]
    outputs = [
        part["output"]["value"] for m in messages if m.role == "tool" for part in m.data["content"]
    ]
    workdir = (bundle / "work").resolve()
    assert [Path(o["workdir"]).resolve() for o in outputs] == [workdir, workdir]
    assert [o["resolved"] for o in outputs] == [
        str(Path(outputs[0]["workdir"]) / "a.txt"),
        "/etc/hosts",
    ]
    assert [o["messageId"] for o in outputs] == [assistant.id] * 2
    assert [o["messageCalls"] for o in outputs] == [calls] * 2
    assert [o["toolCallId"] for o in outputs] == calls
    assert {(o["traceId"], o["turnId"]) for o in outputs} == {
        (result.metadata["traceId"], result.turn_id)
    }


def _single(handler: Any, *, timeout_ms: int = 120_000) -> ToolExecutor:
    registry = ToolRegistry()
    registry.register({"name": "one__run"}, handler, timeout_ms=timeout_ms)
    return ToolExecutor(registry)


def test_timeout_error_raised_by_the_handler_is_not_the_tool_timeout() -> None:
    """seed 002 §2.4 rule 1 / §10.3: a handler's own TimeoutError (e.g. a socket timeout) is an
    ordinary E_TOOL failure with its own message, not E_TOOL_TIMEOUT with the tool's limit."""

    async def connect(ctx: Any, input: Any) -> Any:
        raise TimeoutError("connect to db.internal timed out")

    def sync_connect(ctx: Any, input: Any) -> Any:
        raise TimeoutError("read timed out")

    for handler, text in (
        (connect, "connect to db.internal timed out"),
        (sync_connect, "read timed out"),
    ):
        result = execute(_single(handler), "one__run")
        assert result.error is not None
        assert result.error.code == "E_TOOL" and result.error.name == "TimeoutError"
        assert result.error.message == text


def test_output_is_detached_json_as_recorded() -> None:
    """seed 002 §10.2: the ok output is the JSON the conversation records, detached from the
    handler's objects (a handler mutating a value it returned cannot rewrite history)."""
    shared: dict[str, Any] = {"items": [1, 2], "pair": (3, 4)}

    def handler(ctx: Any, input: Any) -> Any:
        return shared

    result = execute(_single(handler), "one__run")
    assert result.ok and result.output == {"items": [1, 2], "pair": [3, 4]}
    shared["items"].append(99)
    assert result.output == {"items": [1, 2], "pair": [3, 4]}


def test_small_and_large_outputs_are_scrubbed_and_capped_alike() -> None:
    """Small outputs are finalised on the loop, large ones in a worker thread: same rules."""
    register_secret("sk-test-OUTPUT-98765")

    def leak(ctx: Any, args: Any) -> Any:
        return {"key": "sk-test-OUTPUT-98765", "bad": "x\udcff", "pad": "." * args["n"]}

    for n, capped in ((10, False), (20_000, False), (300_000, True)):
        registry = ToolRegistry()
        registry.register({"name": "leak__run"}, leak, source=ToolSource("extension", "x"))
        result = execute(ToolExecutor(registry), "leak__run", {"n": n})
        assert result.ok
        text = json.dumps(result.output, ensure_ascii=False)
        assert "OUTPUT-98765" not in text and "***" in text and "\ufffd" in text
        assert ("outputTruncated" in result.output) is capped


def test_sync_handlers_reuse_daemon_threads_and_a_stuck_one_keeps_only_its_own() -> None:
    import threading

    release = threading.Event()
    seen: list[threading.Thread] = []

    def record(ctx: Any, args: Any) -> None:
        seen.append(threading.current_thread())
        if args.get("block"):
            release.wait(30)

    registry = ToolRegistry()
    registry.register(
        {"name": "t__rec"}, record, source=ToolSource("extension", "x"), timeout_ms=200
    )
    executor = ToolExecutor(registry)
    try:
        for _ in range(3):
            assert execute(executor, "t__rec").ok
        assert all(t.daemon for t in seen)
        stuck = execute(executor, "t__rec", {"block": True})
        assert stuck.error is not None and stuck.error.code == "E_TOOL_TIMEOUT"
        assert execute(executor, "t__rec").ok  # not queued behind the stuck handler
        assert seen[-1] is not seen[-2]
    finally:
        release.set()
