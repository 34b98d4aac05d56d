"""The @goondan/base resources bundles written for the reference use: ``context-message``,
``required-tools-guard``, ``inter-agent-response-format``, tools ``wait`` and ``self-restart``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goondan.conversation.messages import Message, MessageEvent
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from goondan.tools import load_entry_module
from tests.support.aio import run
from tests.support.base_extensions import base_bundle, call, texts
from tests.support.runtime_harness import base_records

BASE = Path(__file__).resolve().parents[2] / "goondan" / "builtin_packages" / "@goondan" / "base"


def one_turn(bundle: Path, state_root: Path, model: ScriptedModel, text: str = "go",
             history: list[Message] | None = None) -> tuple[Any, list[dict[str, Any]]]:
    async def main() -> tuple[Any, list[dict[str, Any]]]:
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"agent": model}
        ) as rt:
            instance = await rt.instance("agent")
            if history:
                await instance.apply_message_events([MessageEvent.append(m) for m in history])
            result = await rt.run_turn("agent", text)
            return result, base_records(instance)

    return run(main())


def test_context_message_appends_inbound_context_once_and_keeps_the_agent_prompt(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = base_bundle(tmp_path / "b", ("context-message", {"includeInboundContext": True,
                                                              "includeRouteSummary": True}))
    model = ScriptedModel(["one"])
    result, records = one_turn(bundle, state_root, model)
    assert result.finish_reason == "text_response"
    request = model.requests[0]
    assert request.system == "You are a test agent."  # the core still sends the Agent's prompt
    system = [m for m in request.messages if m["role"] == "system"]
    assert len(system) == 1
    content = system[0]["content"]
    assert content.startswith("[runtime_inbound]\neventId=") and "[runtime_route]" in content
    assert "senderKind=" in content
    stored = [r for r in records if r["data"]["role"] == "system"]
    assert stored[0]["source"] == {"type": "extension", "extensionName": "context-message"}
    marker = stored[0]["metadata"]["__goondanContextMessage"]
    assert marker["segmentIds"] == ["runtime.inbound", "runtime.route.summary"]


def test_context_message_dedupes_and_can_drop_the_agent_prompt(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = base_bundle(tmp_path / "b", ("context-message", {"includeAgentPrompt": False,
                                                              "includeSwarmCatalog": True}))

    async def main() -> tuple[ScriptedModel, list[dict[str, Any]]]:
        model = ScriptedModel(["one", "two"])
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"agent": model}
        ) as rt:
            instance = await rt.instance("agent")
            await rt.run_turn("agent", "a")
            await rt.run_turn("agent", "b")
            return model, base_records(instance)

    model, records = run(main())
    assert all(r.system is None for r in model.requests)
    catalog = [r for r in records if r["data"]["role"] == "system"]
    assert len(catalog) == 1  # the second turn finds the same content (same hash) and skips it
    lines = catalog[0]["data"]["content"].splitlines()
    assert lines[:4] == [
        "[runtime_catalog]",
        "swarm=default",
        "entryAgent=agent",
        "selfAgent=agent",
    ]
    assert lines[-1].startswith("Use callableAgents above")


def test_required_tools_guard_asks_again_until_the_tool_ran(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = base_bundle(
        tmp_path / "b",
        (
            "required-tools-guard",
            {"requiredTools": ["calc__add"], "errorMessage": "call calc__add!"},
        ),
    )
    model = ScriptedModel(["lazy answer", {"toolCalls": [call("calc__add", a=1, b=2)]}, "done"])
    result, records = one_turn(bundle, state_root, model)
    assert result.finish_reason == "text_response" and result.text == "done"
    assert texts(model.requests[1])[-1] == "call calc__add!"
    reminder = next(r for r in records if r["data"].get("content") == "call calc__add!")
    assert reminder["source"] == {"type": "extension", "extensionName": "required-tools-guard"}
    # Satisfied in this turn: the next turn starts from scratch and is asked again.
    model2 = ScriptedModel(["again lazy", {"toolCalls": [call("calc__add", a=1, b=1)]}, "ok"])
    result2, _ = one_turn(bundle, state_root, model2, text="next")
    assert result2.text == "ok" and len(model2.requests) == 3


def test_required_tools_guard_without_tools_does_nothing(tmp_path: Path, state_root: Path) -> None:
    bundle = base_bundle(tmp_path / "b", ("required-tools-guard", None))
    model = ScriptedModel(["fine"])
    result, _ = one_turn(bundle, state_root, model)
    assert result.text == "fine" and len(model.requests) == 1


def test_inter_agent_response_format_rewrites_marked_messages(
    tmp_path: Path, state_root: Path
) -> None:
    meta = {"kind": "inter_agent_response", "version": 1, "requestId": "r1", "requestEventId": "e1",
            "fromAgentId": "worker", "toAgentId": "agent", "async": True, "status": "ok",
            "receivedAt": "2026-01-01T00:00:00Z", "requestMetadata": {"task": "x"}}
    answered = Message.create(
        "user",
        [{"type": "text", "text": "raw"}],
        source=Message.user("x").source,
        metadata={"__goondanInterAgentResponse": meta},
    )
    answered.data["content"] = {"response": {"value": 42}}  # the reference's content shape
    failed = Message.user("raw", metadata={"__goondanInterAgentResponse": {
        **meta, "requestId": "r2", "status": "error", "errorCode": "E_X", "errorMessage": "boom"}})
    plain = Message.user("untouched", metadata={"__goondanInterAgentResponse": {"kind": "other"}})
    bundle = base_bundle(
        tmp_path / "b", ("inter-agent-response-format", {"includeRequestMetadata": True})
    )
    model = ScriptedModel(["seen"])
    _, records = one_turn(bundle, state_root, model, history=[answered, failed, plain])
    sent = texts(model.requests[0])
    assert sent[0] == ('[inter-agent response] worker -> agent status=ok requestId=r1\n'
                       '{\n  "value": 42\n}\nrequestMetadata={\n  "task": "x"\n}')
    assert sent[1].endswith("error(E_X): boom\nrequestMetadata={\n  \"task\": \"x\"\n}")
    assert sent[2] == "untouched"
    first = records[0]
    assert (
        first["id"] == answered.id
        and first["metadata"]["__goondanInterAgentResponseFormatted"] is True
    )
    assert first["source"] == {"type": "extension", "extensionName": "inter-agent-response-format"}


def test_wait_and_self_restart_tools(tmp_path: Path) -> None:
    wait = load_entry_module(BASE / "tools" / "wait.py").handlers["seconds"]
    restart = load_entry_module(BASE / "tools" / "self_restart.py").handlers["request"]
    assert run(wait(None, {"seconds": 0})) == {"waitedSeconds": 0, "waitedMs": 0}
    assert run(wait(None, {"seconds": 0.01})) == {"waitedSeconds": 0.01, "waitedMs": 10}
    for bad in (-1, 301, "1", True, float("nan")):
        try:
            run(wait(None, {"seconds": bad}))
        except Exception as exc:  # ToolFailure
            assert getattr(exc, "code", None) == "E_TOOL_INVALID_ARGS"
        else:
            raise AssertionError(f"accepted {bad!r}")
    assert run(restart(None, {})) == {"ok": True, "restartRequested": True,
                                      "restartReason": "tool:self-restart"}
    assert run(restart(None, {"reason": "  reload  "}))["restartReason"] == "reload"


def test_a_restart_request_reaches_the_turn_result(tmp_path: Path, state_root: Path) -> None:
    bundle = base_bundle(tmp_path / "b", ("logging", None))
    text = (bundle / "goondan.yaml").read_text()
    text = text.replace(
        "  tools:\n    - Tool/calc\n",
        "  tools:\n    - Tool/calc\n    - ref: {kind: Tool, "
        'name: self-restart, package: "@goondan/base"}\n',
    )
    (bundle / "goondan.yaml").write_text(text)
    model = ScriptedModel(
        [{"toolCalls": [call("self-restart__request", reason="new prompt")]}, "bye"]
    )
    result, _ = one_turn(bundle, state_root, model)
    assert result.metadata["restartRequested"] is True
    assert result.metadata["restartReason"] == "new prompt"
