"""Semantic versions and npm-style ranges, as Package ``dependencies[].version`` uses them.

Supported range syntax (docs/packages.md): exact ``1.2.3`` / ``=1.2.3`` / ``v1.2.3``,
comparators ``>`` ``>=`` ``<`` ``<=``, caret ``^1.2.3``, tilde ``~1.2.3``, wildcards ``1.x``,
``1.2.*``, ``*`` and ``""``, hyphen ranges ``1.2.3 - 2.0.0``, space = AND, ``||`` = OR.
Pre-releases follow npm: ``1.0.0-alpha.3`` satisfies a range only when a comparator of the
same ``MAJOR.MINOR.PATCH`` carries a pre-release too (``^0.0.3-alpha17`` matches
``0.0.3-alpha20`` but not ``0.0.4-alpha1``).

Python distribution versions (PEP 440) are mapped onto semver by :func:`from_python`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Version", "from_python", "parse_range", "parse_version", "satisfies", "valid_range"]

_VERSION = re.compile(
    r"^v?(\d+)(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$"
)
_COMPARATOR = re.compile(r"^(\^|~>?|>=|<=|>|<|=)?\s*(.*)$")


@dataclass(frozen=True, order=False)
class Version:
    """``MAJOR.MINOR.PATCH[-PRERELEASE]``; comparison follows semver precedence."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()

    def key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        """A sort key: a release sorts after its pre-releases; numeric ids before text ids."""
        pre = tuple((0, p) if isinstance(p, int) else (1, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, pre)

    def __lt__(self, other: Version) -> bool:
        return self.key() < other.key()

    def __le__(self, other: Version) -> bool:
        return self.key() <= other.key()

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return base + ("-" + ".".join(str(p) for p in self.pre) if self.pre else "")


def _pre(text: str | None) -> tuple[int | str, ...]:
    if not text:
        return ()
    return tuple(int(p) if p.isdigit() else p for p in text.split("."))


def parse_version(text: str) -> Version | None:
    """A full version (all three numbers), or ``None``."""
    m = _VERSION.match(text.strip())
    if not m or m.group(2) is None or m.group(3) is None or not m.group(2).isdigit() \
            or not m.group(3).isdigit():
        return None
    return Version(int(m.group(1)), int(m.group(2)), int(m.group(3)), _pre(m.group(4)))


def from_python(text: str) -> Version | None:
    """A PEP 440 version as semver: ``1.2`` → ``1.2.0``, ``1.2.0a1`` → ``1.2.0-a1``,
    ``1.2.0.dev3`` → ``1.2.0-dev3``, ``1.2.0.post1`` → ``1.2.0``; ``None`` if unusable."""
    m = re.match(
        r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?[-_.]?((?:a|b|rc|alpha|beta|c|dev|pre)[-_.]?\d*)?"
        r"(?:[-_.]?(?:post|r)\d*)?(?:\.dev(\d+))?(?:\+.*)?$",
        text.strip().lower(),
    )
    if not m:
        return None
    pre = m.group(4) or (f"dev{m.group(5)}" if m.group(5) else None)
    return Version(int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0), _pre(pre))


# A comparator is (operator, Version); a range is a list of AND-sets joined by OR.
_Comparator = tuple[str, Version]


def _partial(text: str) -> tuple[list[int | None], tuple[int | str, ...]] | None:
    m = _VERSION.match(text)
    if not m:
        return None
    parts: list[int | None] = []
    for group in (m.group(1), m.group(2), m.group(3)):
        parts.append(int(group) if group is not None and group.isdigit() else None)
    # Anything after a wildcard is a wildcard too.
    for i in range(1, 3):
        if parts[i - 1] is None:
            parts[i] = None
    return parts, _pre(m.group(4))


def _expand(op: str, text: str) -> list[_Comparator] | None:
    if text in ("", "*", "x", "X"):
        return []
    parsed = _partial(text)
    if parsed is None:
        return None
    (major, minor, patch), pre = parsed
    assert major is not None
    low = Version(major, minor or 0, patch or 0, pre)
    if op == "^":
        if major > 0 or minor is None:
            high = Version(major + 1, 0, 0, (0,))
        elif minor > 0 or patch is None:
            high = Version(0, minor + 1, 0, (0,))
        else:
            high = Version(0, 0, (patch or 0) + 1, (0,))
        return [(">=", low), ("<", high)]
    if op in ("~", "~>"):
        high = (
            Version(major + 1, 0, 0, (0,)) if minor is None else Version(major, minor + 1, 0, (0,))
        )
        return [(">=", low), ("<", high)]
    if minor is None or patch is None:  # a partial version is a range of its own
        high = (
            Version(major + 1, 0, 0, (0,)) if minor is None else Version(major, minor + 1, 0, (0,))
        )
        if op in ("", "="):
            return [(">=", low), ("<", high)]
        if op == ">":
            return [(">=", high)]
        if op == "<=":
            return [("<", high)]
        return [(op, low)]
    return [(op or "=", low)]


def _parse_range(text: str) -> list[list[_Comparator]] | None:
    alternatives: list[list[_Comparator]] = []
    for alt in text.split("||"):
        alt = alt.strip()
        hyphen = re.match(r"^(\S+)\s+-\s+(\S+)$", alt)
        if hyphen:
            low, high = _expand(">=", hyphen.group(1)), _expand("<=", hyphen.group(2))
            if low is None or high is None:
                return None
            alternatives.append(low + high)
            continue
        comparators: list[_Comparator] = []
        tokens = re.findall(r"(?:\^|~>?|>=|<=|>|<|=)?\s*[^\s<>=^~]+|(?:\^|~>?|>=|<=|>|<|=)$", alt)
        for token in tokens:
            m = _COMPARATOR.match(token.strip())
            assert m is not None
            expanded = _expand(m.group(1) or "", m.group(2).strip())
            if expanded is None:
                return None
            comparators.extend(expanded)
        alternatives.append(comparators)
    return alternatives


def parse_range(text: str) -> list[list[tuple[str, Version]]] | None:
    """The range as OR-alternatives of AND-ed ``(operator, Version)`` comparators, or ``None``.

    Upper bounds of ``^``/``~``/partial versions are ``<X.Y.Z-0`` (pre-release ``(0,)``)."""
    return _parse_range(text)


def valid_range(text: str) -> bool:
    """True when ``text`` is a range :func:`satisfies` understands."""
    return _parse_range(text) is not None


def _test(op: str, a: Version, b: Version) -> bool:
    ka, kb = a.key(), b.key()
    return {
        "=": ka == kb, ">": ka > kb, ">=": ka >= kb, "<": ka < kb, "<=": ka <= kb,
    }[op]


def satisfies(version: Version | str, range_text: str) -> bool:
    """Whether ``version`` is in ``range_text`` (an unparsable range or version → ``False``)."""
    v = parse_version(version) if isinstance(version, str) else version
    alternatives = _parse_range(range_text)
    if v is None or alternatives is None:
        return False
    for comparators in alternatives:
        if not all(_test(op, v, bound) for op, bound in comparators):
            continue
        if v.pre and not any(
            bound.pre and (bound.major, bound.minor, bound.patch) == (v.major, v.minor, v.patch)
            and not (op == "<" and bound.pre == (0,))
            for op, bound in comparators
        ):
            continue  # npm: a pre-release needs a comparator on its own MAJOR.MINOR.PATCH
        return True
    return False
