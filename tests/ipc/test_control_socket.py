"""A control socket that cannot be reached is a communication failure, not a config error."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import ConfigError, IpcError, UsageError
from goondan.ipc.controlwire import MAX_CONTROL_BYTES
from goondan.swarm.service import send_control


def test_unreachable_control_socket_is_an_ipc_error(tmp_path: Path) -> None:
    with pytest.raises(IpcError) as info:
        asyncio.run(send_control(tmp_path / "missing.sock", {"command": "status"}, timeout_s=5))
    error = info.value
    assert not isinstance(error, ConfigError)
    assert (error.code, error.exit_code) == ("E_IPC_CONTROL", 1)
    assert "missing.sock" in error.message and "No such file" in error.message


def _answering(tmp_path: Path, lines: list[bytes], on_event: Any = None) -> dict[str, Any]:
    """``stream_control`` against a server that answers any request with ``lines``."""
    from goondan.ipc.controlwire import stream_control

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        for line in lines:
            writer.write(line)
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    async def main() -> dict[str, Any]:
        path = tmp_path / "c.sock"
        server = await asyncio.start_unix_server(serve, path=str(path))
        async with server:
            return await stream_control(path, {"command": "request", "stream": True}, timeout_s=30,
                                        on_event=on_event)

    return asyncio.run(main())


def test_an_answer_line_above_the_bound_is_message_too_large(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        _answering(tmp_path, [b'{"ok": true, "response": "' + b"a" * MAX_CONTROL_BYTES + b'"}\n'])
    assert info.value.code == "E_RUN_MESSAGE_TOO_LARGE"


def test_an_undecodable_answer_is_no_answer(tmp_path: Path) -> None:
    with pytest.raises(IpcError) as info:
        _answering(tmp_path, [b"over the limit, in chunks\n"])
    assert info.value.code == "E_IPC_CONTROL" and "undecodable" in info.value.message


def test_an_error_of_the_event_listener_is_not_taken_for_the_wire_s(tmp_path: Path) -> None:
    """Only an over-long line is E_RUN_MESSAGE_TOO_LARGE, whatever an error's text says."""
    def listener(event: dict[str, Any]) -> None:
        raise ValueError("the listener's own limit")

    with pytest.raises(ValueError, match="the listener's own limit"):
        _answering(tmp_path, [b'{"event": {"type": "llm.delta"}}\n', b'{"ok": true}\n'], listener)
