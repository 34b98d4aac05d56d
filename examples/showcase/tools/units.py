"""Length conversion tool: exports ``convert`` and ``list-units``."""

from __future__ import annotations

from typing import Any

METRES = {"m": 1.0, "km": 1000.0, "mi": 1609.344, "ft": 0.3048}


def convert(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Convert ``value`` from one unit to another."""
    value = float(args["value"]) * METRES[args["from"]] / METRES[args["to"]]
    return {"value": round(value, 4), "unit": args["to"]}


def list_units(ctx: Any, args: dict[str, Any]) -> list[str]:
    """The units ``convert`` understands."""
    return sorted(METRES)


handlers = {
    "convert": convert,
    "list-units": list_units,
}
