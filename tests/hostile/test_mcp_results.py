"""What an MCP tool result puts into the conversation: no base64 floods, no lost replies.

Issue 27: images inside ``structuredContent`` went into ``base.jsonl`` as base64 (a 300 KB PNG
became 262 KB of text) although content images were already cut to ``{type, mimeType, bytes}``;
and a reply carrying invalid UTF-8 was dropped as "not JSON", so the call waited for its
timeout instead of getting the text with U+FFFD in place of the bad bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from goondan.config.mcp import McpServerSpec
from goondan.mcp import McpToolProvider
from goondan.mcp.protocol import decode_message
from goondan.tools.context import ToolContext
from tests.support.aio import run
from tests.support.mcp_servers import require_sdk, stdio_spec

pytestmark = [pytest.mark.e2e]

# A hand-rolled stdio server (the SDK never writes invalid UTF-8): the answer to tools/call
# holds the bytes 0xFF 0xFE inside a JSON string.
RAW_SERVER = r"""
import json, sys
out = sys.stdout.buffer
def send(obj, raw=None):
    out.write(raw if raw is not None else json.dumps(obj).encode() + b"\n"); out.flush()
for line in sys.stdin.buffer:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [
              {"name": "legacy", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        send(None, b'{"jsonrpc":"2.0","id":' + str(mid).encode()
             + b',"result":{"content":[{"type":"text","text":"caf\xff\xfe ok"}]}}\n')
"""


def _context() -> ToolContext:
    return ToolContext(agent_name="a", instance_key="k", turn_id="t", trace_id="x",
                       tool_call_id="c", message=None, workdir=Path.cwd())


async def _call(spec: McpServerSpec, name: str, args: dict[str, object]) -> object:
    provider = McpToolProvider(spec)
    await provider.open(lambda p: None)
    try:
        assert name in [t.name for t in await provider.list_tools()]
        return await provider.call(name, _context(), args)
    finally:
        await provider.aclose()


@pytest.mark.slow
def test_images_in_structured_content_are_cut_to_type_mime_and_size() -> None:
    require_sdk()
    output = run(_call(stdio_spec(), "t__snapshot", {"kb": 300}), timeout_s=60)
    assert isinstance(output, dict)
    assert len(json.dumps(output)) < 1000, "the base64 image data reached the conversation"
    assert output["page"] == "http://127.0.0.1/" and output["title"] == "Example"
    shot = output["screenshot"]
    assert shot["type"] == "image" and shot["mimeType"] == "image/png"
    assert shot["bytes"] == 300 * 1024 + 8
    assert output["thumbnails"] == [{"mimeType": "image/png", "bytes": 3000}]


def test_invalid_utf8_in_a_reply_becomes_replacement_characters() -> None:
    spec = McpServerSpec(name="raw", package=None, url=None, timeout_ms=5000,
                         command=[sys.executable, "-c", RAW_SERVER])
    output = run(_call(spec, "raw__legacy", {}), timeout_s=60)
    assert output == "caf\ufffd\ufffd ok"


def test_decode_message_replaces_invalid_utf8() -> None:
    assert decode_message(b'{"text": "a\xffb"}') == {"text": "a\ufffdb"}
