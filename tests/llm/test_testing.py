"""ScriptedModel, FunctionModel, provider: scripted and the model-request guard."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import ConfigError, LlmError, LlmHttpError, LlmRateLimitError
from goondan.llm.base import ModelRequest, ModelResponse, ModelSpec, StreamDelta
from goondan.llm.testing import (
    FunctionModel,
    ModelRequestsForbiddenError,
    ScriptedModel,
    ScriptExhaustedError,
    ScriptStep,
    check_model_request,
    forbid_model_requests,
    last_user_text,
    model_requests_allowed,
    scripted_from_spec,
)
from goondan.types import TokenUsage, ToolCall
from tests.support.aio import run


def user(text: str) -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": text}])


def after_tool(text: str, output: Any, *, steps: int = 1) -> ModelRequest:
    """A request whose conversation is: user text, then ``steps`` assistant/tool rounds."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    for n in range(steps):
        messages.append({"role": "assistant", "content": [
            {"type": "tool-call", "toolCallId": f"c{n}", "toolName": "clock__now", "input": {}}]})
        messages.append({"role": "tool", "content": [
            {"type": "tool-result", "toolCallId": f"c{n}", "toolName": "clock__now",
             "output": {"type": "text" if isinstance(output, str) else "json", "value": output}}]})
    return ModelRequest(messages=messages)


# -- ScriptedModel -----------------------------------------------------------------------------


def test_text_items_reply_in_order_and_every_request_is_recorded() -> None:
    model = ScriptedModel(["one", "two"])
    first = run(model.generate(user("a")))
    second = run(model.generate(user("b")))
    assert (first.text, second.text) == ("one", "two")
    assert first.finish_reason == "stop" and first.tool_calls == []
    assert [last_user_text(r) for r in model.requests] == ["a", "b"]
    model.assert_complete()


def test_recorded_requests_are_snapshots_not_live_lists() -> None:
    model = ScriptedModel(["ok"])
    request = user("before")
    run(model.generate(request))
    request.messages[0]["content"] = "mutated later by the runtime"
    assert last_user_text(model.last_request) == "before"


def test_assert_complete_reports_unused_items() -> None:
    model = ScriptedModel(["used", "left over"])
    run(model.generate(user("x")))
    with pytest.raises(AssertionError, match="1 script item"):
        model.assert_complete()


def test_exhausted_script_is_a_clear_error() -> None:
    model = ScriptedModel(["only"])
    run(model.generate(user("x")))
    with pytest.raises(ScriptExhaustedError) as info:
        run(model.generate(user("y")))
    assert info.value.code == "E_LLM_SCRIPT_EXHAUSTED"
    assert info.value.suggestion and "loop" in info.value.suggestion
    assert isinstance(info.value, LlmError)


def test_loop_restarts_the_script() -> None:
    model = ScriptedModel(["a", "b"], loop=True)
    texts = [run(model.generate(user(str(i)))).text for i in range(5)]
    assert texts == ["a", "b", "a", "b", "a"]
    model.assert_complete()


def test_dict_item_with_tool_calls_usage_and_generated_ids() -> None:
    model = ScriptedModel([{
        "text": "checking",
        "toolCalls": [
            {"name": "clock__now", "args": {"tz": "UTC"}},
            {"name": "fs__read", "args": {"path": "a.txt"}, "id": "explicit"},
            {"name": "clock__now"},
        ],
        "usage": {"inputTokens": 12, "outputTokens": 3, "cachedTokens": 4},
    }])
    response = run(model.generate(user("what time")))
    assert response.text == "checking"
    run_id = response.tool_calls[0].id.split("_")[1]
    assert response.tool_calls == [
        ToolCall(f"call_{run_id}_1", "clock__now", {"tz": "UTC"}),
        ToolCall("explicit", "fs__read", {"path": "a.txt"}),
        ToolCall(f"call_{run_id}_2", "clock__now", {}),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage == TokenUsage(12, 3, 15, 4)
    assert response.model == "scripted"


def test_model_response_items_are_returned_as_copies() -> None:
    canned = ModelResponse(
        text="canned", tool_calls=[ToolCall("t1", "x__y", {"n": 1})], finish_reason="tool_calls"
    )
    model = ScriptedModel([canned, canned])
    first = run(model.generate(user("a")))
    first.tool_calls[0].args["n"] = 99
    second = run(model.generate(user("b")))
    assert second.tool_calls[0].args == {"n": 1} and second.text == "canned"


def test_exception_items_are_raised_and_the_script_moves_on() -> None:
    model = ScriptedModel([LlmRateLimitError("slow down", retry_after=1.0), "recovered"])
    with pytest.raises(LlmRateLimitError):
        run(model.generate(user("a")))
    assert run(model.generate(user("b"))).text == "recovered"
    model.assert_complete()


def test_callable_items_sync_and_async_see_the_request() -> None:
    async def later(request: ModelRequest) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"text": f"async {last_user_text(request)}"}

    model = ScriptedModel([lambda request: f"echo {last_user_text(request)}", later])
    assert run(model.generate(user("hi"))).text == "echo hi"
    assert run(model.generate(user("there"))).text == "async there"


def test_dict_error_member_raises_the_matching_error_class() -> None:
    model = ScriptedModel([
        {"error": {"code": "E_LLM_RATE_LIMIT", "message": "busy"}},
        {"error": {"code": "E_LLM_HTTP", "status": 503, "message": "down"}},
    ])
    with pytest.raises(LlmRateLimitError, match="busy"):
        run(model.generate(user("a")))
    with pytest.raises(LlmHttpError) as info:
        run(model.generate(user("b")))
    assert info.value.status == 503 and info.value.retryable


def test_unknown_dict_keys_are_rejected() -> None:
    model = ScriptedModel([{"txt": "typo"}])
    with pytest.raises(TypeError, match="unknown script item keys"):
        run(model.generate(user("a")))


# -- streaming ------------------------------------------------------------------------------------


def _reassemble(deltas: list[StreamDelta]) -> tuple[str, dict[int, dict[str, Any]]]:
    text = "".join(d.text for d in deltas if d.kind == "text")
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        if d.kind != "tool_call":
            continue
        call = calls.setdefault(d.index, {"id": None, "name": None, "args": ""})
        call["id"] = d.tool_call_id or call["id"]
        call["name"] = d.tool_name or call["name"]
        call["args"] += d.args_delta
    return text, calls


def test_streaming_emits_text_and_tool_call_deltas_and_the_same_final_response() -> None:
    item = {"text": "The time is near.", "toolCalls": [
        {"name": "clock__now", "args": {"tz": "Asia/Seoul"}, "id": "a"},
        {"name": "fs__read", "args": {"path": "x"}, "id": "b"},
    ]}
    deltas: list[StreamDelta] = []
    streamed = run(ScriptedModel([item]).generate(user("t"), stream=True, on_delta=deltas.append))
    plain = run(ScriptedModel([item]).generate(user("t")))
    assert streamed == plain
    text_deltas = [d for d in deltas if d.kind == "text"]
    assert len(text_deltas) > 1, "text should arrive in several chunks"
    text, calls = _reassemble(deltas)
    assert text == plain.text
    assert [(c["id"], c["name"], json.loads(c["args"])) for c in calls.values()] == [
        ("a", "clock__now", {"tz": "Asia/Seoul"}), ("b", "fs__read", {"path": "x"}),
    ]
    # text comes first, then the tool calls in order
    kinds = [d.kind for d in deltas]
    assert kinds == sorted(kinds, key=lambda k: k == "tool_call")


def test_streaming_awaits_async_callbacks() -> None:
    seen: list[str] = []

    async def on_delta(delta: StreamDelta) -> None:
        await asyncio.sleep(0)
        seen.append(delta.text)

    run(ScriptedModel(["abcdef"]).generate(user("x"), stream=True, on_delta=on_delta))
    assert "".join(seen) == "abcdef"


def test_delayed_item_can_be_cancelled_promptly() -> None:
    model = ScriptedModel([ScriptStep("too late", delay_s=30)])

    async def scenario() -> float:
        task = asyncio.create_task(model.generate(user("x")))
        deadline = time.monotonic() + 5
        while not model.requests:
            assert time.monotonic() < deadline, "the model was never called"
            await asyncio.sleep(0)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    assert run(scenario()) < 1.0
    assert model.responses == []


# -- rules ----------------------------------------------------------------------------------------


def test_rules_match_the_last_user_message_and_sequential_items_are_the_fallback() -> None:
    model = ScriptedModel([
        {"when": "(?i)hello", "text": "Hi!"},
        "fallback one",
        "fallback two",
    ])
    assert run(model.generate(user("HELLO there"))).text == "Hi!"
    assert run(model.generate(user("other"))).text == "fallback one"
    assert run(model.generate(user("hello again"))).text == "Hi!"  # rules are reusable
    assert run(model.generate(user("more"))).text == "fallback two"
    model.assert_complete()


def test_rule_steps_follow_the_tool_round_trip_with_placeholders() -> None:
    model = ScriptedModel([{
        "when": "time",
        "steps": [
            {"toolCalls": [{"name": "clock__now", "args": {}}]},
            {"text": "You asked '{{input}}'; it is {{toolResult}}."},
        ],
    }], loop=True)
    first = run(model.generate(user("what time is it")))
    assert [c.name for c in first.tool_calls] == ["clock__now"]
    second = run(model.generate(after_tool("what time is it", "12:00")))
    assert second.text == "You asked 'what time is it'; it is 12:00."
    assert second.tool_calls == []


def test_a_rule_past_its_last_step_falls_through() -> None:
    model = ScriptedModel([{"when": "time", "toolCalls": [{"name": "clock__now"}]}, "done"])
    assert run(model.generate(user("time?"))).tool_calls
    assert run(model.generate(after_tool("time?", {"iso": "x"}))).text == "done"


def test_json_tool_results_are_rendered_as_json_in_placeholders() -> None:
    model = ScriptedModel([{"when": "t", "steps": ["go", "got {{toolResult}}"]}])
    assert run(model.generate(after_tool("t", {"a": 1}))).text == 'got {"a": 1}'


def test_tool_result_fields_can_be_picked_in_placeholders() -> None:
    model = ScriptedModel(
        [
            {
                "when": "t",
                "steps": [
                    "go",
                    "{{toolResult.response}} / {{toolResult.meta.n}} "
                    "/ [{{toolResult.missing}}] / {{toolResult}}",
                ],
            }
        ]
    )
    output = {"response": "391", "meta": {"n": 2}}
    text = run(model.generate(after_tool("t", output))).text
    assert text == '391 / 2 / [] / {"response": "391", "meta": {"n": 2}}'


# -- FunctionModel ---------------------------------------------------------------------------------


def test_function_model_sync_async_and_raising() -> None:
    calls: list[int] = []

    def sync_fn(request: ModelRequest) -> Any:
        calls.append(len(request.messages))
        if last_user_text(request) == "boom":
            raise LlmHttpError("bad gateway", status=502)
        return {"toolCalls": [{"name": "x__y", "args": {"n": len(calls)}}]}

    model = FunctionModel(sync_fn)
    response = run(model.generate(user("go")))
    [call] = response.tool_calls
    assert re.fullmatch(r"call_[0-9a-f]{6}_1", call.id)
    assert (call.name, call.args) == ("x__y", {"n": 1})
    with pytest.raises(LlmHttpError):
        run(model.generate(user("boom")))
    assert len(model.requests) == 2 and repr(model).startswith("FunctionModel(model='sync_fn'")

    async def async_fn(request: ModelRequest) -> str:
        return last_user_text(request).upper()

    deltas: list[StreamDelta] = []
    out = run(FunctionModel(async_fn).generate(user("shout"), stream=True, on_delta=deltas.append))
    assert out.text == "SHOUT" and "".join(d.text for d in deltas) == "SHOUT"


# -- provider: scripted ----------------------------------------------------------------------------


def spec(options: dict[str, Any], name: str = "demo") -> ModelSpec:
    return ModelSpec(provider="scripted", model="demo-model", options=options, name=name)


def test_scripted_from_spec_inline_script_and_loop() -> None:
    model = scripted_from_spec(spec({"script": [
        {"text": "hello"}, "plain string", {"toolCalls": [{"name": "clock__now", "args": {}}]},
    ], "loop": True}))
    assert model.model == "demo-model" and model.loop
    replies = [run(model.generate(user(str(i)))) for i in range(4)]
    assert [r.text for r in replies] == ["hello", "plain string", "", "hello"]
    assert replies[2].tool_calls[0].name == "clock__now"


def test_scripted_from_spec_script_file_relative_to_the_bundle_root(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "demo.yaml").write_text(
        "- when: '(?i)weather'\n  text: Sunny.\n- text: Ask about the weather.\n", encoding="utf-8"
    )
    model = scripted_from_spec(spec({"scriptFile": "scripts/demo.yaml"}), tmp_path)
    assert run(model.generate(user("Weather today?"))).text == "Sunny."
    assert run(model.generate(user("hi"))).text == "Ask about the weather."
    with pytest.raises(ScriptExhaustedError, match="'demo'"):
        run(model.generate(user("again")))


def test_script_file_may_be_a_mapping_with_loop(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("loop: true\nscript:\n  - one\n", encoding="utf-8")
    model = scripted_from_spec(spec({"scriptFile": "s.yaml"}), tmp_path)
    assert [run(model.generate(user("x"))).text for _ in range(3)] == ["one"] * 3


def test_options_delay_ms_applies_to_every_reply() -> None:
    model = scripted_from_spec(spec({"script": ["x"], "delayMs": 250}))
    assert model.delay_s == 0.25


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"script": "not a list"}, "options.script must be a list"),
        ({"script": [{"txt": "typo"}]}, "unknown keys"),
        ({"script": [{"when": "(", "text": "x"}]}, "not a valid regex"),
        ({"script": [{"steps": ["a"]}]}, "'steps' without 'when'"),
        ({"script": [{"toolCalls": [{"args": {}}]}]}, "string 'name'"),
        ({"script": [{"text": "x", "finishReason": "done"}]}, "finishReason"),
        ({"script": [42]}, "must be a string or a mapping"),
        ({"script": [], "scriptFile": "x.yaml"}, "both script and scriptFile"),
        ({"scriptFile": "missing.yaml"}, "cannot read script file"),
        ({"script": [], "loop": "yes"}, "options.loop"),
        ({"script": [], "delayMs": -1}, "delayMs"),
    ],
)
def test_invalid_scripted_options_are_config_errors(
    options: dict[str, Any], fragment: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        scripted_from_spec(spec(options), tmp_path)
    assert info.value.code == "E_LLM_SCRIPT_INVALID"
    assert fragment in info.value.message and "Model/demo" in info.value.message
    assert info.value.suggestion


def test_invalid_yaml_script_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("- text: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        scripted_from_spec(spec({"scriptFile": "bad.yaml"}), tmp_path)


def test_registry_builds_the_scripted_provider(tmp_path: Path) -> None:
    registry = pytest.importorskip("goondan.llm.registry")
    model = registry.create_model(spec({"script": ["from the registry"]}))
    assert isinstance(model, ScriptedModel)
    assert run(model.generate(user("x"))).text == "from the registry"


# -- network guard ---------------------------------------------------------------------------------


def test_loopback_is_always_allowed_and_others_only_when_not_forbidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GOONDAN_ALLOW_MODEL_REQUESTS", raising=False)
    remote = "https://api.openai.com/v1/chat/completions"
    loopbacks = ["http://127.0.0.1:8080/v1", "http://localhost/v1", "http://[::1]:11434/v1"]
    assert model_requests_allowed(remote)
    with forbid_model_requests():
        assert not model_requests_allowed(remote)
        assert all(model_requests_allowed(url) for url in loopbacks)
        with pytest.raises(ModelRequestsForbiddenError) as info:
            check_model_request(remote)
        assert (
            info.value.code == "E_LLM_REQUESTS_FORBIDDEN" and "api.openai.com" in info.value.message
        )
        with forbid_model_requests(False):
            assert model_requests_allowed(remote)
        assert not model_requests_allowed(remote)
    assert model_requests_allowed(remote)
    check_model_request(remote)


def test_the_environment_variable_forbids_requests_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOONDAN_ALLOW_MODEL_REQUESTS", "0")
    assert not model_requests_allowed("https://generativelanguage.googleapis.com/v1beta")
    assert model_requests_allowed("http://127.0.0.1:1/v1beta")
