"""The PyYAML half of :mod:`goondan.config.yamlsource`: compose, bound and build the values.

Kept apart so that the types (:class:`~goondan.config.yamlsource.YamlDocument`, field paths)
import without PyYAML; see the limits described in :mod:`goondan.config.yamlsource`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from goondan.config.sourcefile import FileTooLargeError, NotRegularFileError, read_regular_file
from goondan.config.yamlsource import (
    ALIAS_FACTOR,
    ALIAS_SLACK,
    MAX_DEPTH,
    MAX_DOCUMENTS,
    MAX_FILE_BYTES,
    MAX_NUMBER_DIGITS,
    FieldPath,
    YamlDocument,
    format_field,
)
from goondan.errors import Diagnostic

__all__ = ["parse_yaml_file"]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TAG = "tag:yaml.org,2002:"
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
# A line whose leading run of indentation and compact-collection indicators is this long could
# nest deeply; such files get an exact (event-based, non-recursive) depth check first.
_DEEP_PREFIX = re.compile(r"^[ \t?:\-]{48,}", re.MULTILINE)


class _Problem(Exception):
    """Internal: a document-level problem found while building values."""

    def __init__(self, code: str, message: str, line: int, column: int, suggestion: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.column = column
        self.suggestion = suggestion


def _mark(node: yaml.Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


class _Builder:
    """Turns one composed node graph into values while recording positions."""

    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc
        self.seen: set[int] = set()
        self.active: set[int] = set()
        self.visits = 0

    def build(self, node: yaml.Node, path: FieldPath, depth: int) -> Any:
        self.visits += 1
        ident = id(node)
        self.seen.add(ident)
        if self.visits > ALIAS_FACTOR * len(self.seen) + ALIAS_SLACK:
            line, col = _mark(node)
            raise _Problem(
                "E_CONFIG_ALIAS_LIMIT",
                "YAML alias expansion is too large (possible alias bomb)",
                line, col,
                "write the values out instead of nesting anchors and aliases",
            )
        if depth > MAX_DEPTH:
            line, col = _mark(node)
            raise _Problem(
                "E_CONFIG_TOO_DEEP", f"YAML nesting deeper than {MAX_DEPTH} levels", line, col,
                "flatten the structure",
            )
        self.doc.locations[path] = _mark(node)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if ident in self.active:
            line, col = _mark(node)
            raise _Problem(
                "E_CONFIG_ALIAS_LIMIT", "recursive YAML alias", line, col,
                "an anchor must not be used inside its own value",
            )
        self.active.add(ident)
        try:
            if isinstance(node, yaml.SequenceNode):
                self._check_tag(node, "seq")
                return [
                    self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)
                ]
            assert isinstance(node, yaml.MappingNode)  # the composer makes only these three
            self._check_tag(node, "map")
            return self._mapping(node, path, depth)
        finally:
            self.active.discard(ident)

    def _check_tag(self, node: yaml.Node, expected: str) -> None:
        if node.tag != _TAG + expected:
            line, col = _mark(node)
            raise _Problem(
                "E_CONFIG_PARSE_ERROR",
                f"unsupported YAML tag {node.tag!r}",
                line,
                col,
                "remove the tag; only plain YAML (mappings, lists, "
                "strings, numbers, booleans, null) is allowed",
            )

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        tag = node.tag
        if tag == _TAG + "str":
            return node.value
        if tag == _TAG + "null":
            return None
        if tag in (_TAG + "bool", _TAG + "int", _TAG + "float"):
            return self._number(node)
        if tag == _TAG + "timestamp":
            return node.value  # dates stay strings: JSON has no date type
        line, col = _mark(node)
        raise _Problem(
            "E_CONFIG_PARSE_ERROR",
            f"unsupported YAML tag {tag!r}",
            line,
            col,
            "remove the tag; only plain YAML (mappings, lists, "
            "strings, numbers, booleans, null) is allowed",
        )

    def _number(self, node: yaml.ScalarNode) -> Any:
        """A bool/int/float scalar; explicit tags on bad text (``!!int "x"``) are diagnostics."""
        kind = node.tag[len(_TAG):]
        digits = sum(c.isdigit() for c in node.value)
        if kind != "bool" and digits > MAX_NUMBER_DIGITS:
            line, col = _mark(node)
            raise _Problem(
                "E_CONFIG_PARSE_ERROR",
                f"number has {digits} digits; the limit is {MAX_NUMBER_DIGITS}",
                line,
                col,
                "quote the value to keep it as a string, or use a smaller number",
            )
        try:
            return _CONSTRUCTOR.construct_object(node)
        except (ValueError, KeyError, TypeError, OverflowError, yaml.YAMLError):
            line, col = _mark(node)
            raise _Problem(
                "E_CONFIG_PARSE_ERROR",
                f"{node.value[:40]!r} is not a valid YAML {kind}",
                line,
                col,
                f"remove the '!!{kind}' tag or write a valid {kind}",
            ) from None

    def _key(self, node: yaml.Node) -> str:
        if not isinstance(node, yaml.ScalarNode):
            line, col = _mark(node)
            raise _Problem(
                "E_CONFIG_PARSE_ERROR", "mapping keys must be plain strings", line, col,
                "use a string key",
            )
        return str(node.value)

    def _mapping(self, node: yaml.MappingNode, path: FieldPath, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag == _TAG + "merge":
                merges.append(value_node)
                continue
            key = self._key(key_node)
            sub = (*path, key)
            if key in out:
                line, col = _mark(key_node)
                self.doc.problems.append(
                    Diagnostic(
                        "E_CONFIG_DUPLICATE_KEY",
                        f"duplicate key {key!r} in the same mapping",
                        file=self.doc.display,
                        line=line,
                        column=col,
                        field=_field_or_none(sub),
                        suggestion="remove one of the two entries; "
                        "YAML would silently keep only the last",
                    )
                )
            self.doc.key_locations[sub] = _mark(key_node)
            out[key] = self.build(value_node, sub, depth + 1)
        for merge in merges:
            sources = merge.value if isinstance(merge, yaml.SequenceNode) else [merge]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    line, col = _mark(source)
                    raise _Problem(
                        "E_CONFIG_PARSE_ERROR",
                        "a '<<' merge key needs a mapping (or a list of mappings)",
                        line,
                        col,
                        "merge an anchored mapping: '<<: *defaults'",
                    )
                merged = self.build(source, path, depth + 1)
                for key, value in merged.items():
                    out.setdefault(key, value)
        return out


def _field_or_none(path: FieldPath) -> str | None:
    return format_field(path) or None


def _too_deep_at(text: str) -> tuple[int, int] | None:
    """Where nesting first exceeds :data:`MAX_DEPTH` (``None`` if it never does).

    Uses the non-recursive event parser, and only for text that could nest that deep.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH and not _DEEP_PREFIX.search(text):
        return None
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return None


def _diag(code: str, message: str, display: str, suggestion: str, line: int | None = None,
          column: int | None = None) -> Diagnostic:
    """A file-level diagnostic."""
    return Diagnostic(code, message, file=display, line=line, column=column, suggestion=suggestion)


def _read_text(path: Path, display: str) -> tuple[str | None, Diagnostic | None]:
    try:
        raw = read_regular_file(path, limit=MAX_FILE_BYTES)
    except FileTooLargeError:
        return None, _diag(
            "E_CONFIG_FILE_TOO_LARGE", f"file is larger than {MAX_FILE_BYTES} bytes (1 MiB)",
            display, "split the resources over several YAML files",
        )
    except NotRegularFileError as exc:
        return None, _diag(
            "E_CONFIG_FILE_UNREADABLE", f"file is {exc.what}, not a regular file", display,
            "replace it with a regular YAML file, or give it a name goondan does not scan",
        )
    except OSError as exc:
        return None, _diag(
            "E_CONFIG_FILE_UNREADABLE", f"cannot read file: {exc.strerror or exc}", display,
            "check that the file exists and is readable by the current user",
        )
    if b"\x00" in raw:
        return None, _diag(
            "E_CONFIG_FILE_UNREADABLE", "file is binary, not YAML text", display,
            "remove the file or give it a name goondan does not scan",
        )
    try:
        return raw.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        return None, _diag(
            "E_CONFIG_FILE_UNREADABLE", f"file is not valid UTF-8 (byte {exc.start})", display,
            "save the file as UTF-8",
        )


def parse_yaml_file(path: Path, display: str) -> tuple[list[YamlDocument], list[Diagnostic]]:
    """Parse every document of ``path``; never raises for bad input.

    Returns the non-empty documents and the file-level diagnostics; per-document problems that
    do not stop the document (duplicate keys) are in :attr:`YamlDocument.problems`. A syntax error
    stops the file (documents before it are kept).
    """
    text, problem = _read_text(path, display)
    if problem is not None or text is None:
        return [], [problem] if problem else []
    diagnostics: list[Diagnostic] = []
    documents: list[YamlDocument] = []
    try:
        deep = _too_deep_at(text)
        if deep is not None:
            return [], [_diag(
                "E_CONFIG_TOO_DEEP", f"YAML nesting deeper than {MAX_DEPTH} levels", display,
                "flatten the structure", *deep,
            )]
        for index, node in enumerate(yaml.compose_all(text, Loader=_Loader)):
            if index >= MAX_DOCUMENTS:
                where = _mark(node) if node is not None else (None, None)
                diagnostics.append(_diag(
                    "E_CONFIG_TOO_MANY_DOCUMENTS",
                    f"file has more than {MAX_DOCUMENTS} YAML documents", display,
                    "split the resources over several YAML files", *where,
                ))
                return [], diagnostics
            if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _TAG + "null"):
                continue
            line, col = _mark(node)
            doc = YamlDocument(path, display, index, None, line, col)
            try:
                doc.data = _Builder(doc).build(node, (), 0)
            except _Problem as exc:
                diagnostics.extend(doc.problems)
                diagnostics.append(
                    _diag(exc.code, exc.message, display, exc.suggestion, exc.line, exc.column)
                )
                continue
            documents.append(doc)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem_text = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        diagnostics.append(
            _diag(
                "E_CONFIG_PARSE_ERROR",
                f"YAML syntax error: {problem_text}",
                display,
                "fix the YAML syntax at the marked position (check indentation, quotes and colons)",
                mark.line + 1 if mark is not None else None,
                mark.column + 1 if mark is not None else None,
            )
        )
    except RecursionError:
        diagnostics.append(_diag(
            "E_CONFIG_TOO_DEEP", f"YAML nesting deeper than {MAX_DEPTH} levels", display,
            "flatten the structure",
        ))
    return documents, diagnostics
