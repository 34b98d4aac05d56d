"""No logging call passes an ``extra`` key that a :class:`logging.LogRecord` already has.

``logging`` raises ``KeyError("Attempt to overwrite 'process' in LogRecord")`` for such a key
— at the moment the message is logged, which is usually a rare path (a grace period running
out, a failure): an agent that did not drain in time was never killed because its timeout
warning raised (tests/swarm/test_cancelled_shutdown.py). This check finds the mistake in every
module, before the rare path runs.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import goondan

ROOT = Path(goondan.__file__).parent
RESERVED = set(vars(logging.LogRecord("n", 0, "p", 0, "m", None, None))) | {"message", "asctime"}


def _reserved_extra_keys(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                found.extend((node.lineno, key.value) for key in keyword.value.keys
                             if isinstance(key, ast.Constant) and key.value in RESERVED)
    return found


def test_the_check_finds_a_reserved_key() -> None:
    assert _reserved_extra_keys('log.warning("x", extra={"process": "a", "ok": 1})') == [
        (1, "process")]


def test_no_logging_extra_overwrites_a_log_record_attribute() -> None:
    bad = [f"{path.relative_to(ROOT.parent)}:{line}: extra key {key!r}"
           for path in sorted(ROOT.rglob("*.py"))
           for line, key in _reserved_extra_keys(path.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)
