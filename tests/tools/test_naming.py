"""``{resource}__{export}`` names (seed 002 §2.2, §5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goondan.errors import ToolLoadError
from goondan.runtime import Runtime
from goondan.tools.naming import (
    build_tool_name,
    check_tool_name,
    is_valid_tool_name,
    parse_tool_name,
)
from tests.support.aio import run
from tests.support.fake_provider import FakeProvider, FakeReply, FakeToolCall
from tests.support.hostile import openai_factory
from tests.support.hostile_bundles import write_bundle


def test_build_and_parse_with_double_underscore() -> None:
    """seed 002 §2.2 rules 1-2 / §5.3: names are {resource}__{export}, split at the first '__'."""
    assert build_tool_name("bash", "exec") == "bash__exec"
    assert build_tool_name("file-system", "read") == "file-system__read"
    assert parse_tool_name("http-fetch__post") == ("http-fetch", "post")
    assert parse_tool_name("slack__post_message").export_name == "post_message"  # type: ignore[union-attr]
    assert parse_tool_name("plain") is None


def test_single_export_tools_still_use_the_full_form() -> None:
    """seed 002 §2.2 rule 4: a Tool with one export is still {resource}__{export}."""
    assert not is_valid_tool_name("weather")
    assert is_valid_tool_name("weather__get")


def test_parts_must_not_contain_double_underscore() -> None:
    """seed 002 §2.2 rule 3 / §5.2 rule 3: neither part may contain '__' (MUST NOT)."""
    with pytest.raises(ToolLoadError) as info:
        build_tool_name("my__tool", "run")
    assert info.value.code == "E_TOOL_NAME"
    with pytest.raises(ToolLoadError):
        build_tool_name("tool", "run__fast")
    for bad in ("a__b__c", "a___b", "a_ __b", "__run", "tool__", "", "tool__Run", "to ol__run"):
        assert not is_valid_tool_name(bad), bad
    with pytest.raises(ToolLoadError):
        check_tool_name("a__b__c")


CHANNELS_TOOL = """
handlers = {
    "list-channels": lambda ctx, input: ["general"],
    "post_message": lambda ctx, input: {"posted": input.get("text")},
}
"""


def test_names_are_used_verbatim(tmp_path: Path, state_root: Path) -> None:
    """seed 002 §5.2 rule 2, through a real turn over HTTP: the names with ``-`` and ``_`` reach
    the provider exactly as ``{resource}__{export}`` (no encoding), and the model's calls by those
    names run the handlers and are recorded under the same names."""
    bundle = write_bundle(tmp_path / "b", script=["unused"],
                          tools={"file-system": (CHANNELS_TOOL, ["list-channels", "post_message"])})
    with FakeProvider() as server:
        server.enqueue(
            FakeReply.calls(FakeToolCall("file-system__list-channels", {}),
                            FakeToolCall("file-system__post_message", {"text": "hi"})),
            FakeReply.reply("done"),
        )

        async def main() -> list[Any]:
            async with Runtime.from_bundle(bundle, state_root=state_root,
                                           model_factory=openai_factory(server)) as rt:
                assert (await rt.run_turn("a", "go")).text == "done"
                return list((await rt.instance("a")).messages)

        messages = run(main())
        offered = [t["function"]["name"] for t in server.requests[0].json["tools"]]
        sent_back = [m for m in server.requests[1].json["messages"] if m["role"] == "tool"]
    assert offered == ["file-system__list-channels", "file-system__post_message"]
    results = [part for m in messages if m.role == "tool" for part in m.data["content"]]
    assert [(r["toolName"], r["output"]) for r in results] == [
        ("file-system__list-channels", {"type": "json", "value": ["general"]}),
        ("file-system__post_message", {"type": "json", "value": {"posted": "hi"}}),
    ]
    assert len(sent_back) == 2


@given(
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True),
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True),
)
def test_build_parse_round_trip(resource: str, export: str) -> None:
    """seed 002 §5.3: parseToolName(buildToolName(r, e)) == (r, e)."""
    full = build_tool_name(resource, export)
    assert parse_tool_name(full) == (resource, export)
    assert is_valid_tool_name(full)
