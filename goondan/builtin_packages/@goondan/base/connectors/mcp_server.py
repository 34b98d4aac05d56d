"""Connector ``mcp-server`` of ``@goondan/base``: the swarm as an MCP server over Streamable
HTTP (docs/serving.md).

Config: ``PORT`` (required; 0 picks a free port, see ``address.json``), ``HOST`` (127.0.0.1),
``PATH`` (``/mcp``), ``AGENTS`` (comma-separated agent names to expose; default the Swarm's entry
agent), ``DESCRIPTION_<agent>`` (a tool's description; default the Agent's
``spec.description``), ``ALLOW_UNAUTHENTICATED`` (``"false"``), ``ALLOWED_ORIGINS``
(comma-separated ``Origin`` values accepted besides loopback ones), ``MAX_BODY_BYTES`` (1 MiB),
``MAX_CONNECTIONS``, ``MAX_CONNECTIONS_PER_IP``. Secret ``AUTH_TOKEN``: every request needs
``Authorization: Bearer <AUTH_TOKEN>`` (compared in constant time; 401 otherwise), required
unless ``ALLOW_UNAUTHENTICATED`` is ``"true"`` (``E_CONNECTOR_UNSIGNED`` at start otherwise).

The transport (MCP "Streamable HTTP"): a POST carries one JSON-RPC message. A notification or
response is answered 202; a request 200 with ``application/json`` — or, for a ``tools/call``
with a ``progressToken``, with ``text/event-stream``: progress notifications, then the response.
``initialize`` opens a session and answers its id in ``Mcp-Session-Id``; every other request
must carry it (400 without, 404 for an unknown or ended one), and an ``MCP-Protocol-Version``
header, when sent, must name a supported revision (400). DELETE ends a session (its calls
in flight are cancelled); GET (a server-to-client stream) is answered 405: this server sends
nothing unasked. A request whose ``Origin`` is neither loopback nor allowed is answered 403
(DNS rebinding). Each ``tools/call`` becomes an event ``mcp_tool_call`` (properties ``tool``,
``agent``, ``session``) handed to ``ctx.ask``: it goes through the Connection's inbox and
routing like any event, the named agent taking the entry agent's place, and the answer is
the agent's final text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from goondan.connectors import ConnectorContext, ConnectorEvent
from goondan.connectors.asking import progress_text
from goondan.connectors.signing import AUTH_TOKEN, signing_secret
from goondan.errors import GoondanError
from goondan.mcp.server import (
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    SUPPORTED_VERSIONS,
    ExposedAgent,
    McpServer,
    McpSession,
    ToolOutcome,
    error_message,
)

from ._http import Request, Response
from ._settings import (
    DEFAULT_MAX_BODY_BYTES,
    BadBody,
    bearer_matches,
    config_error,
    config_int,
    origin_allowed,
    parse_json_body,
    serve_http,
    setting,
)

__all__ = ["EVENT_NAME", "McpHttpHandler", "exposed_agents", "run"]

EVENT_NAME = "mcp_tool_call"
SESSION_HEADER = "Mcp-Session-Id"
SSE = "text/event-stream"
MAX_SESSIONS = 10_000


def exposed_agents(ctx: ConnectorContext) -> list[ExposedAgent]:
    """The agents of ``AGENTS`` (default the entry agent) with their descriptions."""
    raw = setting(ctx, "AGENTS")
    names = [n.strip() for n in raw.split(",") if n.strip()] if raw else [ctx.entry_agent]
    unknown = [n for n in names if n not in ctx.agents]
    if unknown or not names:
        raise config_error(
            ctx,
            f"config AGENTS names agents not in the Swarm: {', '.join(unknown) or '(none)'}",
            "list agents of the Swarm: " + ", ".join(ctx.agents),
        )
    return [
        ExposedAgent(n, setting(ctx, f"DESCRIPTION_{n}") or ctx.agents.get(n, "")) for n in names
    ]


def make_ask(ctx: ConnectorContext) -> Any:
    """The :class:`McpServer` ``ask``: one ``mcp_tool_call`` event through ``ctx.ask``."""

    async def ask(agent: str, message: str, instance_key: str, progress: Any) -> ToolOutcome:
        event = ConnectorEvent.text(EVENT_NAME, message, instance_key=instance_key,
                                    properties={"tool": f"ask_{agent}", "agent": agent,
                                                "session": instance_key.removeprefix("mcp:")})
        try:
            answer = await ctx.ask(
                event, agent=agent, on_progress=lambda p: progress(progress_text(p))
            )
        except GoondanError as err:  # refused by the ingress (a rule names an agent not running…)
            ctx.logger.warning("MCP call not accepted: %s", err.message)
            return ToolOutcome(f"[{err.code}] {err.message}", is_error=True)
        text, is_error = answer.outcome_text()
        return ToolOutcome(text, is_error)

    return ask


def _sse(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + json.dumps(message, ensure_ascii=False).encode() + b"\n\n"


class McpHttpHandler:
    """The request handler of the Streamable HTTP transport (see the module docstring)."""

    def __init__(self, ctx: ConnectorContext, server: McpServer, token: str | None, *,
                 allowed_origins: tuple[str, ...] = ()) -> None:
        self.ctx = ctx
        self.server = server
        self.token = token
        self.allowed_origins = allowed_origins
        self.sessions: dict[str, McpSession] = {}

    async def __call__(self, request: Request) -> Response:
        if self.token is not None and not bearer_matches(
            self.token, request.header("authorization")
        ):
            self.ctx.logger.warning("MCP request refused: missing or wrong bearer token")
            return Response(401, b'{"ok":false,"error":"unauthorized"}',
                            headers={"WWW-Authenticate": 'Bearer realm="goondan"'})
        if not origin_allowed(request.header("origin"), self.allowed_origins):
            return Response.error(403, "origin_not_allowed")
        if request.method == "GET":
            return Response(
                405, b'{"ok":false,"error":"method_not_allowed"}', headers={"Allow": "POST, DELETE"}
            )
        if request.method == "DELETE":
            session = self.sessions.pop(request.header("mcp-session-id"), None)
            if session is None:
                return Response.error(404, "unknown_session")
            session.cancel_all()
            return Response(200)
        return await self._post(request)

    async def _post(self, request: Request) -> Response:
        try:
            message = parse_json_body(request.body)
        except BadBody:
            return Response.json(400, error_message(None, PARSE_ERROR, "parse error"))
        if not isinstance(message, dict):  # batches were removed from the protocol (2025-06-18)
            return Response.json(
                400, error_message(None, INVALID_REQUEST, "one JSON-RPC message per POST")
            )
        is_request = "method" in message and "id" in message
        if message.get("method") == "initialize" and is_request:
            session = McpSession()
        else:
            session_id = request.header("mcp-session-id")
            if not session_id:
                return Response.json(400, error_message(message.get("id"), INVALID_REQUEST,
                                                        f"missing {SESSION_HEADER} header"))
            found = self.sessions.get(session_id)
            if found is None:
                return Response.json(
                    404, error_message(message.get("id"), INVALID_REQUEST, "unknown session")
                )
            session = found
            version = request.header("mcp-protocol-version")
            if version and version not in SUPPORTED_VERSIONS:
                return Response.json(
                    400,
                    error_message(
                        message.get("id"),
                        INVALID_REQUEST,
                        f"unsupported MCP-Protocol-Version {version}",
                    ),
                )
        if not is_request:
            await self.server.handle(session, message, lambda _: None)
            return Response(202)
        meta = (
            message.get("params", {}).get("_meta")
            if isinstance(message.get("params"), dict)
            else None
        )
        streamed = (message.get("method") == "tools/call" and isinstance(meta, dict)
                    and meta.get("progressToken") is not None and SSE in request.header("accept"))
        if streamed:
            return Response(200, content_type=SSE, headers={"Cache-Control": "no-cache"},
                            stream=self._stream(session, message))
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        response = await self._answer(session, message, queue.put_nowait)
        headers = {}
        if message.get("method") == "initialize" and "error" not in response:
            self._open(session)
            headers[SESSION_HEADER] = session.id
        return Response(200, Response.json(200, response).body, headers=headers)

    def _open(self, session: McpSession) -> None:
        """Remember a new session; past :data:`MAX_SESSIONS` the oldest idle one is forgotten
        (a client that never sends DELETE must not grow the table forever)."""
        self.sessions[session.id] = session
        if len(self.sessions) > MAX_SESSIONS:
            oldest = next((s for s in self.sessions.values() if not s.in_flight), None)
            if oldest is not None:
                del self.sessions[oldest.id]

    async def _answer(
        self, session: McpSession, message: dict[str, Any], notify: Any
    ) -> dict[str, Any]:
        task = asyncio.ensure_future(self.server.handle(session, message, notify))
        session.track(message["id"], task)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this request handler itself was cancelled (the server stops)
            return error_message(message["id"], REQUEST_CANCELLED, "request cancelled")
        return result or error_message(message["id"], INVALID_REQUEST, "no response")

    async def _stream(self, session: McpSession, message: dict[str, Any]) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        answer = asyncio.ensure_future(self._answer(session, message, queue.put_nowait))
        answer.add_done_callback(lambda _: queue.put_nowait(None))
        while (item := await queue.get()) is not None:
            yield _sse(item)
        yield _sse(answer.result())


async def run(ctx: ConnectorContext) -> None:
    """Serve MCP over Streamable HTTP until cancelled."""
    port = config_int(ctx, "PORT", default=None, maximum=65535)
    max_body = config_int(ctx, "MAX_BODY_BYTES", default=DEFAULT_MAX_BODY_BYTES, minimum=1)
    path = setting(ctx, "PATH") or "/mcp"
    token = signing_secret(ctx, AUTH_TOKEN)
    origins = tuple(
        o.strip() for o in (setting(ctx, "ALLOWED_ORIGINS") or "").split(",") if o.strip()
    )
    server = McpServer(exposed_agents(ctx), make_ask(ctx), name=f"goondan {ctx.connection_name}")
    handler = McpHttpHandler(ctx, server, token, allowed_origins=origins)
    await serve_http(ctx, handler, port=port, path=path, max_body_bytes=max_body,
                     methods=("POST", "GET", "DELETE"))
