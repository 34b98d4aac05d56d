"""The Streamable HTTP transport's network failures, against real sockets on 127.0.0.1: each is
one ``McpError`` code whose message names the server by origin only (a key in the URL's query
or path never shows) and carries no urllib3 connection repr."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from goondan.errors import McpError
from goondan.mcp.transports import HttpTransport

pytestmark = pytest.mark.timeout(30)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def _send(url: str) -> McpError:
    async def go() -> McpError:
        transport = HttpTransport(url, timeout_s=2.0, label="remote")
        await transport.start(lambda message: None, lambda reason: None)
        try:
            with pytest.raises(McpError) as caught:
                await transport.send(
                    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
                )
            return caught.value
        finally:
            await transport.close()

    return asyncio.run(go())


def test_an_unreachable_server_is_e_mcp_connection_naming_the_origin_only() -> None:
    port = _free_port()
    error = _send(f"http://127.0.0.1:{port}/mcp/sk-path-KEY?api_key=sk-query-KEY")
    assert error.code == "E_MCP_CONNECTION"
    assert f"http://127.0.0.1:{port}" in error.message and "Connection refused" in error.message
    assert "KEY" not in error.message and "Connection(" not in error.message


def test_a_server_closing_without_an_answer_is_e_mcp_connection_after_one_resend() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    accepted: list[bytes] = []

    def serve() -> None:
        for _ in range(2):  # the POST and its one re-send on a fresh connection
            conn, _ = server.accept()
            with conn:
                accepted.append(conn.recv(65536).split(b"\r\n", 1)[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        error = _send(f"http://127.0.0.1:{server.getsockname()[1]}/mcp")
    finally:
        thread.join(10)
        server.close()
    assert error.code == "E_MCP_CONNECTION" and accepted == [b"POST /mcp HTTP/1.1"] * 2
    assert "Connection(" not in error.message
