"""Hypothesis strategies for runtime events, generated from the event dataclasses' fields.

Every ``init`` field of an event class gets a strategy from its annotation, so a field added to a
class is drawn (and so reaches the encoders and the span mapping under test) without a list to
update here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from hypothesis import strategies as st

from goondan.runtime import events
from goondan.runtime.events import RuntimeEvent

TEXT = st.text(max_size=12) | st.sampled_from(
    ["", "plain", 'q"uote', "back\\slash", "new\nline", "é✓", "\x00\x1f\x7f", "\u2028"]
)
LONE_SURROGATE = st.just("\ud800x")  # JSON lines write it as U+FFFD
IDS = st.sampled_from(["", "a" * 16, "0123456789abcdef", "a" * 32])
_USAGE = st.fixed_dictionaries(
    {
        "prompt": st.integers(0, 10**6),
        "completion": st.integers(0, 10**6),
        "total": st.integers(0, 2 * 10**6),
    }
) | st.sampled_from([{}, {"prompt": 3}, {"prompt": 1.0, "completion": True}])
_BY_TYPE: dict[Any, st.SearchStrategy[Any]] = {
    str: TEXT,
    bool: st.booleans(),
    int: st.integers(-(2**63), 2**63 - 1),
    float: st.floats(0, 10**6) | st.just(-0.0),
    dict: _USAGE,
}
# The span frame: ids and the stamp of the observer, drawn where they make a valid span.
_FRAME = {
    "trace_id": st.sampled_from(["", "c" * 32]),
    "span_id": IDS,
    "parent_span_id": st.none() | IDS,
    "agent_name": st.sampled_from(["", "coordinator", "é✓"]),
    "instance_key": st.just("k"),
}


def event_classes() -> list[type[RuntimeEvent]]:
    """Every registered event class, in a stable order."""
    return sorted(set(events._REGISTRY.values()), key=lambda c: c.__name__)


def end_event_classes() -> list[type[RuntimeEvent]]:
    """The classes that describe a whole span (end events and ingress)."""
    return [c for c in event_classes() if c.phase != "start" and c is not events.LlmDelta]


def field_strategy(annotation: Any, *, surrogates: bool = True) -> st.SearchStrategy[Any]:
    """Values of an annotation: its types (``X | None`` adds ``None``)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return st.one_of(
            *(field_strategy(arg, surrogates=surrogates) for arg in typing.get_args(annotation))
        )
    if annotation is type(None):
        return st.none()
    if annotation is str and surrogates:
        return TEXT | LONE_SURROGATE
    return _BY_TYPE[typing.get_origin(annotation) or annotation]


def events_of(cls: type[RuntimeEvent], *, frame: bool = True,
              surrogates: bool = True) -> st.SearchStrategy[RuntimeEvent]:
    """Instances of ``cls`` with every field drawn from its annotation (the frame, too, when
    ``frame`` is false: any text in the ids); ``surrogates``: text may hold a lone surrogate."""
    hints = typing.get_type_hints(cls, vars(events))
    kwargs = {
        f.name: field_strategy(hints[f.name], surrogates=surrogates)
        for f in dataclasses.fields(cls)
        if f.init and f.name != "timestamp"
    }
    if frame:
        kwargs.update(_FRAME)
    return st.builds(cls, **kwargs)
