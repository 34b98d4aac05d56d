"""A unit converter with two exports: ``units__convert`` and ``units__list``.

Handlers are plain functions ``handler(ctx, input) -> JSON``; a raised exception becomes an
error result the model can read (it never crashes the turn).
"""

from __future__ import annotations

from typing import Any

# Factors to the base unit of each dimension (metre, kilogram).
LENGTH = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048,
          "yd": 0.9144, "mi": 1609.344}
MASS = {"g": 0.001, "kg": 1.0, "t": 1000.0, "oz": 0.028349523125, "lb": 0.45359237}
TEMPERATURE = ("c", "f", "k")
ALIASES = {"mile": "mi", "miles": "mi", "meter": "m", "meters": "m", "metre": "m",
           "kilometer": "km", "kilometers": "km", "kilogram": "kg", "kilograms": "kg",
           "pound": "lb", "pounds": "lb", "celsius": "c", "fahrenheit": "f", "kelvin": "k",
           "feet": "ft", "foot": "ft", "inch": "in", "inches": "in", "gram": "g", "grams": "g"}


def _unit(name: Any) -> str:
    key = str(name).strip().lower().rstrip(".")
    return ALIASES.get(key, key)


def _to_kelvin(value: float, unit: str) -> float:
    return {"c": value + 273.15, "f": (value - 32) * 5 / 9 + 273.15, "k": value}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"c": value - 273.15, "f": (value - 273.15) * 9 / 5 + 32, "k": value}[unit]


def convert(ctx: Any, input: dict[str, Any]) -> str:
    """``{value, from, to}`` → ``"7.46 mi"``."""
    value = float(input["value"])
    source, target = _unit(input["from"]), _unit(input["to"])
    for table in (LENGTH, MASS):
        if source in table and target in table:
            result = value * table[source] / table[target]
            break
    else:
        if source in TEMPERATURE and target in TEMPERATURE:
            result = _from_kelvin(_to_kelvin(value, source), target)
        else:
            raise ValueError(f"cannot convert {source!r} to {target!r}; call units__list")
    return f"{result:.2f} {target}"


def list_units(ctx: Any, input: dict[str, Any]) -> str:
    """Every known unit, grouped by dimension."""
    return (
        f"length: {', '.join(LENGTH)}; mass: {', '.join(MASS)}; "
        f"temperature: {', '.join(TEMPERATURE)}"
    )


handlers = {"convert": convert, "list": list_units}
