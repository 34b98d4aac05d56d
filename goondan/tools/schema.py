"""Check tool arguments against an export's JSON Schema (stdlib only).

The supported subset is what tool exports use (docs/tools.md): ``type`` (one name or a list;
``string``, ``number``, ``integer``, ``boolean``, ``array``, ``object``, ``null``), ``required``,
``enum``, ``const``, ``items``, ``properties`` and ``additionalProperties`` (``false`` or a
schema). Other keywords (``description``, ``default``, ``minimum`` ...) are ignored, so a richer
schema never rejects valid input. ``validate_args`` returns the *first* violation with its JSON
path (``$.files[2].path``) or ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SchemaViolation", "json_type_name", "validate_args", "validate_value"]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class SchemaViolation:
    """Where (``path``) and why (``message``) a value does not match its schema."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def json_type_name(value: Any) -> str:
    """The JSON type of a Python value (``bool`` is ``boolean``, never ``integer``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "object":
        return isinstance(value, Mapping)
    if name == "array":
        return isinstance(value, list | tuple)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "null":
        return value is None
    return True  # unknown type names are not ours to reject


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENT.fullmatch(key) else f"{path}[{key!r}]"


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: true != 1 even though Python says True == 1.
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def validate_value(schema: Any, value: Any, path: str = "$") -> SchemaViolation | None:
    """First violation of ``value`` against ``schema`` below ``path``, or ``None``."""
    if not isinstance(schema, Mapping):
        return None  # ``true``/missing schema: anything goes
    expected = schema.get("type")
    if expected is not None:
        names = expected if isinstance(expected, list) else [expected]
        if not any(_is_type(value, n) for n in names if isinstance(n, str)):
            wanted = " or ".join(str(n) for n in names)
            return SchemaViolation(path, f"expected {wanted}, got {json_type_name(value)}")
    enum = schema.get("enum")
    if isinstance(enum, list) and not any(_equal(value, option) for option in enum):
        options = ", ".join(repr(o) for o in enum[:10])
        return SchemaViolation(path, f"must be one of {options}; got {value!r}")
    if "const" in schema and not _equal(value, schema["const"]):
        return SchemaViolation(path, f"must be {schema['const']!r}; got {value!r}")
    if isinstance(value, Mapping):
        return _validate_object(schema, value, path)
    if isinstance(value, list | tuple):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                found = validate_value(items, item, f"{path}[{index}]")
                if found is not None:
                    return found
    return None


def _validate_object(
    schema: Mapping[str, Any], value: Mapping[str, Any], path: str
) -> SchemaViolation | None:
    required = schema.get("required")
    if isinstance(required, list):
        for name in required:
            if isinstance(name, str) and name not in value:
                return SchemaViolation(_child(path, name), "required property is missing")
    properties = schema.get("properties")
    props: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    additional = schema.get("additionalProperties", True)
    for key, item in value.items():
        sub = props.get(key)
        if sub is not None:
            found = validate_value(sub, item, _child(path, str(key)))
        elif additional is False:
            allowed = ", ".join(sorted(props)) or "none"
            return SchemaViolation(
                _child(path, str(key)), f"unexpected property (allowed: {allowed})"
            )
        elif isinstance(additional, Mapping):
            found = validate_value(additional, item, _child(path, str(key)))
        else:
            continue
        if found is not None:
            return found
    return None


def validate_args(parameters: Any, args: Any) -> SchemaViolation | None:
    """Check a tool call's ``args`` (always a JSON object) against ``parameters``."""
    if not isinstance(args, Mapping):
        return SchemaViolation("$", f"arguments must be an object, got {json_type_name(args)}")
    if not isinstance(parameters, Mapping) or not parameters:
        return None
    return validate_value(parameters, args)
