"""Resolving ObjectRefs and selectors against loaded resources (docs/configuration.md "References").

A scope is one package: ``None`` for the local bundle, else the dependency's package name. A
ref with ``package`` looks only in that scope. An unscoped ref looks in the referrer's own scope
first, then across every other scope; two or more hits there are ambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass

from goondan.config.envelope import Resource
from goondan.config.refs import ObjectRef, Selector
from goondan.config.schema import did_you_mean

__all__ = ["Index", "Resolution"]


@dataclass
class Resolution:
    """Outcome of one lookup: the resource, or why not (``code``, ``message``, ``suggestion``)."""

    resource: Resource | None
    code: str | None = None
    message: str | None = None
    suggestion: str | None = None


class Index:
    """Resources by scope and ``(kind, name)``, in load order."""

    def __init__(self, resources: list[Resource], local_package: str | None) -> None:
        self.local_package = local_package
        self.resources = resources
        self.scopes: dict[str | None, dict[tuple[str, str], Resource]] = {}
        for res in resources:
            self.scopes.setdefault(res.package, {}).setdefault((res.kind, res.name), res)

    def scope_of(self, package: str | None) -> str | None:
        """Map a package name to a scope key (the local package's own name → ``None``)."""
        return None if package is not None and package == self.local_package else package

    def resolve(self, ref: ObjectRef, referrer: Resource | None) -> Resolution:
        """Find the target of ``ref`` as seen from ``referrer``."""
        key = (ref.kind, ref.name)
        if ref.package is not None:
            scope = self.scope_of(ref.package)
            if scope not in self.scopes:
                known = sorted(str(s) for s in self.scopes if s is not None)
                return Resolution(
                    None,
                    "E_CONFIG_REF_NOT_FOUND",
                    f"{ref}: package {ref.package!r} is not loaded",
                    f"add it to the Package dependencies (loaded: {', '.join(known) or 'none'})",
                )
            found = self.scopes[scope].get(key)
            if found is None:
                return self._missing(ref, [scope])
            return Resolution(found)
        own = referrer.package if referrer is not None else None
        found = self.scopes.get(own, {}).get(key)
        if found is not None:
            return Resolution(found)
        hits = [s[key] for scope, s in self.scopes.items() if scope != own and key in s]
        if len(hits) == 1:
            return Resolution(hits[0])
        if len(hits) > 1:
            where = ", ".join(h.package or "(local bundle)" for h in hits)
            return Resolution(
                None,
                "E_CONFIG_REF_AMBIGUOUS",
                f"{ref.kind}/{ref.name} exists in several packages: {where}",
                "add 'package:' to the reference: {kind: ..., name: ..., package: ...}",
            )
        return self._missing(ref, list(self.scopes))

    def _missing(self, ref: ObjectRef, scopes: list[str | None]) -> Resolution:
        names = sorted({n for s in scopes for (k, n) in self.scopes.get(s, {}) if k == ref.kind})
        guess = did_you_mean(ref.name, names)
        if guess:
            hint = f"did you mean '{ref.kind}/{guess}'?"
        elif names:
            hint = f"known {ref.kind} resources: {', '.join(names[:10])}"
        else:
            hint = f"define a {ref.kind} named {ref.name!r}"
        return Resolution(None, "E_CONFIG_REF_NOT_FOUND", f"{ref.kind}/{ref.name} not found", hint)

    def select(self, selector: Selector, referrer: Resource | None) -> list[Resource]:
        """Resources of the selector's kind in the referrer's scope matching name and labels."""
        scope = referrer.package if referrer is not None else None
        out: list[Resource] = []
        for res in self.resources:
            if res.kind != selector.kind or res.package != scope:
                continue
            if selector.name is not None and res.name != selector.name:
                continue
            labels = res.labels
            if all(labels.get(k) == v for k, v in selector.match_labels.items()):
                out.append(res.with_overrides(selector.overrides) if selector.overrides else res)
        return out

    def of_kind(self, kind: str) -> list[Resource]:
        return [r for r in self.resources if r.kind == kind]
