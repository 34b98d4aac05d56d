"""The one rule for text that is not valid Unicode: it becomes U+FFFD (docs/security.md).

Text reaches goondan from many places that can carry invalid data: piped stdin and argv
(Python decodes undecodable bytes to lone surrogates ``\\udc80``–``\\udcff``), file names in
a workdir, tool output, a provider's JSON (``"\\udcff"`` is a legal JSON escape that decodes to
a lone surrogate), connector payloads and old conversation files. A lone surrogate cannot be
encoded as UTF-8, so one of them in a conversation would break every later provider request,
IPC frame and JSONL line. The rule, applied at each of those boundaries:

* every byte sequence that is not valid UTF-8 decodes to U+FFFD (Python's ``errors="replace"``);
* every lone surrogate code point in a string becomes one U+FFFD;
* a *paired* high+low surrogate (two code points, as ``\\ud83d\\ude00``) becomes the character
  it encodes, the way a JSON parser would have read it.

The functions return their argument itself when it is already valid, so calling them on hot
paths costs one scan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["REPLACEMENT", "clean_bytes", "clean_json", "clean_text", "dumps_compact", "is_clean"]

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def is_clean(text: str) -> bool:
    """True when ``text`` holds no surrogate code point (it encodes as UTF-8)."""
    return text.isascii() or _SURROGATE.search(text) is None


def clean_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD and surrogate pairs joined."""
    if is_clean(text):
        return text
    # UTF-16 round trip: pairs decode to their character, lone halves to U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_bytes(data: bytes) -> str:
    """Decode ``data`` as UTF-8, every invalid sequence becoming U+FFFD."""
    return data.decode("utf-8", "replace")


def _make_dumps() -> Callable[[Any], str]:
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    try:
        from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - CPython always has the accelerator
        return encoder.encode
    if c_make_encoder is None:  # pragma: no cover
        return encoder.encode
    # Made once: JSONEncoder.encode builds a new C encoder at every call, about a fifth of the
    # cost of encoding a small dict. No circular check (markers=None): the values are JSON read
    # from disk or built by the runtime, never self-referencing.
    c_encode = c_make_encoder(
        None, encoder.default, encode_basestring, None, ":", ",", False, False, True
    )

    def dumps(value: Any) -> str:
        if isinstance(value, str):
            return str(encode_basestring(value))
        return "".join(c_encode(value, 0))

    return dumps


dumps_compact: Callable[[Any], str] = _make_dumps()
dumps_compact.__doc__ = """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``,
faster (same text).

Measured (``scripts/bench_turn.py``'s turns, CPU medians of 4 rounds alternating with a copy
of the tree where this is that ``json.dumps`` call): with ``json.dumps`` the K=0 turn costs
19 % more and the 20-step turn 18 %."""


def clean_json(value: Any) -> Any:
    """``value`` (a JSON-like tree) with every string key and value passed through
    :func:`clean_text`. Returns ``value`` itself when nothing needed cleaning, else a copy of
    the containers on the way to each change."""
    if isinstance(value, dict | list):
        # Every message passes here: one C-level encoding proves a JSON tree clean (a lone
        # surrogate cannot be encoded as UTF-8) faster than walking it in Python. Measured
        # (scripts/bench_turn.py's turns, CPU medians of 4 rounds alternating with a copy of the
        # tree that always walks): the walk costs the K=0 turn 13 % more, the 20-step turn 20 %.
        try:
            dumps_compact(value).encode("utf-8")
        except (UnicodeEncodeError, TypeError, ValueError, RecursionError):
            return _clean_json(value)
        return value
    return _clean_json(value)


def _clean_json(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        changed: dict[Any, Any] | None = None
        for index, (key, item) in enumerate(value.items()):
            new_key = clean_text(key) if isinstance(key, str) else key
            new_item = _clean_json(item)
            if changed is None and (new_key is not key or new_item is not item):
                changed = dict(list(value.items())[:index])
            if changed is not None:
                changed[new_key] = new_item
        return value if changed is None else changed
    if isinstance(value, list | tuple):
        items = [_clean_json(item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value
