"""Hostile input: random bytes (invalid UTF-8 included) as user input, tool output and provider
text through a real turn; a second, plain turn must then succeed (docs/security.md).

Bytes reach goondan as Python strings the way the operating system hands them over: decoded
with ``surrogateescape`` (argv, stdin under the C locale, file names), so every invalid byte is
a lone surrogate. Provider text additionally gets raw surrogate code points, which is what a
``"\\udcff"`` JSON escape decodes to. Every model request must be encodable as UTF-8 JSON (the
provider wire), and every stored line must be valid UTF-8 JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goondan.llm.base import ModelRequest
from goondan.llm.testing import FunctionModel
from goondan.runtime import Runtime
from tests.support.hostile import write_bundle

EXAMPLES = 1000
KEYS = 25  # conversations reused round-robin: a few open stores, short histories

TOOL = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: fuzz
spec:
  entry: ./fuzz_tool.py
  exports:
    - name: emit
      parameters:
        type: object
        properties: {hex: {type: string}}
"""

TOOL_MODULE = """\
import os


def emit(ctx, args):
    # Raw bytes as the OS would hand them to a tool (file names, command output).
    data = os.fsdecode(bytes.fromhex(args["hex"]))
    return {"name": data, "lines": [data, data[::-1]]}


handlers = {"emit": emit}
"""

surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
raw_text = st.one_of(
    st.binary(max_size=96).map(os.fsdecode),
    st.text(alphabet=st.one_of(surrogates, st.characters()), max_size=48),
)


def test_random_bytes_through_a_turn_then_a_plain_turn(tmp_path: Path, state_root: Path) -> None:
    bundle = write_bundle(tmp_path, tools="    - ref: {kind: Tool, name: fuzz}\n", extra_docs=TOOL)
    (bundle / "fuzz_tool.py").write_text(TOOL_MODULE, encoding="utf-8")
    current: dict[str, Any] = {}

    def reply(request: ModelRequest) -> Any:
        # What every provider adapter does with the history: it must be UTF-8 JSON.
        json.dumps(request.messages, ensure_ascii=False).encode("utf-8")
        last = request.messages[-1]
        if last["role"] == "user" and last["content"] == "plain":
            return "done"
        if last["role"] == "user":
            return {"toolCalls": [{"name": "fuzz__emit", "args": {"hex": current["tool"].hex()}}]}
        return {"text": current["provider"] or "-"}

    async def example(rt: Runtime, key: str) -> None:
        first = await rt.run_turn("main", "u:" + current["user"], instance_key=key)
        assert first.error is None, first.error
        second = await rt.run_turn("main", "plain", instance_key=key)
        assert second.error is None and second.text == "done", second.error

    with asyncio.Runner() as runner:
        rt = Runtime.from_bundle(
            bundle, state_root=state_root, models={"main": FunctionModel(reply)}
        )
        count = 0

        @settings(max_examples=EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(user=raw_text, tool=st.binary(max_size=96), provider=raw_text)
        def check(user: str, tool: bytes, provider: str) -> None:
            nonlocal count
            current.update(user=user, tool=tool, provider=provider)
            runner.run(example(rt, f"fuzz-{count % KEYS}"))
            count += 1

        try:
            check()
        finally:
            runner.run(rt.aclose())
    assert count >= EXAMPLES
    stored = sorted(state_root.rglob("*.jsonl"))
    assert stored
    for path in stored:
        for line in path.read_bytes().splitlines():
            record = json.loads(line.decode("utf-8"))
            json.dumps(record, ensure_ascii=False).encode("utf-8")


escape = st.integers(min_value=0, max_value=0xFFFF).map(lambda cp: f"\\u{cp:04x}")
plain = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=8).map(
    lambda s: json.dumps(s, ensure_ascii=False)[1:-1])
json_literal = st.lists(st.one_of(escape, plain), max_size=12).map(
    lambda parts: '"' + "".join(parts) + '"'
)


def test_random_json_escapes_from_a_provider_over_http(tmp_path: Path, state_root: Path) -> None:
    """Provider text with random ``\\uXXXX`` escapes (lone surrogates included) through the real
    OpenAI adapter and the fake server, streamed and not; the next request must go out."""
    from tests.support.fake_provider import FakeProvider, FakeReply
    from tests.support.hostile import completion_body, openai_factory

    bundle = write_bundle(tmp_path, tools="    []\n")
    with FakeProvider() as server, asyncio.Runner() as runner:
        count = 0
        runtimes = {stream: Runtime.from_bundle(bundle, state_root=state_root, stream=stream,
                                                model_factory=openai_factory(server))
                    for stream in (False, True)}

        async def example(literal: str, stream: bool) -> None:
            if stream:
                chunk = (
                    'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                    '"choices":[{"index":0,"delta":{"content":'
                    + literal
                    + '},"finish_reason":null}]}\n\n'
                )
                stop = ('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
                        '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
                server.enqueue(FakeReply(raw_events=[chunk, stop, "data: [DONE]\n\n"]))
            else:
                server.enqueue(FakeReply.malformed(completion_body(literal)))
            if not json.loads(literal).strip():
                # An empty or blank reply is asked again once (docs/models.md): answer that.
                server.enqueue(FakeReply.reply("re-asked"))
            server.enqueue(FakeReply.reply("done"))
            rt = runtimes[stream]
            key = f"http-{stream}-{count % 10}"
            first = await rt.run_turn("main", "go", instance_key=key)
            assert first.error is None, first.error
            second = await rt.run_turn("main", "plain", instance_key=key)
            assert second.error is None and second.text == "done", second.error

        @settings(
            max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(literal=json_literal, stream=st.booleans())
        def check(literal: str, stream: bool) -> None:
            nonlocal count
            runner.run(example(literal, stream))
            count += 1

        try:
            check()
        finally:
            for rt in runtimes.values():
                runner.run(rt.aclose())
    # Every request body the fake server received was valid UTF-8 JSON (it parsed them all).
    assert all(r.json is not None for r in server.requests)
