"""YAML files → plain JSON-like values plus a map from field path to source position.

PyYAML composes the node graph (with the libyaml C composer when available, for speed); we then
build the values ourselves so that every field keeps its ``line:col``, duplicate mapping keys are
caught, and hostile inputs stay cheap:

* files over 1 MiB and more than 100 documents are refused before or while parsing, and only
  regular files are read (a FIFO or device node is refused, never waited on);
* alias expansion is bounded (a "billion laughs" document fails after a few thousand node
  visits instead of exhausting memory), recursive aliases are refused;
* nesting deeper than :data:`MAX_DEPTH` is refused *before* the C composer sees the text, because
  libyaml's composer recurses on the C stack and crashes the interpreter on very deep input;
* only JSON-compatible tags are accepted (no ``!!python/…``, ``!!binary``, ``!!set``); a
  tagged scalar that is not what its tag says (``!!int "x"``) and numbers longer than
  :data:`MAX_NUMBER_DIGITS` digits are diagnostics.

Problems come back as :class:`Diagnostic` values, never as exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.errors import Diagnostic

__all__ = [
    "MAX_DEPTH",
    "MAX_DOCUMENTS",
    "MAX_FILE_BYTES",
    "MAX_NUMBER_DIGITS",
    "FieldPath",
    "YamlDocument",
    "format_field",
    "read_yaml_file",
]

MAX_FILE_BYTES = 1024 * 1024
MAX_DOCUMENTS = 100
MAX_DEPTH = 64
# Python refuses int() of more than 4,300 digits; no configuration needs a fraction of that.
MAX_NUMBER_DIGITS = 1000
# Alias expansion may visit at most this many times the distinct nodes (plus slack for small
# documents that legitimately reuse an anchor a lot).
ALIAS_FACTOR = 10
ALIAS_SLACK = 10_000

FieldPath = tuple[str | int, ...]

@dataclass
class YamlDocument:
    """One YAML document of a file: its value and where each field came from."""

    file: Path
    display: str
    index: int
    data: Any
    line: int
    column: int
    locations: dict[FieldPath, tuple[int, int]] = field(default_factory=dict)
    key_locations: dict[FieldPath, tuple[int, int]] = field(default_factory=dict)
    problems: list[Diagnostic] = field(default_factory=list)  # e.g. duplicate keys

    def position(self, path: FieldPath, *, key: bool = False) -> tuple[int, int]:
        """Best known ``(line, col)`` for ``path``: the key (if asked), value, or nearest parent."""
        probe = path
        while True:
            if key and probe in self.key_locations:
                return self.key_locations[probe]
            if probe in self.locations:
                return self.locations[probe]
            if not probe:
                return (self.line, self.column)
            probe = probe[:-1]


def format_field(path: FieldPath) -> str:
    """``("spec", "tools", 0, "ref")`` → ``spec.tools[0].ref``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = part
    return out



def read_yaml_file(path: Path, display: str) -> tuple[list[YamlDocument], list[Diagnostic]]:
    """Parse every document of ``path``; never raises for bad input (see
    :mod:`goondan.config.yamlparse`).

    PyYAML is imported on the first call: a start that reuses a cached bundle
    (docs/bundle-cache.md) never pays for it.
    """
    from goondan.config.yamlparse import parse_yaml_file

    return parse_yaml_file(path, display)
