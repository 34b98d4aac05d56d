"""The spec's loose ends for extensions and middleware (docs/extensions.md, docs/conformance.md).

* step middleware can ask for a bounded retry of the step (``RetryStep``), never via a
  second ``next()``;
* extension state belongs to the Extension's identity (package + name);
* an exception raised inside middleware names the extension and carries a suggestion;
* a fire-and-forget ``send`` does not carry the call stack (no false ``E_AGENT_CYCLE``);
* ``api.state.set(x)`` without ``await`` still stores the value;
* ``register(type, fn, {"priority": n})`` works like ``priority=n``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import AgentError, PipelineError
from goondan.llm.testing import ScriptedModel
from goondan.pipeline import PipelineRegistry, RetryStep, StepContext, StepResult
from goondan.runtime import Runtime
from goondan.runtime.agents import CALL_STACK_KEY, HOPS_KEY, AgentCallApi
from goondan.types import AgentEvent, ToolCatalogItem
from tests.ipc.test_agents import CATALOG, router
from tests.support.aio import run
from tests.support.hostile_bundles import write_bundle
from tests.support.pipeline_harness import step_ctx

RETRY_ON_ERROR = """
from goondan.pipeline import RetryStep

async def register(api):
    async def step(ctx):
        try:
            return await ctx.next()
        except RuntimeError as exc:
            retry = ctx.metadata.get("goondan.stepRetry", {}).get("attempt", 0)
            api.logger.warning("retrying after %s (attempt %s)", exc, retry)
            raise api.pipeline.RetryStep(f"provider said: {exc}", max_retries=2) from exc
    api.pipeline.register("step", step, {"priority": 5})
"""


def _run_turns(bundle: Path, state_root: Path, model: ScriptedModel, *texts: str) -> list[Any]:
    async def main() -> list[Any]:
        async with Runtime.from_bundle(bundle, state_root=state_root, models={"a": model}) as rt:
            return [await rt.run_turn("a", text) for text in texts]
    return run(main())


# -- RetryStep ---------------------------------------------------------------------------------
def test_step_middleware_retries_the_step_with_retrystep(tmp_path: Path, state_root: Path) -> None:
    bundle = write_bundle(tmp_path / "b", script=["x"], extensions={"retry": RETRY_ON_ERROR})
    model = ScriptedModel([RuntimeError("503 busy"), RuntimeError("503 busy"), "finally"])
    [result] = _run_turns(bundle, state_root, model, "hi")
    assert result.finish_reason == "text_response" and result.text == "finally"
    assert len(model.requests) == 3  # one step, three attempts (the retries are not new steps)


def test_retry_is_bounded_and_names_the_last_error(tmp_path: Path, state_root: Path) -> None:
    bundle = write_bundle(tmp_path / "b", script=["x"], extensions={"retry": RETRY_ON_ERROR})
    model = ScriptedModel([RuntimeError("503 busy")] * 5)
    [result] = _run_turns(bundle, state_root, model, "hi")
    assert result.finish_reason == "error"
    assert result.error["code"] == "E_PIPELINE_RETRY_LIMIT"
    assert "503 busy" in result.error["message"] and result.error.get("suggestion")
    assert len(model.requests) == 3  # the first attempt + max_retries=2


def test_retry_resets_the_catalog_and_keeps_metadata() -> None:
    registry = PipelineRegistry()
    seen: list[tuple[int, list[str]]] = []

    async def narrowing(ctx: StepContext) -> StepResult:
        attempt = ctx.metadata.get("goondan.stepRetry", {}).get("attempt", 0)
        seen.append((attempt, [t.name for t in ctx.tool_catalog]))
        ctx.tool_catalog = ctx.tool_catalog[:1]
        ctx.metadata["mine"] = ctx.metadata.get("mine", 0) + 1
        result = await ctx.next()
        if attempt == 0:
            raise RetryStep("again")
        return result

    registry.register("step", narrowing)

    async def core(ctx: StepContext) -> StepResult:
        return StepResult("completed", False, metadata={"catalog": len(ctx.tool_catalog)})

    ctx = step_ctx(tool_catalog=[ToolCatalogItem.coerce({"name": f"t__{n}", "description": n})
                                 for n in ("a", "b")])
    full = [t.name for t in ctx.tool_catalog]
    result = run(registry.run_step(ctx, core))
    assert [s[1] for s in seen] == [full, full] and [s[0] for s in seen] == [0, 1]
    assert ctx.metadata["mine"] == 2 and result.metadata["catalog"] == 1


def test_retrystep_outside_step_middleware_is_a_clear_error(
    tmp_path: Path, state_root: Path
) -> None:
    source = """
from goondan.pipeline import RetryStep

async def register(api):
    async def tool_call(ctx):
        raise RetryStep("not here")
    api.pipeline.register("toolCall", tool_call)
"""
    tool = ("handlers = {'go': lambda ctx, input: 'went'}\n", ["go"])
    bundle = write_bundle(
        tmp_path / "b", script=["x"], extensions={"bad": source}, tools={"t": tool}
    )
    model = ScriptedModel([{"toolCalls": [{"name": "t__go", "args": {}}]}, "done"])
    [result] = _run_turns(bundle, state_root, model, "hi")
    assert result.error is not None and result.error["code"] == "E_PIPELINE_RETRY_MISUSE"


# -- registration options ------------------------------------------------------------------------
def test_register_accepts_the_options_form() -> None:
    registry = PipelineRegistry()

    async def a(ctx: Any) -> Any:
        return await ctx.next()

    async def b(ctx: Any) -> Any:
        return await ctx.next()

    registry.register("step", a, {"priority": 5})
    registry.register("step", b, priority=-1)
    assert [e.fn for e in registry.entries("step")] == [b, a]
    with pytest.raises(PipelineError) as info:
        registry.register("step", a, {"priority": 1, "order": 2})
    assert info.value.code == "E_PIPELINE_MIDDLEWARE" and "order" in info.value.message
    with pytest.raises(PipelineError):
        registry.register("step", a, {"priority": 1}, priority=2)
    with pytest.raises(PipelineError):
        registry.register("step", a, {"priority": "high"})


# -- errors inside middleware --------------------------------------------------------------------
def test_middleware_exception_names_the_extension_and_suggests_a_fix(
    tmp_path: Path, state_root: Path
) -> None:
    source = """
async def register(api):
    async def turn(ctx):
        return {}["missing"]
    api.pipeline.register("turn", turn)
"""
    bundle = write_bundle(tmp_path / "b", script=["x"], extensions={"broken": source})
    [result] = _run_turns(bundle, state_root, ScriptedModel(["x"]), "hi")
    assert result.error["code"] == "E_PIPELINE_MIDDLEWARE_FAILED"
    assert "extension 'broken'" in result.error["message"] and "KeyError" in result.error["message"]
    assert "spec.extensions" in result.error["suggestion"]


def test_exception_passing_through_outer_layers_is_blamed_on_its_origin() -> None:
    registry = PipelineRegistry()
    caught: list[BaseException] = []

    async def outer(ctx: Any) -> Any:
        try:
            return await ctx.next()
        except ValueError as exc:  # still a ValueError: outer layers can catch it
            caught.append(exc)
            raise

    async def inner(ctx: Any) -> Any:
        raise ValueError("inner bug")

    registry.register("step", outer, owner="first")
    registry.register("step", inner, owner="second")

    async def core(ctx: StepContext) -> StepResult:
        return StepResult("completed", False)

    with pytest.raises(ValueError) as info:
        run(registry.run_step(step_ctx(), core))
    assert caught and caught[0] is info.value
    assert "extension 'second'" in info.value.goondan_middleware  # type: ignore[attr-defined]
    assert any("extension 'second'" in note for note in info.value.__notes__)


# -- extension state -----------------------------------------------------------------------------
COUNTER = """
async def register(api):
    async def turn(ctx):
        api.state.set(((await api.state.get()) or 0) + {step})  # no await: must still count
        return await ctx.next()
    api.pipeline.register("turn", turn)
"""


def _package(root: Path, name: str, step: int) -> None:
    root.mkdir(parents=True)
    (root / "counter.py").write_text(COUNTER.replace("{step}", str(step)))
    (root / "goondan.yaml").write_text(
        f"apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: {name}\n---\n"
        "apiVersion: goondan.ai/v1\nkind: Extension\nmetadata:\n  name: counter\n"
        "spec:\n  entry: ./counter.py\n")


def test_two_counter_extensions_from_two_packages_keep_separate_state(
    tmp_path: Path, state_root: Path
) -> None:
    bundle = tmp_path / "b"
    _package(bundle / "p1", "p1", 1)
    _package(bundle / "p2", "p2", 100)
    write_bundle(
        bundle,
        script=["ok"],
        loop=True,
        extensions={"counter": COUNTER.replace("{step}", "10")},
        agent_extra="    - ref: {kind: Extension, name: counter, package: p1}\n"
        "    - ref: {kind: Extension, name: counter, package: p2}\n",
    )
    text = (bundle / "goondan.yaml").read_text().replace(
        "  name: hostile\n", "  name: hostile\nspec:\n  dependencies:\n"
        "    - {name: p1, path: ./p1}\n    - {name: p2, path: ./p2}\n", 1)
    (bundle / "goondan.yaml").write_text(text)
    _run_turns(bundle, state_root, ScriptedModel(["ok"], loop=True), "one", "two")
    ext_dir = next(state_root.rglob("extensions"))
    states = {
        p.relative_to(ext_dir).as_posix(): json.loads(p.read_text())
        for p in ext_dir.rglob("*.json")
    }
    assert states == {"counter.json": 20, "p1/counter.json": 2, "p2/counter.json": 200}


def test_package_extension_adopts_its_bare_name_state(tmp_path: Path, state_root: Path) -> None:
    bundle = tmp_path / "b"
    _package(bundle / "p1", "p1", 1)
    write_bundle(
        bundle,
        script=["ok"],
        loop=True,
        agent_extra="  extensions:\n    - ref: {kind: Extension, name: counter, package: p1}\n",
    )
    text = (
        (bundle / "goondan.yaml")
        .read_text()
        .replace(
            "  name: hostile\n",
            "  name: hostile\nspec:\n  dependencies:\n    - {name: p1, path: ./p1}\n",
            1,
        )
    )
    (bundle / "goondan.yaml").write_text(text)
    _run_turns(bundle, state_root, ScriptedModel(["ok"], loop=True), "one")
    ext_dir = next(state_root.rglob("extensions"))
    # Simulate a state saved before identity keys: only the bare-name file exists.
    (ext_dir / "p1" / "counter.json").replace(ext_dir / "counter.json")
    (ext_dir / "counter.json").write_text("41\n")
    _run_turns(bundle, state_root, ScriptedModel(["ok"], loop=True), "two")
    assert json.loads((ext_dir / "p1" / "counter.json").read_text()) == 42


# -- agent calls -----------------------------------------------------------------------------------
class _Outbox:
    """A router that only records what is sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, AgentEvent]] = []

    async def send(self, target: str, event: AgentEvent) -> None:
        self.sent.append((target, event))


def _api(r: Any, agent: str, inbound: AgentEvent) -> AgentCallApi:
    return AgentCallApi(r, CATALOG, agent_name=agent, instance_key="k", input_event=inbound,
                        turn_id=f"turn-{agent}", trace_id="t" * 32, span_id="s" * 16)


def test_send_does_not_carry_the_call_stack_so_the_target_may_request_back() -> None:
    async def main() -> None:
        outbox = _Outbox()
        await _api(outbox, "a", AgentEvent(type="m", trace_id="t" * 32)).send("b", "fyi")
        [(target, sent)] = outbox.sent
        assert (
            target == "b" and CALL_STACK_KEY not in sent.metadata and sent.metadata[HOPS_KEY] == 1
        )
        # B's turn (started by the send) asks A: legitimate, A is not waiting for anyone.
        answer = await _api(router(), "b", sent).request("a", "question")
        assert answer["response"] == "a:question"
        # A request still carries the stack, and a real cycle is still refused.
        request_in = AgentEvent(type="m", metadata={CALL_STACK_KEY: ["a@k"]}, trace_id="t" * 32)
        with pytest.raises(AgentError) as info:
            await _api(router(), "b", request_in).request("a", "loop")
        assert info.value.code == "E_AGENT_CYCLE"

    asyncio.run(main())


def test_send_ping_pong_still_hits_the_depth_limit() -> None:
    async def main() -> None:
        outbox = _Outbox()
        event, agent, hops = AgentEvent(type="m", trace_id="t" * 32), "a", 0
        with pytest.raises(AgentError) as info:
            while hops < 50:
                await _api(outbox, agent, event).send("b" if agent == "a" else "a", "ping")
                agent, event = outbox.sent[-1]
                hops += 1
        assert info.value.code == "E_AGENT_DEPTH" and hops == 7

    asyncio.run(main())


# -- start failure under goondan run ---------------------------------------------------------------
def test_extension_start_failure_under_run_exits_3(tmp_path: Path, state_root: Path) -> None:
    import subprocess
    import sys

    source = "def register(api):\n    raise RuntimeError('cannot start')\n"
    bundle = write_bundle(tmp_path / "b", script=["x"], extensions={"broken": source})
    proc = subprocess.run(
        [sys.executable, "-m", "goondan", "run", "-b", str(bundle), "--input", "hi"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=bundle,
    )
    assert proc.returncode == 3, proc.stderr
    assert "[E_AGENT_START_FAILED]" in proc.stderr and "Extension 'broken'" in proc.stderr
