"""``{resource}__{export}`` names (seed 002 §2.2, §5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from goondan.errors import ToolLoadError
from goondan.tools.naming import (
    build_tool_name,
    check_tool_name,
    is_valid_tool_name,
    parse_tool_name,
)


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


def test_names_are_used_verbatim() -> None:
    """seed 002 §5.2 rule 2: no encoding; the name given is the name offered to the LLM."""
    for good in ("bash__exec", "file-system__list-channels", "Tool1__post_message", "x__y-z"):
        assert check_tool_name(good) == good


@given(
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True),
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,10}", fullmatch=True),
)
def test_build_parse_round_trip(resource: str, export: str) -> None:
    """seed 002 §5.3: parseToolName(buildToolName(r, e)) == (r, e)."""
    full = build_tool_name(resource, export)
    assert parse_tool_name(full) == (resource, export)
    assert is_valid_tool_name(full)
