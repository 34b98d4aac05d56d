"""Bundles using the ``@goondan/base`` extensions, for tests/base/test_ext_*.py.

:func:`base_bundle` writes a bundle into a tmp dir: a Package depending on ``@goondan/base``,
a scripted Model (replaced by a ``ScriptedModel`` through ``Runtime.from_bundle(models=...)``),
a local ``calc`` tool (``calc__add``, ``calc__echo``), a Swarm and one Agent ``agent`` whose
``extensions`` are package-scoped refs to the base extensions, each with optional ref-level
``config``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message
from goondan.llm.base import ModelRequest
from goondan.types import ToolCall, ToolCallResult

CALC = '''
def add(ctx, input):
    return {"sum": input["a"] + input["b"]}


def echo(ctx, input):
    return str(input.get("text", ""))


handlers = {"add": add, "echo": echo}
'''

MANIFEST = """apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: base-ext-test
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "0.1.0"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: fake
spec:
  provider: scripted
  model: fake
  options:
    script: ["unused"]
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: calc
spec:
  entry: ./tools/calc.py
  exports:
    - name: add
      description: Add two numbers.
      parameters:
        type: object
        properties:
          a: {type: number}
          b: {type: number}
        required: [a, b]
    - name: echo
      description: Repeat a text.
      parameters:
        type: object
        properties:
          text: {type: string}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: agent
  agents: [agent]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: agent
spec:
  modelConfig:
    modelRef: Model/fake
  prompts:
    systemPrompt: You are a test agent.
  tools:
    - Tool/calc
  extensions:
"""


def base_bundle(root: Path, *extensions: tuple[str, dict[str, Any] | None]) -> Path:
    """Write the bundle; ``extensions`` are ``(name, ref-level config or None)`` in order."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "tools").mkdir(exist_ok=True)
    (root / "tools" / "calc.py").write_text(CALC, encoding="utf-8")
    lines = []
    for name, config in extensions:
        line = f'    - ref: {{kind: Extension, name: {name}, package: "@goondan/base"}}\n'
        if config is not None:
            line += f"      config: {json.dumps(config)}\n"
        lines.append(line)
    (root / "goondan.yaml").write_text(MANIFEST + "".join(lines), encoding="utf-8")
    return root


def call(tool: str, **args: Any) -> dict[str, Any]:
    """A scripted tool call."""
    return {"name": tool, "args": args}


def tool_exchange(index: int) -> list[Message]:
    """An assistant message with one ``calc__add`` call and its tool result (two messages)."""
    tool_call = ToolCall(f"call-{index}", "calc__add", {"a": index, "b": 1})
    return [
        Message.assistant(f"adding {index}", [tool_call]),
        Message.tool_result(ToolCallResult.success(tool_call.id, "calc__add", {"sum": index + 1})),
    ]


def texts(request: ModelRequest) -> list[str]:
    """The text of every message the model received (tool messages as ``result:<id>``)."""
    out = []
    for message in request.messages:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
            continue
        text = "".join(p.get("text", "") for p in content if p.get("type") == "text")
        results = [p["toolCallId"] for p in content if p.get("type") == "tool-result"]
        out.append(text or ",".join(f"result:{r}" for r in results))
    return out


def assert_tool_pairs_intact(messages: list[dict[str, Any]]) -> None:
    """Every tool call has its result later in ``messages`` and every result its call before."""
    calls: list[str] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            continue
        for part in content:
            if part.get("type") == "tool-call":
                calls.append(part["toolCallId"])
            elif part.get("type") == "tool-result":
                assert part["toolCallId"] in calls, f"result {part['toolCallId']} without its call"
    answered = {p["toolCallId"] for m in messages if not isinstance(m["content"], str)
                for p in m["content"] if p.get("type") == "tool-result"}
    assert set(calls) <= answered, f"calls without results: {set(calls) - answered}"
