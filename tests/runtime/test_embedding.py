"""The embedding API: ``Runtime.from_bundle``, sync and async turns, subscriptions, isolation."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from goondan import Runtime as LazyRuntime
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.runtime_harness import BASIC

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart"


def snapshot(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_lazy_reexport() -> None:
    assert LazyRuntime is Runtime


def test_sync_api_read_only_home_writes_only_state_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GOONDAN_STATE_ROOT", raising=False)
    state = tmp_path / "state"
    bundle_before = snapshot(QUICKSTART)
    try:
        with Runtime.from_bundle(QUICKSTART, state_root=state) as rt:
            events: list[dict[str, Any]] = []
            unsubscribe = rt.subscribe(events.append)
            result = rt.run_turn_sync(None, "What is 12 km in miles?", instance_key="embed")
            assert result.text == "12 km is about 7.46 mi."
            unsubscribe()
            again = rt.run_turn_sync(None, "Which units do you know?", instance_key="embed")
            assert "km" in again.text
        assert any(e["type"] == "tool.completed" for e in events)
        assert "".join(
            e["text"] for e in events if e["type"] == "llm.delta" and e["kind"] == "text"
        )
        assert not any(e.get("turnId") == again.turn_id for e in events)
    finally:
        home.chmod(stat.S_IRWXU)
    assert list(home.iterdir()) == []
    assert snapshot(QUICKSTART) == bundle_before
    assert any(p.name == "base.jsonl" for p in state.rglob("*"))


def test_async_api_and_resume_across_runtimes(state_root: Path) -> None:
    async def main() -> None:
        first = ScriptedModel(["one"])
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": first}) as rt:
            assert rt.entry_agent == "plain"
            assert (await rt.run_turn(None, "hello", instance_key="resume")).text == "one"
        second = ScriptedModel(["two"])
        async with Runtime.from_bundle(
            BASIC, state_root=state_root, models={"plain": second}
        ) as rt:
            assert (await rt.run_turn("plain", "again", instance_key="resume")).text == "two"
            instance = await rt.instance("plain", "resume")
            assert [m.text for m in instance.messages] == ["hello", "one", "again", "two"]
        # The second runtime's model saw the whole persisted conversation.
        assert [m["role"] for m in second.requests[0].messages] == ["user", "assistant", "user"]

    run(main())


def test_instances_are_isolated_by_key(state_root: Path) -> None:
    async def main() -> None:
        model = ScriptedModel(["a"], loop=True)
        async with Runtime.from_bundle(BASIC, state_root=state_root, models={"plain": model}) as rt:
            await rt.run_turn("plain", "for x", instance_key="x")
            await rt.run_turn("plain", "for y", instance_key="y")
            x = await rt.instance("plain", "x")
            y = await rt.instance("plain", "y")
            assert x is not y
            assert [m.text for m in x.messages] == ["for x", "a"]
            assert [m.text for m in y.messages] == ["for y", "a"]

    run(main())


def test_closed_runtime_refuses_turns(state_root: Path) -> None:
    from goondan.errors import AgentError

    async def main() -> None:
        rt = Runtime.from_bundle(
            BASIC, state_root=state_root, models={"plain": ScriptedModel(["x"])}
        )
        await rt.run_turn("plain", "hi")
        await rt.aclose()
        with pytest.raises(AgentError) as info:
            await rt.run_turn("plain", "again")
        assert info.value.code == "E_AGENT_DRAINING"

    run(main())


def test_unknown_agent_is_a_config_error(state_root: Path) -> None:
    from goondan.errors import GoondanError

    async def main() -> None:
        async with Runtime.from_bundle(BASIC, state_root=state_root) as rt:
            with pytest.raises(GoondanError):
                await rt.run_turn("nobody", "hi")

    run(main())


def test_model_api_key_is_registered_as_secret(
    state_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from goondan.config import ModelBinding
    from goondan.runtime.inputs import model_spec_for
    from goondan.secrets import mask

    binding = ModelBinding(name="m", provider="openai", model="x",
                           api_key={"valueFrom": {"env": "RUNTIME_TEST_KEY"}})
    spec = model_spec_for(binding, {"RUNTIME_TEST_KEY": "sk-very-secret-value"})
    assert spec.api_key == "sk-very-secret-value" and spec.api_key_env == "RUNTIME_TEST_KEY"
    assert "sk-very-secret-value" not in repr(spec)
    assert mask("key sk-very-secret-value") == "key ***"
