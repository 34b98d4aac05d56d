"""Ingress routing: which agent and conversation an event of a Connection goes to.

Pure functions over plain values (docs/connectors.md, "Routing rules"), so every rule of the
table is testable without processes:

1. ``ingress.rules`` are evaluated in order; the first match wins.
2. A rule matches when every given condition holds: ``match.event`` equals the event's name and
   each ``match.properties[k]`` equals ``properties[k]`` (compared as strings). A rule without
   ``match`` (or with an empty one) matches everything.
3. The agent is the matched rule's ``route.agentRef``, else the Swarm's entry agent. A
   Connection without rules sends every event to the entry agent; with rules of which none
   matches, the event is dropped (``None``; the ingress logs a warning) — Decision 15.
4. The conversation key: no rules at all → the event's own ``instanceKey``; a non-blank
   ``route.instanceKey`` → it; ``route.instanceKeyProperty`` with a non-blank property value →
   ``instanceKeyPrefix`` (default ``""``) + that value; otherwise the event's own key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goondan.connectors.event import ConnectorEvent

__all__ = ["IngressRule", "Route", "match_rule", "parse_rules", "route_event", "string_value"]


def string_value(value: Any) -> str:
    """A property value as the string it is compared as (``true``/``false`` for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class IngressRule:
    """One ``ingress.rules`` entry with its agent reference already resolved to a name."""

    event: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    agent: str | None = None
    instance_key: str | None = None
    instance_key_property: str | None = None
    instance_key_prefix: str | None = None


@dataclass(frozen=True)
class Route:
    """Where an event goes; ``rule`` is the index of the matched rule (``None``: the
    Connection has no rules)."""

    agent: str
    instance_key: str
    rule: int | None


def match_rule(rule: IngressRule, event: ConnectorEvent) -> bool:
    """True when every condition of ``rule`` holds for ``event`` (no condition: always)."""
    if rule.event is not None and rule.event != event.name:
        return False
    for key, expected in rule.properties.items():
        if key not in event.properties or event.properties[key] != string_value(expected):
            return False
    return True


def route_event(
    event: ConnectorEvent, rules: Sequence[IngressRule], entry_agent: str
) -> Route | None:
    """Route ``event`` by ``rules`` (first match wins) with ``entry_agent`` as the default;
    ``None`` when there are rules and none matches (the event is dropped)."""
    for index, rule in enumerate(rules):
        if match_rule(rule, event):
            return Route(rule.agent or entry_agent, _instance_key(rule, event), index)
    return None if rules else Route(entry_agent, event.instance_key, None)


def _instance_key(rule: IngressRule, event: ConnectorEvent) -> str:
    if rule.instance_key is not None and rule.instance_key.strip():
        return rule.instance_key
    if rule.instance_key_property:
        value = event.properties.get(rule.instance_key_property)
        if value is not None and value.strip():
            return (rule.instance_key_prefix or "") + value
    return event.instance_key


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def parse_rules(raw: Any, resolve_agent: Callable[[Any], str | None]) -> list[IngressRule]:
    """Build rules from a validated ``spec.ingress.rules`` list; ``resolve_agent`` turns a
    ``route.agentRef`` into an agent name."""
    rules: list[IngressRule] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        match = _mapping(item.get("match"))
        route = _mapping(item.get("route"))
        props = _mapping(match.get("properties"))

        def text(value: Any) -> str | None:
            return value if isinstance(value, str) else None

        rules.append(IngressRule(
            event=text(match.get("event")),
            properties={str(k): string_value(v) for k, v in props.items()},
            agent=resolve_agent(route["agentRef"]) if "agentRef" in route else None,
            instance_key=text(route.get("instanceKey")),
            instance_key_property=text(route.get("instanceKeyProperty")),
            instance_key_prefix=text(route.get("instanceKeyPrefix")),
        ))
    return rules
