"""The per-step Tool Catalog: what the LLM is offered in one step (docs/tools.md
"Registry and catalog").

The catalog starts from ``Agent.spec.tools`` (the config bindings, in declaration order, each
export in order) followed by the tools extensions registered with ``api.tools.register``; a
name appears once, config first. Every step gets fresh copies, so a step
middleware that edits ``ctx.tool_catalog`` (or an item in it) changes only that step.
"""

from __future__ import annotations

import copy
import marshal
from collections.abc import Iterable, Sequence
from typing import Any

from goondan.tools.naming import build_tool_name
from goondan.types import ToolCatalogItem, ToolSource

__all__ = [
    "attr",
    "binding_items",
    "catalog_names",
    "closest_names",
    "copy_item",
    "empty_parameters",
    "merge_catalog",
]


def empty_parameters() -> dict[str, Any]:
    """The schema used when an export declares no ``parameters`` (docs/tools.md)."""
    return {"type": "object", "properties": {}}


def attr(obj: Any, name: str, default: Any = None) -> Any:
    """Read ``name`` from a config dataclass or from a plain dict (duck typing across areas)."""
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def binding_items(binding: Any) -> list[ToolCatalogItem]:
    """Catalog items of one ``ToolBinding``: ``{binding.name}__{export.name}`` per export."""
    resource = str(attr(binding, "name"))
    items: list[ToolCatalogItem] = []
    for export in attr(binding, "exports", None) or ():
        parameters = attr(export, "parameters", None)
        items.append(
            ToolCatalogItem(
                name=build_tool_name(resource, str(attr(export, "name"))),
                description=str(attr(export, "description", None) or ""),
                parameters=dict(parameters) if isinstance(parameters, dict) else empty_parameters(),
                source=ToolSource("config", resource),
            )
        )
    return items


def _copy_json(value: Any) -> Any:
    # marshal round trip: a deep copy of dicts, lists and scalars at C speed (a step copies
    # every catalog item's schema); anything marshal refuses goes through copy.deepcopy.
    # Measured (scripts/bench_turn.py's turns, CPU medians of 4 rounds alternating with a copy of
    # the tree using copy.deepcopy here): copy.deepcopy costs the K=0 turn 16 % more, the
    # 20-step turn 4 %.
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:
        return copy.deepcopy(value)


def copy_item(item: ToolCatalogItem) -> ToolCatalogItem:
    """An independent copy (middleware may edit it freely)."""
    source = item.source
    return ToolCatalogItem(
        name=item.name,
        description=item.description,
        parameters=_copy_json(item.parameters),
        source=ToolSource(source.type, source.name, copy.deepcopy(source.mcp)) if source else None,
    )


def merge_catalog(*groups: Iterable[ToolCatalogItem]) -> list[ToolCatalogItem]:
    """Concatenate ``groups`` keeping the first item of each name; items are copied."""
    seen: set[str] = set()
    out: list[ToolCatalogItem] = []
    for group in groups:
        for item in group:
            if item.name not in seen:
                seen.add(item.name)
                out.append(copy_item(item))
    return out


def catalog_names(catalog: Iterable[ToolCatalogItem | dict[str, Any] | str]) -> frozenset[str]:
    """Names in a catalog (items, plain dicts as middleware may write them, or names)."""
    names: set[str] = set()
    for item in catalog:
        if isinstance(item, ToolCatalogItem):
            names.add(item.name)
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            names.add(item["name"])
        elif isinstance(item, str):
            names.add(item)
    return frozenset(names)


def closest_names(name: str, names: Sequence[str] | frozenset[str], limit: int = 3) -> list[str]:
    """Names similar to ``name``, best first (for "did you mean" suggestions)."""
    import difflib  # only on an error path; kept off the start path

    return difflib.get_close_matches(name, sorted(names), n=limit, cutoff=0.6)
