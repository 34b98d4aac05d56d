"""Agent-to-agent calls inside the embedding ``Runtime`` (in-process router, no processes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from goondan.commands.trace import load_spans
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from tests.support.aio import run

REPO = Path(__file__).resolve().parents[2]
DELEGATION = REPO / "examples" / "delegation"

ASK_EXTENSION = '''
async def _turn(ctx):
    answer = None
    if "middleware" in (ctx.input_event.input or ""):
        answer = await ctx.agents.request("worker", "Compute 17 * 23.", timeout_ms=5000)
    result = await ctx.next()
    if answer is not None:
        result.metadata["workerAnswer"] = answer["response"]
    return result


def register(api):
    api.pipeline.register("turn", _turn)
'''


def bundle_with_calling_worker(tmp_path: Path) -> Path:
    """examples/delegation where the worker may call agents too and the coordinator has a
    turn middleware using ``ctx.agents``."""
    bundle = tmp_path / "delegation"
    shutil.copytree(DELEGATION, bundle)
    (bundle / "ask.py").write_text(ASK_EXTENSION)
    text = (bundle / "goondan.yaml").read_text()
    text = text.replace(
        "    systemPrompt: You are a careful calculator. Answer with the result only.\n",
        "    systemPrompt: You are a careful calculator. Answer with the result only.\n"
        "  tools:\n    - ref: {kind: Tool, name: agents, package: \"@goondan/base\"}\n",
    )
    text = text.replace(
        "  tools:\n    - ref: {kind: Tool, name: agents, package: \"@goondan/base\"}\n---\n"
        "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: worker",
        "  tools:\n    - ref: {kind: Tool, name: agents, package: \"@goondan/base\"}\n"
        "  extensions:\n    - ref: Extension/ask\n---\n"
        "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: worker",
    )
    text += (
        "---\napiVersion: goondan.ai/v1\nkind: Extension\nmetadata:\n  name: ask\n"
        "spec:\n  entry: ./ask.py\n"
    )
    (bundle / "goondan.yaml").write_text(text)
    return bundle


def test_delegation_runs_in_process_with_separate_instances(state_root: Path) -> None:
    async def main() -> None:
        async with Runtime.from_bundle(DELEGATION, state_root=state_root) as rt:
            events: list[dict[str, Any]] = []
            rt.subscribe(events.append)
            result = await rt.run_turn("coordinator", "What is 17 * 23?", instance_key="k1")
            assert result.finish_reason == "text_response", result.error
            assert result.text == "The worker says: 17 * 23 = 391"
            coordinator = await rt.instance("coordinator", "k1")
            [tool_message] = [m for m in coordinator.messages if m.role == "tool"]
            payload = tool_message.data["content"][0]["output"]["value"]
            assert payload["target"] == "worker" and payload["response"] == "17 * 23 = 391"
            worker = await rt.instance("worker", "k1")
            assert coordinator is not worker and coordinator.store is not worker.store
            assert set(rt.router.instances) == {("coordinator", "k1"), ("worker", "k1")}
            request = worker.messages[0]
            assert "Compute 17 * 23." in request.text
            # one trace: the worker's turn descends from the coordinator's turn span, through
            # the step and the agents__request tool call that asked (docs/observability.md)
            started = [e for e in events if e["type"] == "turn.started"]
            assert [e["agentName"] for e in started] == ["coordinator", "worker"]
            assert started[0]["traceId"] == started[1]["traceId"]
        bases = sorted(state_root.glob("workspaces/*/instances/*/messages/base.jsonl"))
        assert len(bases) == 2 and any("391" in p.read_text() for p in bases)
        spans = {s.span_id: s for s in load_spans(state_root)}
        worker_turn = next(
            s for s in spans.values() if s.kind == "turn" and s.agent_name == "worker"
        )
        chain = []
        parent = worker_turn.parent_span_id
        while parent is not None:
            chain.append((spans[parent].kind, spans[parent].name))
            parent = spans[parent].parent_span_id
        assert chain == [("agentCall", "request worker"), ("toolCall", "agents__request"),
                         ("step", "step 0"), ("turn", "turn coordinator")]
        assert spans[worker_turn.parent_span_id or ""].trace_id == worker_turn.trace_id

    run(main())


def test_ctx_agents_in_middleware_and_tool_share_the_worker(
    state_root: Path, tmp_path: Path
) -> None:
    bundle = bundle_with_calling_worker(tmp_path)
    worker = ScriptedModel(["from worker"], loop=True)
    coordinator = ScriptedModel(["done"], loop=True)

    async def main() -> None:
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"coordinator": coordinator, "worker": worker}
        ) as rt:
            result = await rt.run_turn(None, "ask through middleware")
            assert result.text == "done" and result.metadata["workerAnswer"] == "from worker"
            instance = await rt.instance("worker")
            seen = instance.messages[0]
            assert "ask through" not in seen.text and "Compute 17 * 23." in seen.text

    run(main())


def test_cycle_is_refused_in_process_with_the_chain(state_root: Path, tmp_path: Path) -> None:
    bundle = bundle_with_calling_worker(tmp_path)
    coordinator = ScriptedModel(
        [
            {
                "toolCalls": [
                    {"name": "agents__request", "args": {"target": "worker", "input": "please"}}
                ]
            },
            "coordinator saw: {{toolResult}}",
        ]
    )
    # The worker asks the coordinator back (A → B → A) and reports the tool result.
    worker = ScriptedModel(
        [
            {
                "toolCalls": [
                    {"name": "agents__request", "args": {"target": "coordinator", "input": "back?"}}
                ]
            },
            "worker saw: {{toolResult}}",
        ]
    )

    async def main() -> None:
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"coordinator": coordinator, "worker": worker}
        ) as rt:
            result = await asyncio_timeout(rt.run_turn(None, "start", instance_key="cyc"), 20)
            assert result.finish_reason == "text_response", result.error
            assert "E_AGENT_CYCLE" in result.text
            assert "coordinator@cyc → worker@cyc → coordinator@cyc" in result.text
        coordinator.assert_complete()
        worker.assert_complete()

    run(main())


def test_depth_limit_applies_in_process(state_root: Path, tmp_path: Path) -> None:
    bundle = bundle_with_calling_worker(tmp_path)
    coordinator = ScriptedModel([
        {"toolCalls": [{"name": "agents__request", "args": {"target": "worker", "input": "go"}}]},
        "{{toolResult}}",
    ])
    worker = ScriptedModel(
        [
            {
                "toolCalls": [
                    {
                        "name": "agents__request",
                        "args": {
                            "target": "coordinator",
                            "input": "deeper",
                            "instanceKey": "other",
                        },
                    }
                ]
            },
            "worker saw: {{toolResult}}",
        ]
    )

    async def main() -> None:
        async with Runtime.from_bundle(
            bundle, state_root=state_root, models={"coordinator": coordinator, "worker": worker},
            max_agent_depth=2,
        ) as rt:
            result = await rt.run_turn(None, "start", instance_key="d")
            assert "E_AGENT_DEPTH" in result.text and "maximum of 2" in result.text
            assert ("coordinator", "other") not in rt.router.instances

    run(main())


async def asyncio_timeout(coro: Any, seconds: float) -> Any:
    import asyncio

    async with asyncio.timeout(seconds):
        return await coro


def test_repl_delegates_in_process(state_root: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "goondan", "--state-root", str(state_root), "repl",
         "--bundle", str(DELEGATION), "--input", "What is 17 * 23?"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The worker says: 17 * 23 = 391"
    assert "E_AGENT_UNAVAILABLE" not in result.stdout
    assert not (state_root / "runtime").exists()  # no orchestrator, no process records


def test_an_agent_request_is_an_agent_call_span_for_the_caller_s_sinks(state_root: Path) -> None:
    from goondan.runtime.events import AgentAnswered, AgentRequested, RuntimeEvent
    from goondan.runtime.observe import EventSink

    class Recorder(EventSink):
        def __init__(self) -> None:
            self.events: list[RuntimeEvent] = []

        def on_span_start(self, event: RuntimeEvent) -> None:
            self.events.append(event)

        def on_span_end(self, event: RuntimeEvent) -> None:
            self.events.append(event)

    async def main() -> Recorder:
        async with Runtime.from_bundle(DELEGATION, state_root=state_root) as rt:
            coordinator = await rt.instance("coordinator", "k1")
            recorder = Recorder()
            coordinator.observer.add_sink(recorder)
            payloads: list[dict[str, Any]] = []
            coordinator.subscribe(payloads.append)
            result = await rt.run_turn("coordinator", "What is 17 * 23?", instance_key="k1")
            assert result.finish_reason == "text_response", result.error
            assert not [p for p in payloads if p["type"].startswith("agent.")]  # sinks only
            return recorder

    events = run(main()).events
    [asked] = [e for e in events if isinstance(e, AgentRequested)]
    [answered] = [e for e in events if isinstance(e, AgentAnswered)]
    turn = next(e for e in events if e.type == "turn.started")
    # the request's parent is the agents__request tool call that made it (one tree per trace)
    tool = next(e for e in events if e.type == "tool.called")
    assert getattr(tool, "tool_name", None) == "agents__request"
    assert asked.target == "worker" and asked.parent_span_id == tool.span_id
    assert answered.span_id == asked.span_id and answered.type == "agent.answered"
    assert answered.correlation_id and answered.trace_id == turn.trace_id
