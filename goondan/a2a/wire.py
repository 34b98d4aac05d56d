"""The A2A 1.0 wire forms (JSON-RPC binding, as ``a2a-sdk`` 1.x speaks it): protobuf-defined
messages serialised as JSON with camelCase keys, enums by their names (``ROLE_USER``,
``TASK_STATE_COMPLETED``), methods named after the service's RPCs (``SendMessage``,
``SendStreamingMessage``, ``GetTask``, ``CancelTask``). The agent card is served at
:data:`CARD_PATH` of the server's root.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

__all__ = [
    "CARD_PATH", "INVALID_PARAMS", "INVALID_REQUEST", "METHOD_NOT_FOUND", "PARSE_ERROR",
    "PROTOCOL_VERSION", "TASK_NOT_CANCELABLE", "TASK_NOT_FOUND", "TERMINAL_STATES",
    "UNSUPPORTED_OPERATION", "agent_message", "error_response", "message_text", "new_id",
    "result_response", "task_text", "timestamp",
]

CARD_PATH = "/.well-known/agent-card.json"
PROTOCOL_VERSION = "1.0"

# JSON-RPC error codes (A2A 1.0 §JSON-RPC binding; a2a.utils.errors.JSON_RPC_ERROR_CODE_MAP)
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED_OPERATION = -32004

TERMINAL_STATES = frozenset({"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED",
                             "TASK_STATE_REJECTED"})


def new_id() -> str:
    """A fresh id (task, context, message, artifact)."""
    return uuid.uuid4().hex


def timestamp() -> str:
    """Now as a protobuf ``Timestamp`` in JSON (RFC 3339, UTC)."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def agent_message(text: str, *, context_id: str, task_id: str) -> dict[str, Any]:
    """A ``Message`` from the agent with one text part."""
    return {"messageId": new_id(), "contextId": context_id, "taskId": task_id,
            "role": "ROLE_AGENT", "parts": [{"text": text}]}


def message_text(message: Any) -> str:
    """The text parts of a ``Message`` joined by newlines (``data`` parts as JSON are not
    read; file parts are skipped)."""
    if not isinstance(message, dict) or not isinstance(message.get("parts"), list):
        return ""
    return "\n".join(
        p["text"]
        for p in message["parts"]
        if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def task_text(task: Any) -> str:
    """The answer a ``Task`` carries: its artifacts' text, else its status message's."""
    if not isinstance(task, dict):
        return ""
    texts = [message_text(a) for a in task.get("artifacts") or [] if isinstance(a, dict)]
    if any(texts):
        return "\n".join(t for t in texts if t)
    status = task.get("status")
    return message_text(status.get("message")) if isinstance(status, dict) else ""


def result_response(request_id: Any, result: Any) -> dict[str, Any]:
    """A JSON-RPC success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
