"""Shared pieces of the provider acceptance tests (tests/llm/test_providers*.py).

A model is built exactly as the runtime builds one — ``create_model(ModelSpec(...),
retry_policy=...)`` — pointed at the fake provider server. The retry policy gets a recording
``sleep`` so retry counts and delays are asserted without waiting.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from goondan.llm.base import LanguageModel, ModelRequest, ModelResponse, ModelSpec, StreamDelta
from goondan.types import ToolCatalogItem
from tests.support.aio import run as run  # older imports of run from here
from tests.support.fake_provider import FakeProvider, Provider

PROVIDERS: tuple[Provider, ...] = ("openai", "anthropic", "google")
MODEL_NAMES: dict[str, str] = {
    "openai": "gpt-test",
    "anthropic": "claude-test",
    "google": "gemini-test",
}
# Long and distinctive, so any leak into an error text is unmistakable.
API_KEY = "sk-test-DO-NOT-LEAK-0123456789abcdef"
SYSTEM = "You are terse."
QUESTION = "What time is it in Seoul?"
CLOCK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"tz": {"type": "string", "description": "IANA time zone"}},
    "required": ["tz"],
}
TOOLS = [
    ToolCatalogItem("clock__now", "Current time in a time zone.", CLOCK_SCHEMA),
    ToolCatalogItem("fs__read", "Read a file.", {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
    }),
]
PARAMS: dict[str, Any] = {"temperature": 0.2, "maxTokens": 256, "topP": 0.9}


@dataclass
class SleepRecorder:
    """A ``RetryPolicy.sleep`` that records each delay and returns at once."""

    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


def make_model(
    fake: FakeProvider,
    provider: Provider,
    *,
    sleeps: SleepRecorder | None = None,
    max_retries: int = 2,
    api_key: str | None = API_KEY,
    timeout_ms: int | None = None,
    options: dict[str, Any] | None = None,
) -> LanguageModel:
    """``create_model`` for ``provider`` against the fake server, with a tiny retry policy."""
    from goondan.llm.http import RetryPolicy
    from goondan.llm.registry import create_model

    policy = RetryPolicy(
        max_retries=max_retries, base_delay=0.01, max_delay=0.04,
        sleep=sleeps or SleepRecorder(), random=lambda: 1.0,
    )
    spec = ModelSpec(
        provider=provider, model=MODEL_NAMES[provider], api_key=api_key,
        endpoint=fake.base_url(provider), options=dict(options or {}), timeout_ms=timeout_ms,
        name=f"{provider}-test",
    )
    return create_model(spec, retry_policy=policy)


def first_request(*, tools: bool = True, params: dict[str, Any] | None = None) -> ModelRequest:
    """The opening request of a turn: system prompt, one user message, the tool catalog."""
    return ModelRequest(
        messages=[{"role": "user", "content": QUESTION}],
        tools=list(TOOLS) if tools else [],
        system=SYSTEM,
        params=dict(PARAMS if params is None else params),
    )


def assistant_with_calls(
    calls: list[tuple[str, str, dict[str, Any]]], text: str = ""
) -> dict[str, Any]:
    """A canonical assistant message carrying tool-call parts ``(id, name, args)``."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    parts += [{"type": "tool-call", "toolCallId": cid, "toolName": name, "input": args}
              for cid, name, args in calls]
    return {"role": "assistant", "content": parts}


def tool_result(call_id: str, name: str, value: Any, *, error: bool = False) -> dict[str, Any]:
    """A canonical ``role: tool`` message with one tool-result part."""
    if error:
        output = {"type": "error-json", "value": value}
    else:
        output = {"type": "text" if isinstance(value, str) else "json", "value": value}
    return {"role": "tool", "content": [
        {"type": "tool-result", "toolCallId": call_id, "toolName": name, "output": output}]}


def round_trip_request(response: ModelResponse, results: list[Any]) -> ModelRequest:
    """The follow-up request after ``response``'s tool calls ran and returned ``results``."""
    calls = [(c.id, c.name, c.args) for c in response.tool_calls]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": QUESTION},
        assistant_with_calls(calls, response.text),
    ]
    messages += [
        tool_result(c.id, c.name, value)
        for c, value in zip(response.tool_calls, results, strict=True)
    ]
    return ModelRequest(messages=messages, tools=list(TOOLS), system=SYSTEM, params=dict(PARAMS))


def reassemble(deltas: list[StreamDelta]) -> tuple[str, list[tuple[str | None, str | None, Any]]]:
    """Text and ``(id, name, args)`` tool calls rebuilt from stream deltas, in arrival order."""
    text = "".join(d.text for d in deltas if d.kind == "text")
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        if delta.kind != "tool_call":
            continue
        call = calls.setdefault(delta.index, {"id": None, "name": None, "args": ""})
        call["id"] = delta.tool_call_id or call["id"]
        call["name"] = delta.tool_name or call["name"]
        call["args"] += delta.args_delta
    rebuilt = [
        (c["id"], c["name"], json.loads(c["args"]) if c["args"] else {}) for c in calls.values()
    ]
    return text, rebuilt


def lower_types(schema: Any) -> Any:
    """A JSON schema with every ``type`` lower-cased (Gemini accepts ``STRING`` and ``string``)."""
    if isinstance(schema, dict):
        return {k: (v.lower() if k == "type" and isinstance(v, str) else lower_types(v))
                for k, v in schema.items()}
    if isinstance(schema, list):
        return [lower_types(v) for v in schema]
    return schema


def text_of(content: Any) -> str:
    """Text of a wire ``content`` that may be a string or a list of text blocks/parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def assert_no_key(*texts: Any) -> None:
    """The API key appears in none of ``texts`` (messages, reprs, JSON dumps)."""
    for text in texts:
        rendered = text if isinstance(text, str) else json.dumps(text, default=str)
        assert API_KEY not in rendered, f"API key leaked into: {rendered[:200]}"
