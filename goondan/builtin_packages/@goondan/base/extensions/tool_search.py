"""Extension ``tool-search`` of ``@goondan/base``: let the model choose the tools it sees.

Two parts (docs/base-extensions.md):

* a tool named ``toolName`` (default ``tool-search__search``; input ``query*``, ``limit``)
  that matches the query, lower-cased, as a substring of each tool's name or description over
  the catalog snapshot kept in the extension state, and returns
  ``{query, results: [{name, description?}], selectedTools}``. With ``persistSelection`` the
  matched names become the stored ``selectedTools`` (and ``lastQuery`` the query). A query
  shorter than ``minQueryLength`` (after trimming) matches nothing and changes nothing.
* a step middleware: when the stored ``selectedTools`` is non-empty, ``ctx.tool_catalog`` is
  narrowed to those tools plus the search tool before ``next()``.

State (``extensions/tool-search.json`` of the instance): ``{selectedTools, catalogSnapshot,
lastQuery?}`` with ``catalogSnapshot`` a ``[{name, description?}]`` list.

Deliberate refinements: the snapshot is taken from the step's catalog *before* the selection
narrows it (the reference stores the narrowed catalog, so a second search could only find the
tools already selected), and the search tool never lists itself (it is always offered).

Config: ``toolName`` (a valid ``{resource}__{export}`` name), ``maxResults`` 10 (>= 1; also the
upper bound of ``limit``), ``minQueryLength`` 1 (>= 0), ``persistSelection`` true. Invalid values
fall back to the defaults with a ``W_BASE_EXTENSION_CONFIG`` warning.
"""

from __future__ import annotations

import math
from typing import Any

from goondan.tools.executor import ToolFailure
from goondan.tools.naming import is_valid_tool_name

from ._config import boolean, is_number, number_at_least, setting

DEFAULTS: dict[str, Any] = {
    "toolName": "tool-search__search",
    "maxResults": 10,
    "minQueryLength": 1,
    "persistSelection": True,
}
DESCRIPTION = (
    "Search the available tools by name or description. The matching tools are the ones "
    "offered from the next step on (plus this search tool); search again to change the selection."
)


def read_config(api: Any) -> dict[str, Any]:
    """``api.config`` over :data:`DEFAULTS`, each invalid value replaced by its default."""
    return {
        "toolName": setting(api, "toolName", DEFAULTS["toolName"], is_valid_tool_name,
                            "a {resource}__{export} tool name"),
        "maxResults": number_at_least(api, "maxResults", DEFAULTS["maxResults"], 1),
        "minQueryLength": number_at_least(api, "minQueryLength", DEFAULTS["minQueryLength"], 0),
        "persistSelection": boolean(api, "persistSelection", DEFAULTS["persistSelection"]),
    }


def read_state(raw: Any) -> dict[str, Any]:
    """The stored state with anything malformed dropped (a hand-edited file must not break)."""
    raw = raw if isinstance(raw, dict) else {}
    selected = raw.get("selectedTools")
    snapshot: list[dict[str, str]] = []
    for item in raw.get("catalogSnapshot") or ():
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            row = {"name": item["name"]}
            if isinstance(item.get("description"), str) and item["description"]:
                row["description"] = item["description"]
            snapshot.append(row)
    state: dict[str, Any] = {
        "selectedTools": [s for s in selected if isinstance(s, str)]
        if isinstance(selected, list) else [],
        "catalogSnapshot": snapshot,
    }
    if isinstance(raw.get("lastQuery"), str):
        state["lastQuery"] = raw["lastQuery"]
    return state


def register(api: Any) -> None:
    """Register the search tool and the catalog-narrowing step middleware."""
    config = read_config(api)
    tool_name: str = config["toolName"]

    async def search(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
        query = input.get("query")
        if not isinstance(query, str):
            raise ToolFailure(
                "'query' is required and must be a string", code="E_TOOL_INVALID_ARGS"
            )
        needle = query.strip().lower()
        if len(needle) < config["minQueryLength"] or not needle:
            return {"query": query, "results": [], "selectedTools": []}
        limit = input.get("limit", config["maxResults"])
        if limit is None:
            limit = config["maxResults"]
        if not is_number(limit):
            raise ToolFailure("'limit' must be a number", code="E_TOOL_INVALID_ARGS")
        limit = max(1, min(config["maxResults"], math.floor(limit)))
        state = read_state(await api.state.get())
        results = [
            item for item in state["catalogSnapshot"]
            if item["name"] != tool_name and (
                needle in item["name"].lower() or needle in item.get("description", "").lower()
            )
        ][:limit]
        selected = [item["name"] for item in results]
        if config["persistSelection"]:
            state["selectedTools"] = selected
            state["lastQuery"] = query
            await api.state.set(state)
        return {"query": query, "results": results, "selectedTools": selected}

    api.tools.register(
        {
            "name": tool_name,
            "description": DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "limit": {
                        "type": "number",
                        "description": f"At most this many tools (<= {config['maxResults']}).",
                    },
                },
                "required": ["query"],
            },
        },
        search,
    )

    async def narrow_catalog(ctx: Any) -> Any:
        state = read_state(await api.state.get())
        state["catalogSnapshot"] = [
            {"name": t.name, **({"description": t.description} if t.description else {})}
            for t in ctx.tool_catalog
        ]
        selected = set(state["selectedTools"])
        if selected:
            ctx.tool_catalog = [
                t for t in ctx.tool_catalog if t.name in selected or t.name == tool_name
            ]
        await api.state.set(state)
        return await ctx.next()

    api.pipeline.register("step", narrow_catalog)
