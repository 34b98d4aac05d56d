"""The seed's example extensions, end to end through turn → step → toolCall with a scripted model.

The fixtures in tests/fixtures/extensions are real extension modules (``register(api)``):
logging, compaction, tool filtering, argument truncation, skill injection and a ToolSearch-style
extension with persistent state (seed 000 §9, seed 003 "Real-World Extension Patterns").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message
from goondan.conversation.state import ConversationState
from goondan.extensions import ExtensionSet, load_extensions
from goondan.llm.testing import ScriptedModel
from goondan.pipeline.events import EventBus
from goondan.pipeline.registry import PipelineRegistry
from goondan.tools.registry import ToolRegistry
from tests.support.aio import run
from tests.support.pipeline_harness import (
    TOOL_FIXTURES,
    Binding,
    Export,
    FileStateStore,
    MiniTurnDriver,
    ext_binding,
)

CALC = Binding(
    name="calc", entry=TOOL_FIXTURES / "calc.py",
    exports=[
        Export("add", "Add two numbers", {"type": "object", "required": ["a", "b"],
                                          "properties": {"a": {"type": "number"},
                                                         "b": {"type": "number"}}}),
        Export("disabled-thing", "Never offered"),
    ],
)
BASH = Binding(name="basic", entry=TOOL_FIXTURES / "basic.py",
               exports=[Export("exec", "Run", {"type": "object", "properties": {
                   "command": {"type": "string"}}, "required": ["command"]})])


def build(bindings: list[Binding], script: list[Any], *, store: Any = None,
          state: ConversationState | None = None) -> tuple[MiniTurnDriver, ExtensionSet, list[str]]:
    pipeline, tools, bus = PipelineRegistry(), ToolRegistry(), EventBus()
    trace: list[str] = []
    bus.on("trace", trace.append)
    tools.load_bindings([CALC, BASH])
    ext = run(load_extensions(bindings, pipeline=pipeline, tools=tools, bus=bus,
                              state_store=store, agent_name="coder", instance_key="user-1"))
    driver = MiniTurnDriver(pipeline, tools, ScriptedModel(script), bindings=[CALC, BASH],
                            state=state or ConversationState())
    return driver, ext, trace


def onion(names: list[str], point: str, inner: list[str]) -> list[str]:
    """Expected trace of one chain: pre outer→inner, the inner work, post inner→outer."""
    return ([f"{n}.{point}.pre" for n in names] + inner
            + [f"{n}.{point}.post" for n in reversed(names)])


TWO_STEP_SCRIPT = [
    {"toolCalls": [{"name": "calc__add", "args": {"a": 1, "b": 2}},
                   {"name": "calc__add", "args": {"a": 3, "b": 4}}]},
    "The sums are 3 and 7.",
]


def test_three_extensions_nest_exactly_as_the_onion() -> None:
    """seed 000 §6.1 rules 1-2, §6.2 rules 1-2, §6.3, §12: turn ⊃ step ⊃ toolCall, first listed =
    outermost."""
    names = ["log-a", "log-b", "log-c"]
    bindings = [ext_binding(n, file="logging_ext") for n in names]
    driver, _, trace = build(bindings, TWO_STEP_SCRIPT)
    result = run(driver.run_turn("add please"))
    tool = onion(names, "tool:calc__add", [])
    expected = onion(names, "turn",
                     onion(names, "step0", tool + tool) + onion(names, "step1", []))
    assert trace == expected
    assert result.finish_reason == "text_response" and result.text == "The sums are 3 and 7."
    driver.model.assert_complete()


def test_priority_reorders_extension_layers() -> None:
    """seed 000 §6.2 rules 3 and 5: a lower priority moves an extension's middleware outwards."""
    bindings = [ext_binding("log-a", file="logging_ext"), ext_binding("log-b", file="logging_ext"),
                ext_binding("log-c", file="logging_ext", config={"priority": -1})]
    driver, _, trace = build(bindings, ["hello"])
    run(driver.run_turn("hi"))
    order = ["log-c", "log-a", "log-b"]
    assert trace == onion(order, "turn", onion(order, "step0", []))


def test_all_seed_patterns_together(tmp_path: Path) -> None:
    """seed 000 §9.1-9.6 / seed 003 patterns: compaction, filtering, arg truncation, skills, tool
    search."""
    eligible = [Message.user(f"old {i}", metadata={"compaction.eligible": True}) for i in range(25)]
    pinned = Message.user("keep me", metadata={"compaction.eligible": True, "pinned": True})
    bindings = [
        ext_binding("logging", file="logging_ext"),
        ext_binding("compaction", config={"maxMessages": 20}),
        ext_binding("tool-filter", file="tool_filter", config={"deny": ["disabled"]}),
        ext_binding("arg-truncation", file="arg_truncation",
                    config={"tool": "basic__exec", "maxLength": 5}),
        ext_binding("skills", config={"skills": {"py": "Use type hints."}}),
        ext_binding("tool-search", file="tool_search"),
    ]
    store = FileStateStore(tmp_path, "coder", "user-1")
    script = [
        {"toolCalls": [
            {"name": "basic__exec", "args": {"command": "echo hello world"}},
            {"name": "skills__open", "args": {"name": "py"}},
            {"name": "tool-search__search", "args": {"query": "calc"}},
            {"name": "calc__disabled-thing", "args": {}},
        ]},
        "done",
    ]
    driver, ext, _ = build(bindings, script, store=store,
                           state=ConversationState([*eligible, pinned]))
    result = run(driver.run_turn("go"))
    assert result.text == "done"
    first, second = driver.model.requests

    # tool filtering (§9.3 / §5.2): the disabled tool is never offered ...
    assert [t.name for t in first.tools] == [
        "calc__add", "basic__exec", "skills__list", "skills__open", "tool-search__search",
    ]
    # ... and calling it anyway is refused by the step-catalog check (seed 002 §2.3).
    refused = driver.state.next_messages[-3].data["content"][0]["output"]["value"]
    assert refused["code"] == "E_TOOL_NOT_IN_CATALOG"

    # compaction (§9.1): 25 eligible messages became one summary; the pinned one stays.
    texts = [m.text for m in driver.state.next_messages]
    assert not any(t.startswith("old ") for t in texts) and "keep me" in texts
    assert any(t.startswith("Summary of 25 earlier messages") for t in texts)

    # argument truncation (§9.4): the handler saw the cut command.
    assert driver.handler_args[0] == {"command": "echo "}

    # skill injection (§9.6): the opened skill's text reaches the next LLM call.
    assert {"role": "system", "content": "[skill py] Use type hints."} in second.messages

    # ToolSearch (§9.3): the selection, kept in api.state, narrows the next step's catalog.
    assert [t.name for t in second.tools] == ["calc__add", "tool-search__search"]
    assert ext.get("tool-search").state.snapshot() == {"selectedTools": ["calc__add"]}  # type: ignore[union-attr]

    # State is written at turn end only (seed 004 §13.4 rule 5) ...
    assert store.writes == []
    assert sorted(run(ext.flush_state())) == ["skills", "tool-search"]

    # ... survives a restart of the instance (rule 4) ...
    restarted, _, _ = build(bindings, ["ok"], store=FileStateStore(tmp_path, "coder", "user-1"))
    run(restarted.run_turn("again"))
    assert restarted.offered[0] == ["calc__add", "tool-search__search"]

    # ... and is never seen by another instance (rule 3).
    other, _, _ = build(bindings, ["ok"], store=FileStateStore(tmp_path, "coder", "user-2"))
    run(other.run_turn("hello"))
    assert "skills__open" in other.offered[0]
    assert not any("[skill py]" in str(m) for m in other.model.requests[0].messages)
