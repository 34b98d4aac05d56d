"""The ``cli`` connector's line format (connectors.md §6) and the built-in module."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from goondan.config.packages import BUILTIN_ROOT
from goondan.connectors import ConnectorContext, ConnectorEvent, EmitReceipt
from goondan.connectors.cli import parse_cli_line
from goondan.tools.loader import load_entry_module


@pytest.mark.parametrize(("line", "index", "expected"), [
    ("hello\n", 0, ("stdin_message", "hello", "cli:0", {})),
    ("  \n", 3, None),
    ("", 1, None),
    ('{"text": "hi", "instanceKey": "k", "properties": {"source": "x", "n": 2, "o": {}}}', 2,
     ("stdin_message", "hi", "k", {"source": "x", "n": "2"})),
    ('{"event": "custom", "message": "m"}', 4, ("custom", "m", "cli:4", {})),
    ('{"name": "n1", "event": "e1"}', 5, ("n1", '{"name": "n1", "event": "e1"}', "cli:5", {})),
    ('{"text": 3}', 6, ("stdin_message", '{"text": 3}', "cli:6", {})),
    ("[1, 2]", 7, ("stdin_message", "[1, 2]", "cli:7", {})),
    ("{not json", 8, ("stdin_message", "{not json", "cli:8", {})),
])
def test_parse_cli_line(
    line: str, index: int, expected: tuple[str, str, str, dict[str, str]] | None
) -> None:
    event = parse_cli_line(line, index)
    if expected is None:
        assert event is None
        return
    assert event is not None
    assert (event.name, event.message["text"], event.instance_key, event.properties) == expected


def test_builtin_cli_connector_emits_stdin_lines_until_eof(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_entry_module(
        Path(BUILTIN_ROOT) / "@goondan" / "base" / "connectors" / "cli.py", kind="connector"
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("one\n\ntwo\n"))
    emitted: list[ConnectorEvent] = []

    async def emit(event: ConnectorEvent) -> EmitReceipt:
        emitted.append(event)
        return EmitReceipt(event.id)

    ctx = ConnectorContext(
        connection_name="c",
        connector_name="cli",
        config={},
        secrets={},
        emit=emit,
        state_dir=tmp_path,
    )
    asyncio.run(module.run(ctx))
    assert [(e.message["text"], e.instance_key) for e in emitted] == [
        ("one", "cli:0"),
        ("two", "cli:2"),
    ]
