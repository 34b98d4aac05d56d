"""The ``cli`` connector's line format (docs/connectors.md "The `cli` connector and `goondan run`"),
shared by the built-in ``cli`` connector of ``@goondan/base`` and ``goondan run``'s terminal
front-end.

Line ``i`` (0-based, skipped lines count):

* blank after trimming → no event;
* a JSON object → ``name`` = its ``name`` or ``event`` (default ``stdin_message``), text = its
  ``text`` or ``message`` (default: the raw line), ``instanceKey`` = its ``instanceKey`` or
  ``cli:<i>``, ``properties`` = the primitive values of its ``properties`` as strings;
* anything else → ``{name: stdin_message, message: {type: text, text: <line>},
  properties: {}, instanceKey: "cli:<i>"}``.

The default key ``cli:<i>`` makes every line a new conversation; a Connection rule with
``route.instanceKey`` (e.g. ``cli``) keeps one conversation going.
"""

from __future__ import annotations

import json

from goondan.connectors.event import ConnectorEvent

__all__ = ["CLI_EVENT", "parse_cli_line"]

CLI_EVENT = "stdin_message"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def parse_cli_line(line: str, index: int) -> ConnectorEvent | None:
    """The event of stdin line ``index`` (``None`` for a blank line)."""
    raw = line.rstrip("\r\n")
    if not raw.strip():
        return None
    default_key = f"cli:{index}"
    data: object = None
    stripped = raw.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
    if isinstance(data, dict):
        name = _text(data.get("name")) or _text(data.get("event")) or CLI_EVENT
        text = data.get("text") if isinstance(data.get("text"), str) else data.get("message")
        key = _text(data.get("instanceKey")) or default_key
        props = data.get("properties")
        return ConnectorEvent.text(name, text if isinstance(text, str) else raw, instance_key=key,
                                   properties=props if isinstance(props, dict) else None)
    return ConnectorEvent.text(CLI_EVENT, raw, instance_key=default_key)
