"""ObjectRefs (``"Kind/name"`` or ``{kind, name, package?}``), ref-list items and selectors.

Parsing is structural and reports through a :class:`~goondan.config.schema.Checker`; resolving
against loaded resources happens in :mod:`goondan.config.resolve` once every file is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from goondan.config.schema import Checker, did_you_mean, type_name
from goondan.config.yamlsource import FieldPath, format_field

__all__ = [
    "KINDS",
    "ObjectRef",
    "RefItem",
    "Selector",
    "parse_ref",
    "parse_ref_item",
]

KINDS = ("Model", "Agent", "Swarm", "Tool", "Extension", "Connector", "Connection", "Package")
_REF_OBJECT_KEYS = ("kind", "name", "package", "apiVersion")


@dataclass(frozen=True)
class ObjectRef:
    """A reference to one resource; ``package=None`` means "resolve unscoped" (docs/configuration.md
    "References")."""

    kind: str
    name: str
    package: str | None = None

    def __str__(self) -> str:
        text = f"{self.kind}/{self.name}"
        return f"{text} (package {self.package})" if self.package else text


@dataclass
class Selector:
    """``{selector: {kind?, name?, matchLabels?}, overrides?: {spec?, metadata?}}``
    (docs/configuration.md "References")."""

    kind: str
    name: str | None = None
    match_labels: dict[str, str] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass
class RefItem:
    """One entry of ``tools``/``extensions``/``agents``: a ref or a selector, plus ``config``."""

    path: FieldPath
    ref: ObjectRef | None = None
    selector: Selector | None = None
    config: dict[str, Any] | None = None
    # A Tool reference's approval override (docs/approvals.md): every export of that Tool.
    approval: str | None = None
    approval_timeout_ms: int | None = None


TOOL_REF_APPROVAL = ("approval", "approvalTimeoutMs")


def _bad_ref(ck: Checker, path: FieldPath, message: str, suggestion: str) -> None:
    ck.error(message, path, suggestion, code="E_CONFIG_INVALID_REF")


def _check_kind(kind: str, expected: tuple[str, ...], path: FieldPath, ck: Checker) -> bool:
    if kind not in KINDS:
        guess = did_you_mean(kind, KINDS)
        hint = f"did you mean {guess!r}?" if guess else f"kinds are: {', '.join(KINDS)}"
        _bad_ref(ck, path, f"unknown kind {kind!r} in reference", hint)
        return False
    if expected and kind not in expected:
        want = " or ".join(expected)
        _bad_ref(ck, path, f"{format_field(path)} must reference a {want}, not a {kind}",
                 f"point it at a {want} resource")
        return False
    return True


def parse_ref(value: Any, path: FieldPath, ck: Checker, expected: tuple[str, ...],
              *, bare_name_kind: str | None = None, wrapped: bool = True) -> ObjectRef | None:
    """Parse a ``"Kind/name"`` string or ``{kind, name, package?, apiVersion?}`` mapping, or
    either of them wrapped as ``{ref: …}`` (the RefItem form, accepted wherever a plain ref
    is: ``entryAgent``, ``modelRef``, ``connectorRef``, ``swarmRef``, ``route.agentRef``).

    ``bare_name_kind`` lets fields like ``entryAgent`` accept a plain ``name`` too.
    """
    if wrapped and isinstance(value, dict) and "ref" in value:
        for key in value:
            if key != "ref" and not key.startswith("x-"):
                ck.error(
                    f"unknown field {key!r} next to 'ref'",
                    (*path, key),
                    "a wrapped reference has only 'ref': write ref: {kind: …, name: …, package: …}",
                    code="E_CONFIG_UNKNOWN_FIELD",
                    key=True,
                )
                return None
        return parse_ref(value["ref"], (*path, "ref"), ck, expected, bare_name_kind=bare_name_kind,
                         wrapped=False)
    if isinstance(value, str):
        parts = value.split("/")
        if len(parts) == 1 and bare_name_kind and value.strip():
            return ObjectRef(bare_name_kind, value)
        if len(parts) != 2 or not parts[0] or not parts[1]:
            example = f"{expected[0] if expected else 'Kind'}/name"
            _bad_ref(ck, path, f"invalid reference {value!r}: expected 'Kind/name'",
                     f"write it as '{example}' (exactly one '/')")
            return None
        if not _check_kind(parts[0], expected, path, ck):
            return None
        return ObjectRef(parts[0], parts[1])
    if isinstance(value, dict):
        ok = True
        for key in value:
            if key not in _REF_OBJECT_KEYS and not key.startswith("x-"):
                guess = did_you_mean(key, _REF_OBJECT_KEYS)
                ck.error(
                    f"unknown field {key!r} in reference",
                    (*path, key),
                    f"did you mean {guess!r}?"
                    if guess
                    else "a reference has kind, name, package, apiVersion",
                    code="E_CONFIG_UNKNOWN_FIELD",
                    key=True,
                )
                ok = False
        kind, name, package = value.get("kind"), value.get("name"), value.get("package")
        for label, item in (("kind", kind), ("name", name)):
            if not isinstance(item, str) or not item.strip():
                _bad_ref(ck, (*path, label) if label in value else path,
                         f"reference needs a non-empty string '{label}', got {type_name(item)}",
                         "write {kind: Tool, name: my-tool} or 'Tool/my-tool'")
                ok = False
        if package is not None and (not isinstance(package, str) or not package.strip()):
            _bad_ref(ck, (*path, "package"), "reference 'package' must be a non-empty string",
                     "name the package, e.g. '@goondan/base'")
            ok = False
        api_version = value.get("apiVersion")
        if api_version is not None and not isinstance(api_version, str):
            _bad_ref(ck, (*path, "apiVersion"), "reference 'apiVersion' must be a string",
                     "use 'goondan.ai/v1' or remove it")
            ok = False
        if not ok or not _check_kind(str(kind), expected, (*path, "kind"), ck):
            return None
        return ObjectRef(str(kind), str(name), package)
    _bad_ref(ck, path, f"a reference must be 'Kind/name' or a mapping, got {type_name(value)}",
             "write 'Kind/name'")
    return None


def _parse_selector(value: dict[str, Any], path: FieldPath, ck: Checker,
                    default_kind: str) -> Selector | None:
    ok = True
    for key in value:
        if key not in ("selector", "overrides") and not key.startswith("x-"):
            ck.error(f"unknown field {key!r} next to 'selector'", (*path, key),
                     "a selector entry has only 'selector' and 'overrides'",
                     code="E_CONFIG_UNKNOWN_FIELD", key=True)
            ok = False
    sel = value["selector"]
    spath = (*path, "selector")
    if not isinstance(sel, dict):
        ck.error(f"selector must be a mapping, got {type_name(sel)}", spath,
                 "write selector: {matchLabels: {tier: base}}")
        return None
    kind = sel.get("kind", default_kind)
    name = sel.get("name")
    labels = sel.get("matchLabels", {})
    for key in sel:
        if key not in ("kind", "name", "matchLabels") and not key.startswith("x-"):
            guess = did_you_mean(key, ("kind", "name", "matchLabels"))
            ck.error(
                f"unknown field {key!r} in selector",
                (*spath, key),
                f"did you mean {guess!r}?" if guess else "a selector has kind, name, matchLabels",
                code="E_CONFIG_UNKNOWN_FIELD",
                key=True,
            )
            ok = False
    if not isinstance(kind, str) or not _check_kind(kind, (default_kind,), (*spath, "kind"), ck):
        ok = False
    if name is not None and not isinstance(name, str):
        ck.error("selector name must be a string", (*spath, "name"), "write name: my-tool")
        ok = False
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        ck.error("selector matchLabels must map strings to strings", (*spath, "matchLabels"),
                 'quote values: matchLabels: {tier: "base"}')
        ok = False
    if "name" not in sel and not labels:
        ck.error("selector needs 'name' or 'matchLabels'", spath,
                 "add matchLabels: {key: value}")
        ok = False
    overrides = value.get("overrides", {})
    if not isinstance(overrides, dict):
        ck.error(f"overrides must be a mapping, got {type_name(overrides)}", (*path, "overrides"),
                 "write overrides: {spec: {...}}")
        ok = False
    else:
        for key, item in overrides.items():
            if key not in ("spec", "metadata"):
                guess = did_you_mean(key, ("spec", "metadata"))
                ck.error(
                    f"unknown field {key!r} in overrides",
                    (*path, "overrides", key),
                    f"did you mean {guess!r}?" if guess else "overrides has 'spec' and 'metadata'",
                    code="E_CONFIG_UNKNOWN_FIELD",
                    key=True,
                )
                ok = False
            elif not isinstance(item, dict):
                ck.error(f"overrides.{key} must be a mapping", (*path, "overrides", key),
                         f"write overrides: {{{key}: {{...}}}}")
                ok = False
    if not ok:
        return None
    return Selector(str(kind), name, dict(labels), dict(overrides))


def parse_ref_item(value: Any, path: FieldPath, ck: Checker, kind: str,
                   *, allow_config: bool = False, bare_name: bool = False) -> RefItem | None:
    """Parse one list entry: ``"Kind/name"``, a ref mapping, ``{ref, config?}`` or a selector."""
    bare = kind if bare_name else None
    if isinstance(value, dict) and "selector" in value:
        selector = _parse_selector(value, path, ck, kind)
        return RefItem(path, selector=selector) if selector else None
    if isinstance(value, dict) and "ref" in value:
        allowed: tuple[str, ...] = ("ref", "config") if allow_config else ("ref",)
        if kind == "Tool":
            allowed = (*allowed, *TOOL_REF_APPROVAL)
        ok = True
        for key in value:
            if key not in allowed and not key.startswith("x-"):
                guess = did_you_mean(key, allowed)
                hint = f"did you mean {guess!r}?" if guess else f"allowed: {', '.join(allowed)}"
                if key in ("package", "kind", "name"):  # written beside `ref`, not inside it
                    hint = ("put it inside the reference: ref: {kind: " + kind + ", name: <name>, "
                            "package: \"@scope/pkg\"}")
                ck.error(f"unknown field {key!r} in {format_field(path)}", (*path, key), hint,
                         code="E_CONFIG_UNKNOWN_FIELD", key=True)
                ok = False
        config = value.get("config")
        if config is not None and not isinstance(config, dict):
            ck.error(f"config must be a mapping, got {type_name(config)}", (*path, "config"),
                     "write config: {key: value}")
            ok = False
        approval, timeout = value.get("approval"), value.get("approvalTimeoutMs")
        if approval is not None and approval not in ("required", "never"):
            ck.error(
                f"approval must be 'required' or 'never', got {approval!r}",
                (*path, "approval"),
                "write approval: required (ask a person before each call) or approval: never",
            )
            ok = False
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1
        ):
            ck.error(f"approvalTimeoutMs must be a positive integer, got {timeout!r}",
                     (*path, "approvalTimeoutMs"), "write approvalTimeoutMs: 3600000 (one hour)")
            ok = False
        ref = parse_ref(
            value["ref"], (*path, "ref"), ck, (kind,), bare_name_kind=bare, wrapped=False
        )
        if ref is None or not ok:
            return None
        return RefItem(path, ref=ref, config=config, approval=approval, approval_timeout_ms=timeout)
    ref = parse_ref(value, path, ck, (kind,), bare_name_kind=bare)
    return RefItem(path, ref=ref) if ref else None
