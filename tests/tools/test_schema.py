"""Argument checking against the export's JSON Schema (seed 002 §6.1)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from goondan.tools.schema import validate_args

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "maxBytes": {"type": "number"},
        "count": {"type": "integer"},
        "mode": {"type": "string", "enum": ["r", "w"]},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
                "required": ["name"],
            },
        },
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}},
                 "additionalProperties": False},
        "maybe": {"type": ["string", "null"]},
        "weird key": {"type": "string"},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def check(args: Any) -> str | None:
    found = validate_args(SCHEMA, args)
    return None if found is None else str(found)


def test_valid_arguments_pass() -> None:
    """seed 002 §6.1: a value matching type/required/enum/items/properties passes."""
    assert (
        check(
            {
                "path": "a",
                "maxBytes": 1.5,
                "count": 3,
                "mode": "r",
                "files": [{"name": "x", "size": 2}],
                "opts": {"deep": True},
                "maybe": None,
            }
        )
        is None
    )
    assert check({"path": "a", "count": 2.0}) is None  # 2.0 is an integer in JSON Schema


def test_required_property_missing() -> None:
    """seed 002 §6.1 required: the failing path names the missing property."""
    assert check({}) == "$.path: required property is missing"


def test_type_mismatches_with_paths() -> None:
    """seed 002 §6.1 type: string/number/integer/boolean/array/object; bool is not a number."""
    assert check({"path": 1}) == "$.path: expected string, got integer"
    assert check({"path": "a", "maxBytes": True}) == "$.maxBytes: expected number, got boolean"
    assert check({"path": "a", "count": 1.5}) == "$.count: expected integer, got number"
    assert check({"path": "a", "files": {}}) == "$.files: expected array, got object"
    assert check({"path": "a", "maybe": 3}) == "$.maybe: expected string or null, got integer"
    assert check({"path": "a", "weird key": 3}) == "$['weird key']: expected string, got integer"


def test_enum() -> None:
    """seed 002 §6.1 enum: values outside the list fail."""
    assert check({"path": "a", "mode": "x"}) == "$.mode: must be one of 'r', 'w'; got 'x'"


def test_items_and_nested_properties() -> None:
    """seed 002 §6.1 items/properties: the JSON path points inside arrays and objects."""
    assert check({"path": "a", "files": [{"name": "a"}, {"size": 1}]}) == (
        "$.files[1].name: required property is missing"
    )
    assert check({"path": "a", "files": [{"name": "a", "size": "big"}]}) == (
        "$.files[0].size: expected integer, got string"
    )


def test_additional_properties_false_and_schema() -> None:
    """seed 002 §6.1 additionalProperties: false rejects unknown keys; a schema checks them."""
    assert check({"path": "a", "extra": 1}) is not None
    assert check({"path": "a", "opts": {"deep": True, "x": 1}}) == (
        "$.opts.x: unexpected property (allowed: deep)"
    )
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert validate_args(schema, {"a": 1}) is None
    assert str(validate_args(schema, {"a": "1"})) == "$.a: expected integer, got string"


def test_args_must_be_an_object_and_missing_schema_accepts_any_object() -> None:
    """Decision 16: missing parameters = empty object schema; arguments are always an object."""
    assert str(validate_args({}, [1])) == "$: arguments must be an object, got array"
    assert validate_args(None, {"anything": [1, 2]}) is None
    assert validate_args({"type": "object", "properties": {}}, {"x": 1}) is None


def test_unknown_keywords_are_ignored() -> None:
    """seed 002 §6.1: description/default and other keywords never reject input."""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 5,
                                                     "description": "d", "default": 1}}}
    assert validate_args(schema, {"n": 1}) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4))
def test_never_crashes_on_arbitrary_json(args: dict[str, Any]) -> None:
    """The checker returns None or a violation for any JSON input (no exceptions)."""
    validate_args(SCHEMA, args)
    validate_args(
        {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}},
        args,
    )
