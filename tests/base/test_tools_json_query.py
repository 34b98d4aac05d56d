"""Tool ``json-query`` of ``@goondan/base``: path syntax, pick, count, flatten."""

from __future__ import annotations

import json
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
handlers = load_entry_module(TOOLS / "json_query.py").handlers
DOC = json.dumps({"a": {"b": [{"c": 1}, "two", None]}, "list": [1, [2, [3, [4]]]],
                  "odd key": {"x": True}, "0": "zero", "s": "héllo", "n": 3.5})


def call(export: str, args: dict[str, Any]) -> dict[str, Any]:
    ctx = ToolContext("agent", "key", "turn-1", "0" * 32, "call-1", None, Path.cwd())
    result: dict[str, Any] = handlers[export](ctx, args)
    return result


def failure(export: str, args: dict[str, Any]) -> ToolFailure:
    with pytest.raises(ToolFailure) as info:
        call(export, args)
    return info.value


@pytest.mark.parametrize(("path", "value"), [
    (".a.b[0]", {"c": 1}),
    ("a.b[0].c", 1),
    (".a.b.1", "two"),
    ("a.b[2]", None),
    ('["odd key"].x', True),
    ("['odd key']", {"x": True}),
    (".0", "zero"),
    (".list[1][1][0]", 3),
])
def test_query_finds_values(path: str, value: Any) -> None:
    assert call("query", {"data": DOC, "path": path}) == {
        "path": path,
        "found": True,
        "value": value,
    }


@pytest.mark.parametrize("path", [".a.x", ".a.b[3]", ".s.len", ".list.x", ".a.b[0].c.d"])
def test_query_reports_missing_paths(path: str) -> None:
    assert call("query", {"data": DOC, "path": path}) == {
        "path": path,
        "found": False,
        "value": None,
    }


def test_query_root_and_errors() -> None:
    assert call("query", {"data": "[1,2]"}) == {"path": ".", "found": True, "value": [1, 2]}
    assert call("query", {"data": "7", "path": ""})["value"] == 7
    assert failure("query", {"data": "{nope"}).code == "E_BASE_JSON_PARSE"
    assert failure("query", {"data": "NaN"}).code == "E_BASE_JSON_PARSE"
    assert failure("query", {"data": {"a": 1}}).code == "E_TOOL_INVALID_ARGS"
    for bad in (".a..b", "a[", "a[x]", "a."):
        assert failure("query", {"data": DOC, "path": bad}).code == "E_TOOL_INVALID_ARGS"


def test_pick_keeps_existing_keys() -> None:
    out = call("pick", {"data": DOC, "keys": ["s", "missing", "n"]})
    assert out == {"keys": ["s", "missing", "n"], "result": {"s": "héllo", "n": 3.5}}
    assert failure("pick", {"data": "[1]", "keys": ["a"]}).code == "E_TOOL_INVALID_ARGS"
    assert failure("pick", {"data": DOC, "keys": "s"}).code == "E_TOOL_INVALID_ARGS"
    assert failure("pick", {"data": DOC}).code == "E_TOOL_INVALID_ARGS"


@pytest.mark.parametrize(("path", "count", "kind"), [
    (".", 6, "object"), (".a.b", 3, "array"), (".s", 5, "string"), (".n", 1, "number"),
    (".odd key.x", 1, "boolean"), (".a.b[2]", 0, "null"), (".missing", 0, "null"),
])
def test_count(path: str, count: int, kind: str) -> None:
    assert call("count", {"data": DOC, "path": path}) == {
        "path": path,
        "count": count,
        "type": kind,
    }


def test_flatten_depths() -> None:
    data = json.dumps([1, [2, [3, [4]]], []])
    assert call("flatten", {"data": data}) == {"depth": 1, "count": 3, "result": [1, 2, [3, [4]]]}
    assert call("flatten", {"data": data, "depth": 0})["result"] == [1, [2, [3, [4]]], []]
    assert call("flatten", {"data": data, "depth": 5})["result"] == [1, 2, 3, 4]
    assert failure("flatten", {"data": "{}"}).code == "E_TOOL_INVALID_ARGS"
    assert failure("flatten", {"data": data, "depth": -1}).code == "E_TOOL_INVALID_ARGS"
