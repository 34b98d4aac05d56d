"""connectors.md §4 as a table: every rule of ingress routing, one row each."""

from __future__ import annotations

from typing import Any

import pytest

from goondan.connectors.event import ConnectorEvent
from goondan.connectors.routing import IngressRule, Route, match_rule, parse_rules, route_event

ENTRY = "entry"


def ev(name: str = "msg", key: str = "own:1", **props: Any) -> ConnectorEvent:
    return ConnectorEvent.text(name, "hi", instance_key=key, properties=props)


R = IngressRule

# (id, rules, event, expected route; None = dropped)
CASES: list[tuple[str, list[IngressRule], ConnectorEvent, Route | None]] = [
    # 1. rules in order, first match wins
    (
        "first-match-wins",
        [R(event="msg", agent="a"), R(event="msg", agent="b")],
        ev(),
        Route("a", "own:1", 0),
    ),
    (
        "later-rule-when-first-misses",
        [R(event="other", agent="a"), R(event="msg", agent="b")],
        ev(),
        Route("b", "own:1", 1),
    ),
    # 2. AND of match.event and match.properties; strings compared
    (
        "event-and-properties-both-hold",
        [R(event="msg", properties={"ch": "x"}, agent="a")],
        ev(ch="x"),
        Route("a", "own:1", 0),
    ),
    (
        "event-holds-property-differs",
        [R(event="msg", properties={"ch": "x"}, agent="a")],
        ev(ch="y"),
        None,
    ),
    (
        "property-holds-event-differs",
        [R(event="other", properties={"ch": "x"}, agent="a")],
        ev(ch="x"),
        None,
    ),
    ("property-missing", [R(properties={"ch": "x"}, agent="a")], ev(), None),
    (
        "all-properties-must-hold",
        [R(properties={"ch": "x", "k": "1"}, agent="a")],
        ev(ch="x"),
        None,
    ),
    (
        "properties-compared-as-strings",
        [R(properties={"n": "42", "b": "true"}, agent="a")],
        ev(n=42, b=True),
        Route("a", "own:1", 0),
    ),
    (
        "properties-only-rule",
        [R(properties={"ch": "x"}, agent="a")],
        ev(ch="x"),
        Route("a", "own:1", 0),
    ),
    # catch-all: no/empty match
    ("catch-all-empty-match", [R(agent="a")], ev("anything"), Route("a", "own:1", 0)),
    (
        "catch-all-after-specific",
        [R(event="x", agent="a"), R(agent="b")],
        ev(),
        Route("b", "own:1", 1),
    ),
    # 3. agent: route.agentRef else entryAgent; no rules → entryAgent; rules, no match → dropped
    #    (Decision 15)
    ("no-agentRef-uses-entry", [R(event="msg", instance_key="k")], ev(), Route(ENTRY, "k", 0)),
    ("no-rules-uses-entry-and-event-key", [], ev(), Route(ENTRY, "own:1", None)),
    ("no-match-is-dropped", [R(event="x", agent="a")], ev(), None),
    ("no-match-without-agentRef-is-dropped", [R(event="x", instance_key="fixed")], ev(), None),
    # 4. instanceKey
    (
        "route-instanceKey-overrides",
        [R(event="msg", instance_key="smoke-test")],
        ev(),
        Route(ENTRY, "smoke-test", 0),
    ),
    (
        "blank-route-instanceKey-ignored",
        [R(event="msg", instance_key="  ")],
        ev(),
        Route(ENTRY, "own:1", 0),
    ),
    (
        "instanceKeyProperty-with-prefix",
        [R(instance_key_property="chat", instance_key_prefix="tg:")],
        ev(chat="42"),
        Route(ENTRY, "tg:42", 0),
    ),
    (
        "instanceKeyProperty-without-prefix",
        [R(instance_key_property="chat")],
        ev(chat="42"),
        Route(ENTRY, "42", 0),
    ),
    (
        "instanceKeyProperty-missing-keeps-event-key",
        [R(instance_key_property="chat", instance_key_prefix="tg:")],
        ev(),
        Route(ENTRY, "own:1", 0),
    ),
    (
        "instanceKeyProperty-blank-keeps-event-key",
        [R(instance_key_property="chat", instance_key_prefix="tg:")],
        ev(chat="  "),
        Route(ENTRY, "own:1", 0),
    ),
    ("prefix-alone-does-nothing", [R(instance_key_prefix="tg:")], ev(), Route(ENTRY, "own:1", 0)),
    (
        "matched-rule-without-key-keeps-event-key",
        [R(event="msg", agent="a")],
        ev(),
        Route("a", "own:1", 0),
    ),
]


@pytest.mark.parametrize(
    ("rules", "event", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_route_event(
    rules: list[IngressRule], event: ConnectorEvent, expected: Route | None
) -> None:
    assert route_event(event, rules, ENTRY) == expected


def test_match_rule_empty_is_catch_all() -> None:
    assert match_rule(IngressRule(), ev("whatever"))


def test_parse_rules_from_yaml_shape() -> None:
    raw = [
        {"match": {"event": "stdin_message"}, "route": {"instanceKey": "smoke-test"}},
        {"match": {"properties": {"n": 1, "on": False}}, "route": {"agentRef": "Agent/worker",
                                                                   "instanceKeyProperty": "chat",
                                                                   "instanceKeyPrefix": "c:"}},
        {"route": {}},
        "not-a-rule",
    ]
    rules = parse_rules(raw, lambda ref: ref.split("/")[-1] if isinstance(ref, str) else None)
    assert rules == [
        IngressRule(event="stdin_message", instance_key="smoke-test"),
        IngressRule(
            properties={"n": "1", "on": "false"},
            agent="worker",
            instance_key_property="chat",
            instance_key_prefix="c:",
        ),
        IngressRule(),
    ]
    assert route_event(ev("stdin_message"), rules, ENTRY) == Route(ENTRY, "smoke-test", 0)
    assert route_event(ev(n=1, on=False, chat="9"), rules, ENTRY) == Route("worker", "c:9", 1)
