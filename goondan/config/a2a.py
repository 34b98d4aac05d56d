"""The ``spec.a2a`` block of a Tool resource: a remote A2A agent as a source of tools
(docs/tools.md "A2A agents", docs/serving.md)::

    spec:
      a2a:
        url: http://127.0.0.1:8100/a2a      # the agent's base URL or its JSON-RPC endpoint
        headers: {Authorization: {valueFrom: {env: PEER_TOKEN}}}   # ValueSource map
        timeoutMs: 120000                   # one call: the remote Turn until its answer
      exports: [assistant]                  # optional allow-list of the card's skill ids

The card (``<origin>/.well-known/agent-card.json``) is read when the first step builds its
catalog; each skill becomes a tool ``<Tool>__<skill>`` (:mod:`goondan.a2a.provider`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.config.schema import Checker, Custom, Int, MapOf, Obj
from goondan.config.values import check_value_source, resolve_value
from goondan.config.yamlsource import FieldPath

__all__ = ["A2A_SCHEMA", "DEFAULT_A2A_TIMEOUT_MS", "A2aAgentSpec", "a2a_agent_spec"]

DEFAULT_A2A_TIMEOUT_MS = 300_000


def _url(value: Any, path: FieldPath, ck: Checker) -> bool:
    if not isinstance(value, str) or not re.match(r"^https?://[^\s/]+", value):
        ck.error(f"a2a.url {value!r} is not an http(s) URL", path,
                 "write url: http://127.0.0.1:8100/a2a", code="E_CONFIG_A2A")
        return False
    return True


def _a2a_rule(value: dict[str, Any], path: FieldPath, ck: Checker) -> None:
    if "url" not in value:
        ck.error("a2a needs 'url' (the remote agent's address)", path,
                 "write a2a: {url: http://127.0.0.1:8100/a2a}", code="E_CONFIG_A2A")


A2A_SCHEMA = Obj({
    "url": Custom(_url),
    "headers": MapOf(Custom(check_value_source)),
    "timeoutMs": Int(),
}, rules=(_a2a_rule,))


@dataclass
class A2aAgentSpec:
    """One remote A2A agent as an Agent uses it (a Tool resource with ``spec.a2a``)."""

    name: str                                   # the Tool resource name: catalog prefix
    package: str | None
    url: str
    headers: dict[str, Any] = field(default_factory=dict)    # raw ValueSources
    timeout_ms: int = DEFAULT_A2A_TIMEOUT_MS
    exports: list[str] | None = None
    root: Path = Path()

    def resolve_headers(self, env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
        """(HTTP headers, names left unset)."""
        out: dict[str, str] = {}
        unset: list[str] = []
        for key, source in self.headers.items():
            value = resolve_value(source, env, field=f"headers.{key}")
            if value is None:
                unset.append(key)
            else:
                out[key] = value
        return out, unset


def a2a_agent_spec(
    name: str, package: str | None, spec: dict[str, Any], root: Path
) -> A2aAgentSpec:
    """The :class:`A2aAgentSpec` of a validated Tool ``spec`` with an ``a2a`` block."""
    block = spec["a2a"]
    exports = spec.get("exports")
    return A2aAgentSpec(
        name=name, package=package, url=str(block["url"]), headers=dict(block.get("headers") or {}),
        timeout_ms=int(block.get("timeoutMs") or DEFAULT_A2A_TIMEOUT_MS),
        exports=[str(e) for e in exports] if isinstance(exports, list) else None, root=root)
