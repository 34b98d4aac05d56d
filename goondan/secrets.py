"""Process-wide secret masking.

Every secret value goondan resolves (API keys, connection secrets) is registered here; log
records, error messages and ``inspect`` output pass through :func:`mask` so a secret never
reaches a terminal or a file. Values shorter than 4 characters are not registered (masking
them would garble ordinary text).

Text cut short (a tool's size cap, a clipped line) may end inside a secret: :func:`mask_cut`
also hides a secret's first ``MIN_CUT_PREFIX`` or more characters at the end of the text.
Streamed text arrives in pieces that may split a secret: :class:`StreamMasker` holds back the
end of what it was fed while it could still be the start of a secret.
"""

from __future__ import annotations

import logging
import threading

__all__ = [
    "MASK",
    "MIN_CUT_PREFIX",
    "SecretMaskingFilter",
    "StreamMasker",
    "is_secret",
    "mask",
    "mask_cut",
    "register_secret",
    "registered_count",
]

MASK = "***"
# The shortest start of a secret hidden at a cut: shorter ones ("sk-", "ghp_") say nothing.
MIN_CUT_PREFIX = 8
_lock = threading.Lock()
_secrets: set[str] = set()
# The secrets longest first, rebuilt at each registration: mask() runs for every string of every
# tool output, and sorting under the lock there dominated small tool calls.
_ordered: tuple[str, ...] = ()


def register_secret(value: str | None) -> None:
    """Remember ``value`` so that :func:`mask` hides it from now on."""
    global _ordered
    if value and len(value) >= 4:
        with _lock:
            if value not in _secrets:
                _secrets.add(value)
                _ordered = tuple(sorted(_secrets, key=len, reverse=True))


def is_secret(value: str) -> bool:
    """True when ``value`` is (exactly) a registered secret."""
    with _lock:
        return value in _secrets


def registered_count() -> int:
    return len(_secrets)


def mask(text: str) -> str:
    """Replace every registered secret in ``text`` with ``***`` (longest first)."""
    values = _ordered  # one atomic read of an immutable tuple: no lock needed
    if not values or not text:
        return text
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def _partial_tail(text: str, value: str, minimum: int) -> int:
    """Length of the longest end of ``text`` that is a proper start of ``value`` (at least
    ``minimum`` characters long), else 0."""
    longest = min(len(value) - 1, len(text))
    if longest < minimum:
        return 0
    window = text[len(text) - longest:]
    first = value[0]
    start = window.find(first)
    while start != -1 and longest - start >= minimum:
        if value.startswith(window[start:]):
            return longest - start
        start = window.find(first, start + 1)
    return 0


def mask_cut(text: str) -> str:
    """:func:`mask`, and a registered secret's start of ``MIN_CUT_PREFIX`` or more characters
    at the end of ``text`` replaced by ``***``: for text that was cut short (a size cap)."""
    text = mask(text)
    cut = max((_partial_tail(text, value, MIN_CUT_PREFIX) for value in _ordered), default=0)
    return text[: len(text) - cut] + MASK if cut else text


class StreamMasker:
    """Masks text that arrives in pieces (streamed model output) although a piece may end in
    the middle of a secret: :meth:`feed` returns what is safe to show now and keeps back the
    end that could still be a secret's start; :meth:`flush` returns the rest, masked."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        buffer = mask(self._held + text)
        keep = max((_partial_tail(buffer, value, 1) for value in _ordered), default=0)
        self._held = buffer[len(buffer) - keep:] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return mask(held)


class SecretMaskingFilter(logging.Filter):
    """Logging filter that masks secrets in the formatted message."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _secrets:
            message = record.getMessage()
            masked = mask(message)
            if masked != message:
                record.msg = masked
                record.args = None
        return True
