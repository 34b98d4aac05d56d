"""A small declarative schema checker: types, required fields, ranges, unknown keys.

Schemas are plain objects (:class:`Obj`, :class:`Str`, :class:`ListOf` …) whose ``check`` walks
a value and reports every problem through a :class:`Checker`, which knows the document (for
``line:col``) and the resource (for ``Kind/name``). Unknown keys are errors at every depth, with
a ``difflib`` did-you-mean; keys starting with ``x-`` are the user's own and always allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from goondan.config.yamlsource import FieldPath, YamlDocument, format_field
from goondan.errors import Diagnostic

__all__ = [
    "AnyValue",
    "Bool",
    "Checker",
    "Custom",
    "Int",
    "ListOf",
    "MapOf",
    "Num",
    "Obj",
    "Schema",
    "Str",
    "did_you_mean",
    "type_name",
]


def type_name(value: Any) -> str:
    """User-facing name of a YAML value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def did_you_mean(word: str, candidates: list[str] | tuple[str, ...] | set[str]) -> str | None:
    """The closest candidate to ``word`` (case-insensitive), if any is close enough."""
    import difflib  # only needed when something is wrong; keeps `goondan validate` start-up lean

    lowered = {c.lower(): c for c in candidates}
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[hits[0]] if hits else None


@dataclass
class Checker:
    """Collects diagnostics for one document/resource with source positions."""

    doc: YamlDocument | None
    resource: str | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    base: FieldPath = ()

    def report(
        self,
        code: str,
        message: str,
        path: FieldPath,
        *,
        suggestion: str | None = None,
        key: bool = False,
        severity: str = "error",
    ) -> None:
        """Record one diagnostic located at ``path`` (a path inside the document)."""
        line = column = None
        file = None
        if self.doc is not None:
            file = self.doc.display
            line, column = self.doc.position(path, key=key)
        self.diagnostics.append(Diagnostic(
            code, message, severity="warning" if severity == "warning" else "error",
            file=file, line=line, column=column, resource=self.resource,
            field=format_field(path) or None, suggestion=suggestion,
        ))

    def error(self, message: str, path: FieldPath, suggestion: str | None = None, *,
              code: str = "E_CONFIG_SCHEMA_INVALID", key: bool = False) -> None:
        """Shorthand for a schema error."""
        self.report(code, message, path, suggestion=suggestion, key=key)

    def warning(
        self, code: str, message: str, path: FieldPath, suggestion: str | None = None
    ) -> None:
        """Shorthand for a warning."""
        self.report(code, message, path, suggestion=suggestion, severity="warning")


class Schema:
    """Base class: ``check`` returns True when ``value`` has the right shape."""

    expected = "a value"

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        raise NotImplementedError

    def _type_error(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        ck.error(
            f"{format_field(path) or 'value'} must be {self.expected}, got {type_name(value)}",
            path, f"write {self.expected} here",
        )
        return False


class AnyValue(Schema):
    """Any JSON-compatible value (free-form data such as ``options`` or ``config``)."""

    def __init__(self, *, mapping: bool = False) -> None:
        self.mapping = mapping
        self.expected = "a mapping" if mapping else "a value"

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        if self.mapping and not isinstance(value, dict):
            return self._type_error(value, path, ck)
        return True


class Str(Schema):
    """A string, optionally non-empty / from a fixed set."""

    expected = "a string"

    def __init__(self, *, non_empty: bool = True, choices: tuple[str, ...] | None = None) -> None:
        self.non_empty = non_empty
        self.choices = choices

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        if not isinstance(value, str):
            return self._type_error(value, path, ck)
        if self.non_empty and not value.strip():
            ck.error(
                f"{format_field(path)} must not be empty",
                path,
                "give it a value or remove the field",
            )
            return False
        if self.choices is not None and value not in self.choices:
            guess = did_you_mean(value, self.choices)
            hint = f"did you mean {guess!r}?" if guess else f"use one of: {', '.join(self.choices)}"
            ck.error(f"{format_field(path)} has unknown value {value!r}", path, hint)
            return False
        return True


class Bool(Schema):
    """``true`` or ``false``."""

    expected = "true or false"

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        return True if isinstance(value, bool) else self._type_error(value, path, ck)


class Int(Schema):
    """An integer (booleans are not integers), optionally with a minimum."""

    def __init__(self, *, minimum: int | None = 1) -> None:
        self.minimum = minimum
        self.expected = "a positive integer" if minimum == 1 else "an integer"

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return self._type_error(value, path, ck)
        if self.minimum is not None and value < self.minimum:
            ck.error(f"{format_field(path)} must be at least {self.minimum}, got {value}", path,
                     f"use a value ≥ {self.minimum}")
            return False
        return True


class Num(Schema):
    """A finite number within ``[minimum, maximum]``."""

    def __init__(self, *, minimum: float | None = None, maximum: float | None = None,
                 exclusive_min: bool = False) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.exclusive_min = exclusive_min
        self.expected = "a number"

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            return self._type_error(value, path, ck)
        low_bad = self.minimum is not None and (
            value <= self.minimum if self.exclusive_min else value < self.minimum)
        high_bad = self.maximum is not None and value > self.maximum
        if low_bad or high_bad:
            low = (
                ""
                if self.minimum is None
                else (f"> {self.minimum}" if self.exclusive_min else f"≥ {self.minimum}")
            )
            high = "" if self.maximum is None else f"≤ {self.maximum}"
            bounds = " and ".join(b for b in (low, high) if b)
            ck.error(
                f"{format_field(path)} is out of range: {value}", path, f"use a value {bounds}"
            )
            return False
        return True


class ListOf(Schema):
    """A list of items of one schema."""

    expected = "a list"

    def __init__(self, item: Schema, *, min_items: int = 0) -> None:
        self.item = item
        self.min_items = min_items

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        if not isinstance(value, list):
            return self._type_error(value, path, ck)
        ok = True
        if len(value) < self.min_items:
            ck.error(f"{format_field(path)} needs at least {self.min_items} item(s)", path,
                     "add an entry")
            ok = False
        for i, item in enumerate(value):
            ok = self.item.check(item, (*path, i), ck) and ok
        return ok


class MapOf(Schema):
    """A mapping from free string keys to values of one schema."""

    expected = "a mapping"

    def __init__(self, value: Schema) -> None:
        self.value = value

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        if not isinstance(value, dict):
            return self._type_error(value, path, ck)
        ok = True
        for key, item in value.items():
            ok = self.value.check(item, (*path, key), ck) and ok
        return ok


class Custom(Schema):
    """A hand-written check ``fn(value, path, checker) -> bool``."""

    def __init__(self, fn: Callable[[Any, FieldPath, Checker], bool]) -> None:
        self.fn = fn

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        return self.fn(value, path, ck)


class Obj(Schema):
    """A mapping with known fields; names ending in ``*`` are required.

    ``extra`` (a schema) accepts additional keys of that shape instead of rejecting them.
    ``rules`` run after the fields, on a well-typed mapping, for cross-field constraints.
    """

    expected = "a mapping"

    def __init__(
        self,
        fields: Mapping[str, Schema],
        *,
        extra: Schema | None = None,
        rules: tuple[Callable[[dict[str, Any], FieldPath, Checker], None], ...] = (),
        hints: Mapping[str, str] | None = None,
    ) -> None:
        self.hints = dict(hints or {})  # unknown key → suggestion (known mistakes)
        self.fields: dict[str, Schema] = {}
        self.required: list[str] = []
        for name, schema in fields.items():
            bare = name.rstrip("*")
            self.fields[bare] = schema
            if name.endswith("*"):
                self.required.append(bare)
        self.extra = extra
        self.rules = rules

    def check(self, value: Any, path: FieldPath, ck: Checker) -> bool:
        if not isinstance(value, dict):
            return self._type_error(value, path, ck)
        ok = True
        for key, item in value.items():
            schema = self.fields.get(key)
            if schema is not None:
                ok = schema.check(item, (*path, key), ck) and ok
            elif self.extra is not None:
                ok = self.extra.check(item, (*path, key), ck) and ok
            elif not key.startswith("x-"):
                ok = False
                self._unknown(key, path, ck)
        for name in self.required:
            if name not in value:
                ok = False
                where = format_field(path) or "the document"
                ck.error(f"missing required field {name!r} in {where}", path,
                         f"add '{name}:' to {where}")
        if ok:
            for rule in self.rules:
                before = len(ck.diagnostics)
                rule(value, path, ck)
                ok = ok and len(ck.diagnostics) == before
        return ok

    def _unknown(self, key: str, path: FieldPath, ck: Checker) -> None:
        guess = did_you_mean(key, list(self.fields))
        if key in self.hints:
            suggestion = self.hints[key]
        elif guess:
            suggestion = f"did you mean {guess!r}?"
        else:
            known = ", ".join(sorted(self.fields)) or "none"
            suggestion = f"remove it (known fields: {known}); prefix your own data with 'x-'"
        where = format_field(path) or "the document"
        ck.error(f"unknown field {key!r} in {where}", (*path, key), suggestion,
                 code="E_CONFIG_UNKNOWN_FIELD", key=True)
