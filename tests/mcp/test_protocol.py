"""Pure parts of the MCP client: tool names, result conversion, framing, backoff."""

from __future__ import annotations

import pytest

from goondan.errors import McpError
from goondan.mcp.protocol import (
    ToolErrorResult,
    decode_message,
    encode_message,
    result_output,
    tool_names,
)
from goondan.mcp.provider import backoff_s
from goondan.tools.naming import is_valid_tool_name, sanitize_export_name


@pytest.mark.parametrize(("name", "expected"), [
    ("get_current_time", "get_current_time"),
    ("getCurrentTime", "get_current_time"),
    ("sampleLLM", "sample_llm"),
    ("get-sum", "get-sum"),
    ("files.read/all", "files_read_all"),
    ("__private__name__", "private_name"),
    ("Ünïcode", "n_code"),
    ("...", "tool"),
])
def test_sanitize_export_name(name: str, expected: str) -> None:
    assert sanitize_export_name(name) == expected


def test_tool_names_are_valid_unique_and_fit_64_characters() -> None:
    names = tool_names("srv", ["a.b", "a_b", "A-B", "x" * 100, "x" * 100 + "y"])
    assert list(names.values()) == ["a.b", "a_b", "A-B", "x" * 100, "x" * 100 + "y"]
    assert list(names)[:3] == ["srv__a_b", "srv__a_b_2", "srv__a-b"]
    for name in names:
        assert is_valid_tool_name(name) and len(name) <= 64, name
    assert len(set(names)) == 5


def test_result_output_forms() -> None:
    assert (
        result_output({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
        == "a\nb"
    )
    assert result_output({"content": [{"type": "text", "text": "{}"}],
                          "structuredContent": {"x": 1}}) == {"x": 1}
    parts = result_output({"content": [{"type": "text", "text": "see"},
                                       {"type": "image", "mimeType": "image/png", "data": "AAAA"}]})
    assert parts == ["see", {"type": "image", "mimeType": "image/png", "bytes": 3}]
    with pytest.raises(ToolErrorResult, match="bad input"):
        result_output({"content": [{"type": "text", "text": "bad input"}], "isError": True})
    with pytest.raises(McpError):
        result_output(["not", "an", "object"])


def test_framing_and_backoff() -> None:
    line = encode_message({"jsonrpc": "2.0", "method": "x", "params": {"t": "a\nb"}})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_message(line)["params"] == {"t": "a\nb"}
    with pytest.raises(McpError) as info:
        decode_message(b"hello")
    assert info.value.code == "E_MCP_PROTOCOL"
    assert [backoff_s(n) for n in range(0, 9)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_structured_content_media_forms_are_cut() -> None:
    wav = "UklGRiQAAABXQVZF" * 100  # 1600 base64 characters
    structured = {
        "clip": {"type": "audio", "mimeType": "audio/wav", "data": wav, "name": "a.wav"},
        "file": {"uri": "file:///x.png", "mimeType": "image/png", "blob": "QQ=="},
        "preview": "data:image/jpeg;base64,QUJD",
        "note": "data:text/plain;base64,QUJD",
        "json": {"mimeType": "application/json", "data": "kept"},
        "deep": [[{"type": "image", "mimeType": "image/gif", "data": "R0lG"}]],
    }
    assert result_output({"content": [], "structuredContent": structured}) == {
        "clip": {"type": "audio", "mimeType": "audio/wav", "name": "a.wav", "bytes": 1200},
        "file": {"uri": "file:///x.png", "mimeType": "image/png", "bytes": 1},
        "preview": "[image/jpeg, 3 bytes]",
        "note": "data:text/plain;base64,QUJD",
        "json": {"mimeType": "application/json", "data": "kept"},
        "deep": [[{"type": "image", "mimeType": "image/gif", "bytes": 3}]],
    }
