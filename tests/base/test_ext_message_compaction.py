"""``message-compaction`` of ``@goondan/base`` through the real runtime (base-package.md §3)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from goondan.conversation.messages import Message, MessageEvent
from goondan.llm.testing import ScriptedModel
from goondan.runtime import Runtime
from tests.support.aio import run
from tests.support.base_extensions import (
    assert_tool_pairs_intact,
    base_bundle,
    texts,
    tool_exchange,
)
from tests.support.runtime_harness import base_records, shape

EXT = "message-compaction"
SOURCE = {"type": "extension", "extensionName": "message-compaction"}


def run_compaction(
    tmp_path: Path, state_root: Path, config: dict[str, Any] | None, history: list[Message],
    model: ScriptedModel,
) -> list[dict[str, Any]]:
    """Seed ``history``, run one turn ("go"), return base.jsonl after the fold."""
    bundle = base_bundle(tmp_path / "bundle", (EXT, config))

    async def main() -> list[dict[str, Any]]:
        async with Runtime.from_bundle(bundle, state_root=state_root,
                                       models={"agent": model}) as rt:
            instance = await rt.instance("agent")
            await instance.apply_message_events([MessageEvent.append(m) for m in history])
            result = await rt.run_turn("agent", "go")
            assert result.finish_reason == "text_response", result.error
            return base_records(instance)

    return run(main())


def test_remove_skips_pinned_and_retained_and_appends_a_summary(
    tmp_path: Path, state_root: Path
) -> None:
    history = [Message.user("u0", metadata={"pinned": True}), Message.user("u1"),
               *tool_exchange(2), Message.user("u3"), Message.user("u4")]
    model = ScriptedModel(["answer"])
    config = {"maxMessages": 4, "retainLastMessages": 2}
    records = run_compaction(tmp_path, state_root, config, history, model)
    summary_text = "[message-compaction] mode=remove removed=3 chars=10"  # "u1" + "adding 2"
    assert texts(model.requests[0]) == ["u0", "u3", "u4", "go", summary_text]
    assert_tool_pairs_intact(model.requests[0].messages)
    assert shape(records) == [
        ("user", "user", "u0"), ("user", "user", "u3"), ("user", "user", "u4"),
        ("user", "user", "go"), ("system", "extension", summary_text),
        ("assistant", "assistant", "answer"),
    ]
    summary = records[4]
    assert summary["source"] == SOURCE
    assert summary["metadata"] == {
        "compaction.summary": True, "compaction.mode": "remove",
        "compaction.removedCount": 3, "compaction.removedCharacters": 10,
    }


def test_character_limit_triggers_and_below_limits_nothing_happens(
    tmp_path: Path, state_root: Path
) -> None:
    history = [Message.user("x" * 30), Message.user("y" * 30), Message.user("z")]
    model = ScriptedModel(["ok"])
    config = {"maxCharacters": 40, "retainLastMessages": 1, "appendSummary": False}
    records = run_compaction(tmp_path, state_root, config, history, model)
    assert texts(model.requests[0]) == ["y" * 30, "z", "go"]
    assert [s[2] for s in shape(records)] == ["y" * 30, "z", "go", "ok"]
    # Under both limits: untouched.
    model = ScriptedModel(["ok"])
    run_compaction(tmp_path / "again", state_root / "again", None, history, model)
    assert texts(model.requests[0]) == ["x" * 30, "y" * 30, "z", "go"]


def test_a_call_is_not_removed_without_its_retained_result(
    tmp_path: Path, state_root: Path
) -> None:
    """The result is in the retained tail, so its call stays too; the limits cannot be met by
    removing only u0, so compaction falls back to truncate (keeping this turn's input)."""
    history = [Message.user("u0"), *tool_exchange(1), Message.user("u2")]
    model = ScriptedModel(["ok"])
    config = {"maxMessages": 3, "retainLastMessages": 3}
    records = run_compaction(tmp_path, state_root, config, history, model)
    summary_text = "[message-compaction] mode=truncate removed=4 chars=12"  # u0 adding 1 u2
    assert texts(model.requests[0]) == ["go", summary_text]
    assert shape(records) == [("user", "user", "go"), ("system", "extension", summary_text),
                              ("assistant", "assistant", "ok")]
    assert records[1]["metadata"]["compaction.mode"] == "truncate"


def test_remove_keeps_pairs_with_fewer_removals(tmp_path: Path, state_root: Path) -> None:
    history = [*tool_exchange(1), *tool_exchange(2), Message.user("u")]
    model = ScriptedModel([{"toolCalls": [{"name": "calc__echo", "args": {"text": "e"}}]}, "ok"])
    config = {"maxMessages": 5, "retainLastMessages": 1, "appendSummary": False}
    run_compaction(tmp_path, state_root, config, history, model)
    assert texts(model.requests[0]) == ["adding 2", "result:call-2", "u", "go"]
    for request in model.requests:
        assert_tool_pairs_intact(request.messages)


def test_truncate_mode_without_summary_and_invalid_config(
    tmp_path: Path, state_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    history = [Message.user(f"m{i}", metadata={"pinned": True}) for i in range(3)]
    model = ScriptedModel(["ok"])
    config = {"mode": "truncate", "appendSummary": False, "maxMessages": 2,
              "maxCharacters": "lots", "retainLastMessages": -1}
    with caplog.at_level(logging.WARNING, logger=f"goondan.extension.{EXT}"):
        records = run_compaction(tmp_path, state_root, config, history, model)
    assert texts(model.requests[0]) == ["go"]
    assert shape(records) == [("user", "user", "go"), ("assistant", "assistant", "ok")]
    warnings = [
        r.getMessage() for r in caplog.records if "W_BASE_EXTENSION_CONFIG" in r.getMessage()
    ]
    assert len(warnings) == 2 and "maxCharacters" in warnings[0]
