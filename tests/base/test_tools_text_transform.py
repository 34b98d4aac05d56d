"""Tool ``text-transform`` of ``@goondan/base``: JS slice semantics and the other exports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from goondan.tools import ToolContext, ToolFailure, load_entry_module

TOOLS = (
    Path(__file__).resolve().parents[2]
    / "goondan"
    / "builtin_packages"
    / "@goondan"
    / "base"
    / "tools"
)
handlers = load_entry_module(TOOLS / "text_transform.py").handlers


def call(export: str, args: dict[str, Any]) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, Path.cwd())
    result: dict[str, Any] = handlers[export](ctx, args)
    return result


def failure(export: str, args: dict[str, Any]) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, args)
    return info.value


# Expected values are what JavaScript's "hello world".slice(start, end) returns.
@pytest.mark.parametrize(("start", "end", "result"), [
    (None, None, "hello world"), (6, None, "world"), (-5, None, "world"), (2, -2, "llo wor"),
    (5, 2, ""), (-100, 3, "hel"), (3, 100, "lo world"), (0, -100, ""), (-3, -1, "rl"),
    (11, None, ""), (4.0, 5, "o"),
])
def test_slice_follows_javascript(start: int | None, end: int | None, result: str) -> None:
    args: dict[str, Any] = {"text": "hello world"}
    if start is not None:
        args["start"] = start
    if end is not None:
        args["end"] = end
    out = call("slice", args)
    assert out == {"original": "hello world", "result": result, "start": int(start or 0),
                   "end": 11 if end is None else end, "length": len(result)}


def test_replace_first_or_all_literally() -> None:
    assert call("replace", {"text": "a.b.c", "search": ".", "replacement": "$&"}) == {
        "original": "a.b.c", "result": "a$&b.c", "replacements": 1}
    assert call("replace", {"text": "a.b.c", "search": ".", "all": True}) == {
        "original": "a.b.c", "result": "abc", "replacements": 2}
    assert call("replace", {"text": "abc", "search": "x"})["replacements"] == 0
    assert failure("replace", {"text": "abc", "search": ""}).code == "E_TOOL_INVALID_ARGS"
    assert failure("replace", {"text": "abc"}).code == "E_TOOL_INVALID_ARGS"


def test_split_and_join() -> None:
    assert call("split", {"text": "a\nb\nc"}) == {
        "delimiter": "\n",
        "count": 3,
        "parts": ["a", "b", "c"],
    }
    assert call("split", {"text": "a,b,c", "delimiter": ",", "maxParts": 2})["parts"] == ["a", "b"]
    assert call("split", {"text": "abc", "delimiter": ""})["parts"] == ["a", "b", "c"]
    assert call("split", {"text": "", "delimiter": ","})["parts"] == [""]
    assert call("join", {"parts": ["a", 1, 2.0, 2.5, True]}) == {
        "delimiter": "\n", "count": 5, "result": "a\n1\n2\n2.5\ntrue"}
    assert call("join", {"parts": [], "delimiter": "-"})["result"] == ""
    assert failure("join", {"parts": [None]}).code == "E_TOOL_INVALID_ARGS"
    assert failure("join", {"parts": "abc"}).code == "E_TOOL_INVALID_ARGS"


def test_trim_and_case() -> None:
    assert call("trim", {"text": "  hi \n"}) == {
        "original": "  hi \n",
        "result": "hi",
        "mode": "both",
        "trimmedLength": 2,
    }
    assert call("trim", {"text": "  hi ", "mode": "start"})["result"] == "hi "
    assert call("trim", {"text": "  hi ", "mode": "end"})["result"] == "  hi"
    assert failure("trim", {"text": "x", "mode": "middle"}).code == "E_TOOL_INVALID_ARGS"
    assert call("case", {"text": "Straße", "to": "upper"}) == {
        "original": "Straße",
        "result": "STRASSE",
        "to": "upper",
    }
    assert call("case", {"text": "ABC", "to": "lower"})["result"] == "abc"
    assert failure("case", {"text": "x", "to": "title"}).code == "E_TOOL_INVALID_ARGS"
    assert failure("case", {"text": 1, "to": "upper"}).code == "E_TOOL_INVALID_ARGS"
