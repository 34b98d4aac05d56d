"""A swarm as an MCP server: the JSON-RPC side, shared by the Streamable HTTP connector
(``mcp-server`` of ``@goondan/base``) and ``goondan serve mcp`` (stdio); docs/serving.md.

:class:`McpServer` answers one JSON-RPC message at a time for a :class:`McpSession`, whatever
carries it. It knows no transport and no swarm: the exposed agents are a list of
:class:`ExposedAgent` and a call goes to the injected ``ask`` coroutine.

* ``initialize`` answers the client's protocol revision when it is one of
  :data:`SUPPORTED_VERSIONS`, else the newest; capabilities ``tools`` only.
* ``tools/list``: one tool ``ask_<agent>`` per exposed agent, input ``{message, conversation?}``.
* ``tools/call``: ``ask(agent, message, instance_key, progress)``; the result is the agent's
  final text (``isError`` when its Turn failed). The instanceKey is ``mcp:<conversation>``
  when the call names a conversation, else ``mcp:<session id>``: calls in one session share a
  conversation. With ``_meta.progressToken`` each step and tool call of the Turn is sent as
  ``notifications/progress``.
* ``notifications/cancelled`` cancels the named request's task (the transport registered it
  with :meth:`McpSession.track`); cancelling the call cancels the Turn.
* ``ping`` → ``{}``; any other method → ``-32601``.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from goondan.mcp.protocol import SUPPORTED_VERSIONS
from goondan.types import JsonObject

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "SUPPORTED_VERSIONS",
    "AskFn",
    "ExposedAgent",
    "McpServer",
    "McpSession",
    "ToolOutcome",
    "error_message",
    "tool_name",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
REQUEST_CANCELLED = -32800  # what a transport answers for a request the client cancelled

INPUT_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask or tell the agent."},
        "conversation": {
            "type": "string",
            "description": "A name for the conversation to "
            "continue (default: one per MCP session).",
        },
    },
    "required": ["message"],
}


@dataclass(frozen=True)
class ExposedAgent:
    """One agent served as the tool :attr:`tool`."""

    agent: str
    description: str = ""

    @property
    def tool(self) -> str:
        return tool_name(self.agent)

    def to_tool(self) -> JsonObject:
        """The ``tools/list`` entry."""
        return {
            "name": self.tool,
            "description": self.description or f"Ask the agent {self.agent}.",
            "inputSchema": INPUT_SCHEMA,
        }


@dataclass(frozen=True)
class ToolOutcome:
    """What ``ask`` returns: the final text, or an error text with ``is_error``."""

    text: str
    is_error: bool = False


ProgressFn = Callable[[str], None]
AskFn = Callable[[str, str, str, ProgressFn], Awaitable[ToolOutcome]]
NotifyFn = Callable[[JsonObject], None]


def tool_name(agent: str) -> str:
    """``ask_<agent>`` with characters MCP tool names do not allow replaced by ``_``."""
    return "ask_" + re.sub(r"[^A-Za-z0-9_.-]", "_", agent)


def error_message(request_id: Any, code: int, message: str) -> JsonObject:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class McpSession:
    """One client's session: its id (``Mcp-Session-Id`` over HTTP), negotiated revision and
    the tasks of its requests in flight (by JSON-RPC id, for ``notifications/cancelled``)."""

    id: str = field(default_factory=lambda: secrets.token_hex(16))
    protocol_version: str | None = None
    in_flight: dict[Any, asyncio.Task[Any]] = field(default_factory=dict)

    def track(self, request_id: Any, task: asyncio.Task[Any]) -> None:
        """Remember ``task`` as the handling of ``request_id`` until it is done."""
        key = _id_key(request_id)
        self.in_flight[key] = task
        task.add_done_callback(
            lambda done: self.in_flight.pop(key, None) if self.in_flight.get(key) is done else None
        )

    def cancel_all(self) -> None:
        """Cancel every request in flight (the session ended)."""
        for task in list(self.in_flight.values()):
            task.cancel()


def _id_key(request_id: Any) -> str:
    return f"{type(request_id).__name__}:{request_id}"


class McpServer:
    """Answers the JSON-RPC messages of MCP sessions (see the module docstring)."""

    def __init__(self, agents: list[ExposedAgent], ask: AskFn, *, name: str, version: str = "0",
                 instructions: str | None = None) -> None:
        self.agents = {a.tool: a for a in agents}
        self.ask = ask
        self.name = name
        self.version = version
        self.instructions = instructions

    def __repr__(self) -> str:
        return f"<McpServer {self.name!r} tools={sorted(self.agents)}>"

    async def handle(
        self, session: McpSession, message: Any, notify: NotifyFn
    ) -> JsonObject | None:
        """The response to ``message`` (``None`` for a notification or a client's response).
        ``notify`` sends a notification about this request (progress) before the response."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return error_message(None, INVALID_REQUEST, "not a JSON-RPC 2.0 message")
        method = message.get("method")
        if method is None and ("result" in message or "error" in message):
            return None  # a response to a request of ours: we send none
        request_id = message.get("id")
        if not isinstance(method, str) or (
            request_id is not None and not isinstance(request_id, (str, int))
        ):
            return error_message(request_id, INVALID_REQUEST, "invalid request")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if "id" not in message:
            self._notification(session, method, params)
            return None
        try:
            result = await self._request(session, method, params, notify)
        except _RpcError as err:
            return error_message(request_id, err.code, err.message)
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def _notification(self, session: McpSession, method: str, params: JsonObject) -> None:
        if method == "notifications/cancelled":
            task = session.in_flight.get(_id_key(params.get("requestId")))
            if task is not None:
                task.cancel()

    async def _request(self, session: McpSession, method: str, params: JsonObject,
                       notify: NotifyFn) -> JsonObject:
        if method == "initialize":
            return self._initialize(session, params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [agent.to_tool() for agent in self.agents.values()]}
        if method == "tools/call":
            return await self._call(session, params, notify)
        raise _RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, session: McpSession, params: JsonObject) -> JsonObject:
        asked = params.get("protocolVersion")
        version = (
            asked
            if isinstance(asked, str) and asked in SUPPORTED_VERSIONS
            else SUPPORTED_VERSIONS[0]
        )
        session.protocol_version = version
        result: JsonObject = {"protocolVersion": version,
                              "capabilities": {"tools": {"listChanged": False}},
                              "serverInfo": {"name": self.name, "version": self.version}}
        if self.instructions:
            result["instructions"] = self.instructions
        return result

    async def _call(self, session: McpSession, params: JsonObject, notify: NotifyFn) -> JsonObject:
        name = params.get("name")
        agent = self.agents.get(name) if isinstance(name, str) else None
        if agent is None:
            raise _RpcError(INVALID_PARAMS, f"unknown tool: {name}")
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        message = arguments.get("message")
        conversation = arguments.get("conversation")
        if not isinstance(message, str):
            raise _RpcError(INVALID_PARAMS, "arguments.message must be a string")
        if conversation is not None and (
            not isinstance(conversation, str) or not conversation.strip()
        ):
            raise _RpcError(INVALID_PARAMS, "arguments.conversation must be a non-empty string")
        key = f"mcp:{conversation.strip() if conversation else session.id}"
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        count = 0

        def progress(what: str) -> None:
            nonlocal count
            if token is None or isinstance(token, bool):
                return
            count += 1
            notify({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": count, "message": what}})

        outcome = await self.ask(agent.agent, message, key, progress)
        return {"content": [{"type": "text", "text": outcome.text}], "isError": outcome.is_error}
