"""``goondan serve mcp``: a running swarm as an MCP server on stdin/stdout (docs/serving.md).

Desktop MCP clients start a server as a command and speak newline-delimited JSON-RPC on its
stdin and stdout. :func:`serve_stdio` reads one message per line, answers it with
:class:`goondan.mcp.server.McpServer` (one session: the process is the session) and writes one
message per line; stdout carries nothing else (the command points file descriptor 1 at stderr
before anything starts, so a stray print cannot corrupt the channel).

Each request runs as its own task, so a long ``tools/call`` does not hold up ``ping`` or a
``notifications/cancelled`` for it; a cancelled request gets no response (the MCP rule). The
calls go through :func:`goondan.swarm.asking.ask_ingress` on the Swarm's ``mcp-server``
Connection (``--connection``, else the first one): its inbox, routing rules and config
(``AGENTS``, ``DESCRIPTION_<agent>``) apply exactly as over HTTP. A Swarm without such a
Connection exposes its entry agent (or ``--agent`` names), and a call goes straight to the
agent's queue, like ``goondan send``. End of input cancels what is in flight and returns.

When the swarm already runs (``goondan run``), ``serve mcp`` attaches to it instead
(:func:`make_attached_ask`): each call is a streamed ``request`` on its control socket, as
``goondan send`` makes; closing that connection cancels the Turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from goondan.connectors.asking import APPROVAL_PENDING, approval_wait_text, progress_text
from goondan.connectors.event import ConnectorEvent
from goondan.connectors.spec import ConnectionSpec, resolve_connection_values
from goondan.errors import ConfigError, GoondanError
from goondan.ipc.controlwire import stream_control
from goondan.mcp.server import (
    PARSE_ERROR,
    AskFn,
    ExposedAgent,
    McpServer,
    McpSession,
    ProgressFn,
    ToolOutcome,
    error_message,
)
from goondan.runtime.agents import response_text
from goondan.swarm.asking import ask_ingress
from goondan.types import AgentEvent, JsonObject

__all__ = [
    "MAX_LINE_BYTES",
    "exposed_for",
    "make_ask",
    "make_attached_ask",
    "mcp_connection",
    "serve_stdio",
]

_log = logging.getLogger("goondan.swarm.mcp_stdio")

MAX_LINE_BYTES = 16 * 1024 * 1024
MCP_CONNECTOR = ("@goondan/base", "mcp-server")
EVENT_NAME = "mcp_tool_call"


def mcp_connection(
    connections: Sequence[ConnectionSpec], name: str | None
) -> ConnectionSpec | None:
    """The ``mcp-server`` Connection named ``name`` (``E_CONFIG_REF_NOT_FOUND`` if it is not one),
    or the first one, or ``None``."""
    mcp = [c for c in connections if (c.connector_package, c.connector) == MCP_CONNECTOR]
    if name is None:
        return mcp[0] if mcp else None
    found = next((c for c in mcp if c.name == name), None)
    if found is None:
        raise ConfigError(
            f"the Swarm has no mcp-server Connection {name!r}",
            code="E_CONFIG_REF_NOT_FOUND",
            suggestion="Connections of the mcp-server connector: "
            + (", ".join(c.name for c in mcp) or "none"),
        )
    return found


def exposed_for(bundle: Any, swarm: Any, spec: ConnectionSpec | None, agents: Sequence[str],
                env: Any) -> list[ExposedAgent]:
    """The agents to serve: ``agents``, else the Connection's ``AGENTS``, else the entry agent;
    described by ``DESCRIPTION_<agent>`` of the Connection, else ``Agent.spec.description``."""
    config: dict[str, str] = resolve_connection_values(spec, env)[0] if spec is not None else {}
    names = list(agents) or [n.strip() for n in config.get("AGENTS", "").split(",") if n.strip()] \
        or [swarm.entry_agent]
    unknown = [n for n in names if n not in swarm.agents]
    if unknown:
        raise ConfigError(
            f"not agents of Swarm {swarm.name!r}: {', '.join(unknown)}",
            code="E_CONFIG_REF_NOT_FOUND",
            suggestion="agents of the Swarm: " + ", ".join(swarm.agents),
        )
    exposed = []
    for name in names:
        resource = bundle.get("Agent", name)
        described = resource.spec.get("description") if resource is not None else None
        text = (config.get(f"DESCRIPTION_{name}") or "").strip() or \
            (described.strip() if isinstance(described, str) else "")
        exposed.append(ExposedAgent(name, text))
    return exposed


def make_ask(service: Any, spec: ConnectionSpec | None) -> AskFn:
    """``McpServer``'s ``ask`` for an in-process swarm (see the module docstring)."""

    async def ask(agent: str, message: str, instance_key: str, progress: ProgressFn) -> ToolOutcome:
        if spec is not None:
            event = ConnectorEvent.text(EVENT_NAME, message, instance_key=instance_key,
                                        properties={"tool": f"ask_{agent}", "agent": agent,
                                                    "session": instance_key.removeprefix("mcp:")})
            answer = await ask_ingress(service.connections.ingress, spec.name, event, agent=agent,
                                       on_progress=lambda p: progress(progress_text(p)))
            text, is_error = answer.outcome_text()
            return ToolOutcome(text, is_error)
        request = AgentEvent(type="message", input=message, instance_key=instance_key,
                             source={"kind": "connector", "name": "mcp-stdio"})
        try:
            reply = await service.orchestrator.request(agent, request, instance_key=instance_key,
                                                       on_event=_progress_filter(progress))
            if reply.metadata.get("finishReason") == APPROVAL_PENDING:
                return ToolOutcome(approval_wait_text(reply.metadata.get("approvals")))
            return ToolOutcome(response_text(reply))
        except GoondanError as err:
            return ToolOutcome(f"[{err.code}] {err.message}", is_error=True)

    return ask


def make_attached_ask(socket_path: Path) -> AskFn:
    """``McpServer``'s ``ask`` for a swarm running elsewhere: a streamed control ``request``."""

    async def ask(agent: str, message: str, instance_key: str, progress: ProgressFn) -> ToolOutcome:
        request: JsonObject = {"command": "request", "input": message, "agent": agent,
                               "instanceKey": instance_key, "stream": True}
        try:
            answer = await stream_control(socket_path, request, timeout_s=None,
                                          on_event=_progress_filter(progress))
        except GoondanError as err:
            return ToolOutcome(f"[{err.code}] {err.message}", is_error=True)
        if not answer.get("ok"):
            return ToolOutcome(f"[{answer.get('code')}] {answer.get('message')}", is_error=True)
        if answer.get("status") == "waitingForApproval":
            return ToolOutcome(approval_wait_text(answer.get("approvals")))
        return ToolOutcome(str(answer.get("response") or ""))

    return ask


def _progress_filter(progress: ProgressFn) -> Callable[[JsonObject], None]:
    from goondan.connectors.asking import PROGRESS_EVENT_TYPES

    def listener(payload: JsonObject) -> None:
        if payload.get("type") in PROGRESS_EVENT_TYPES:
            progress(progress_text(payload))

    return listener


async def serve_stdio(
    server: McpServer, reader: asyncio.StreamReader, write: Callable[[bytes], None]
) -> None:
    """Answer the messages read from ``reader`` until it ends (see the module docstring)."""
    session = McpSession()  # one per process: each start of the command is a new conversation
    tasks: set[asyncio.Task[None]] = set()

    def send(message: JsonObject) -> None:
        write(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")

    async def answer(message: JsonObject) -> None:
        response = await server.handle(session, message, send)
        if response is not None:
            send(response)

    try:
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # a line over the limit: unreadable, and so is the rest of it
                send(error_message(None, PARSE_ERROR, "message too large"))
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                send(error_message(None, PARSE_ERROR, "parse error"))
                continue
            if isinstance(message, dict) and "id" in message and "method" in message:
                task = asyncio.ensure_future(answer(message))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                session.track(message["id"], task)
            else:
                await answer(message)  # notifications (cancel) and junk: answered at once, in order
    finally:
        for task in list(tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
