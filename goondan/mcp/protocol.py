"""MCP wire details: protocol revisions, JSON-RPC framing, tool names and results (docs/mcp.md).

The client speaks JSON-RPC 2.0 as the Model Context Protocol fixes it
(modelcontextprotocol.io/specification): ``initialize`` offers :data:`PROTOCOL_VERSION`; the
server answers with the revision it will speak, which must be one of
:data:`SUPPORTED_VERSIONS` or the session is refused (``E_MCP_PROTOCOL``).

Server tool names become catalog names ``<resource>__<export>`` (:func:`tool_names`);
``tools/call`` results become one JSON value for the conversation (:func:`result_output`).
"""

from __future__ import annotations

import json
from typing import Any

from goondan.errors import McpError
from goondan.tools.naming import sanitize_export_name
from goondan.types import JsonObject, JsonValue

__all__ = [
    "CLIENT_INFO",
    "PROTOCOL_VERSION",
    "SUPPORTED_VERSIONS",
    "ToolErrorResult",
    "decode_message",
    "encode_message",
    "result_output",
    "tool_names",
]

# The revision offered first; older ones are accepted when the server answers with them.
PROTOCOL_VERSION = "2025-06-18"
SUPPORTED_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
CLIENT_INFO: JsonObject = {"name": "goondan", "version": "0"}

# OpenAI, Anthropic and Gemini accept at most 64 characters in a function name.
MAX_NAME = 64


def encode_message(message: JsonObject) -> bytes:
    """One JSON-RPC message as a line: compact JSON (no embedded newline) + ``\\n``."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def decode_message(data: bytes | str) -> JsonObject:
    """Parse one message; ``E_MCP_PROTOCOL`` when it is not a JSON object.

    Bytes that are not UTF-8 become U+FFFD: the reply still arrives (a request must not wait
    for its timeout because one character of a tool's output was mangled).
    """
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise McpError(f"the server sent something that is not JSON: {exc}",
                       code="E_MCP_PROTOCOL") from exc
    if not isinstance(value, dict):
        raise McpError("the server sent a JSON-RPC message that is not an object",
                       code="E_MCP_PROTOCOL")
    return value


def tool_names(resource: str, server_names: list[str]) -> dict[str, str]:
    """Catalog name → server name for ``server_names``; clashes get ``_2``, ``_3`` … suffixes.

    Names are cut to 64 characters (the providers' limit), keeping the suffix.
    """
    out: dict[str, str] = {}
    for server_name in server_names:
        base = sanitize_export_name(server_name)
        room = MAX_NAME - len(resource) - 2
        candidate, n = base[:room], 1
        while f"{resource}__{candidate}" in out:
            n += 1
            suffix = f"_{n}"
            candidate = base[: room - len(suffix)] + suffix
        out[f"{resource}__{candidate}"] = server_name
    return out


class ToolErrorResult(Exception):
    """A ``tools/call`` result with ``isError: true``: the text the server gave."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


_MEDIA = ("image", "audio")
_MAX_DEPTH = 64  # structuredContent deeper than this is left as it is


def _b64_bytes(data: str) -> int:
    """The decoded size of base64 text, without decoding it."""
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))


def _is_media(value: JsonObject) -> bool:
    """An image or audio object carrying base64 ``data`` (or a resource's ``blob``)."""
    data = value.get("data", value.get("blob"))
    if not isinstance(data, str):
        return False
    mime = value.get("mimeType")
    return value.get("type") in _MEDIA or (
        isinstance(mime, str) and mime.split("/", 1)[0] in _MEDIA)


def _media_summary(value: JsonObject) -> JsonObject:
    """``value`` without its base64: the other keys plus ``bytes`` (the decoded size)."""
    data = value.get("data", value.get("blob"))
    out = {k: v for k, v in value.items() if k not in ("data", "blob", "annotations")}
    out["bytes"] = _b64_bytes(data) if isinstance(data, str) else 0
    return out


def _strip_media(value: Any, depth: int = 0) -> Any:
    """``structuredContent`` with base64 media cut like content images (see :func:`_part`)."""
    if depth > _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        if _is_media(value):
            return _media_summary(value)
        return {k: _strip_media(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_media(v, depth + 1) for v in value]
    if isinstance(value, str) and value.startswith("data:") and ";base64," in value[:200]:
        mime = value[5:value.index(";")]
        if mime.split("/", 1)[0] in _MEDIA:
            payload = value[value.index(";base64,") + 8:]
            return f"[{mime}, {_b64_bytes(payload)} bytes]"
    return value


def _part(part: Any) -> JsonValue:
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text":
        return str(part.get("text", ""))
    if kind in _MEDIA:
        # Base64 media would flood the conversation as text: keep the type, MIME type and size.
        data = part.get("data")
        size = _b64_bytes(data) if isinstance(data, str) else 0
        return {"type": kind, "mimeType": part.get("mimeType"), "bytes": size}
    if kind == "resource":
        resource = part.get("resource")
        if isinstance(resource, dict) and "text" in resource:
            return {"type": "resource", "uri": resource.get("uri"), "text": resource["text"]}
        uri = resource.get("uri") if isinstance(resource, dict) else None
        return {"type": "resource", "uri": uri}
    return {k: v for k, v in part.items() if k != "annotations"}


def result_output(result: Any) -> JsonValue:
    """The conversation's value for a ``tools/call`` result (docs/mcp.md "Results").

    ``structuredContent`` when present (base64 images and audio in it cut to their other keys
    plus ``bytes``); else the text when every part is text (joined with newlines); else the list
    of parts (media as ``{type, mimeType, bytes}``). Raises :class:`ToolErrorResult` for
    ``isError: true``.
    """
    if not isinstance(result, dict):
        raise McpError("tools/call answered with a result that is not an object",
                       code="E_MCP_PROTOCOL")
    content = result.get("content")
    parts = [_part(p) for p in content] if isinstance(content, list) else []
    if result.get("isError"):
        text = "\n".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
        raise ToolErrorResult(text or "the MCP tool reported an error")
    if "structuredContent" in result and result["structuredContent"] is not None:
        return _strip_media(result["structuredContent"])
    if all(isinstance(p, str) for p in parts):
        return "\n".join(p for p in parts if isinstance(p, str))
    return parts
