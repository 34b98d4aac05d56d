"""Connector ``a2a`` of ``@goondan/base``: the swarm as an Agent2Agent (A2A 1.0) server over the
JSON-RPC binding (docs/serving.md).

Config: ``PORT`` (required; 0 picks a free port, see ``address.json``), ``HOST`` (127.0.0.1),
``PATH`` (``/a2a``: the JSON-RPC endpoint), ``AGENTS`` (comma-separated agent names to expose as
the card's skills; default the Swarm's entry agent; the first answers messages that name no
skill), ``DESCRIPTION_<agent>`` (a skill's description; default the Agent's
``spec.description``), ``NAME`` and ``DESCRIPTION`` (the card's; default the Connection's name
and the first skill's description), ``PUBLIC_URL`` (the JSON-RPC URL the card names; default
``http://<Host header><PATH>``), ``ALLOWED_ORIGINS`` (as ``mcp-server``: a browser request
from another origin is answered 403), ``ALLOW_UNAUTHENTICATED`` (``"false"``), ``MAX_BODY_BYTES``
(1 MiB), ``MAX_CONNECTIONS``, ``MAX_CONNECTIONS_PER_IP``. Secret ``AUTH_TOKEN``: every request,
the card's included, needs ``Authorization: Bearer <AUTH_TOKEN>`` (constant-time compare; 401
otherwise), required unless ``ALLOW_UNAUTHENTICATED`` is ``"true"``.

``GET /.well-known/agent-card.json`` answers the agent card. ``POST <PATH>`` takes one JSON-RPC
request: ``SendMessage`` (answers the Task once it ended, or at once with
``configuration.returnImmediately``), ``SendStreamingMessage`` (Server-Sent Events: the Task,
a ``statusUpdate`` per step and tool call, the answer as an ``artifactUpdate``, the final
``statusUpdate``), ``GetTask`` and ``CancelTask``. Each message becomes a Task and an event
``a2a_message`` (properties ``agent``, ``context``, ``task``) handed to ``ctx.ask``: it goes
through the Connection's inbox and routing like any event, with instanceKey
``a2a:<contextId>`` — a message without ``contextId`` starts a new context, so a client that
sends the returned ``contextId`` continues the conversation. A message's ``metadata.skill``
picks another exposed agent. Tasks are kept in memory (the newest 10,000): a restart forgets
them, the conversation itself is durable.

A Turn that parks on an approval (docs/approvals.md) puts its Task in
``TASK_STATE_INPUT_REQUIRED``, the status message listing the approvals (text, and a data part
``{"approvals": [{id, tool, args, reason}]}``: the decider sees what it approves). A message
to that Task (``taskId``) decides one —
``approve [ID]``, ``deny [ID] [REASON]`` or a data part ``{"approval": {id, decision, reason?}}``
— through ``ctx.decide_approval`` (``via: a2a``), only when ``ALLOW_APPROVAL_DECISIONS`` is
``"true"`` (else ``-32004``); the Task then completes with the resumed Turn's answer.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from goondan.a2a.wire import (
    CARD_PATH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    PROTOCOL_VERSION,
    TASK_NOT_CANCELABLE,
    TASK_NOT_FOUND,
    TERMINAL_STATES,
    UNSUPPORTED_OPERATION,
    agent_message,
    error_response,
    message_text,
    new_id,
    result_response,
    timestamp,
)
from goondan.connectors import ConnectorContext, ConnectorEvent
from goondan.connectors.asking import progress_text
from goondan.connectors.signing import AUTH_TOKEN, signing_secret
from goondan.errors import GoondanError

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

__all__ = ["EVENT_NAME", "A2aHandler", "parse_decision", "run"]

EVENT_NAME = "a2a_message"
SSE = "text/event-stream"
MAX_TASKS = 10_000
CONTEXT_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
DECIDE = re.compile(r"^\s*(approve|deny)\b(?:\s+(apr_\w+))?\s*(.*)$", re.IGNORECASE | re.DOTALL)


Decision = tuple[str, bool, str | None]  # (approval id, approve, reason)


def parse_decision(message: Any, waiting: list[dict[str, Any]]) -> Decision | str:
    """``(approval id, approve, reason)`` of a message answering a Task that waits for
    approval (docs/serving.md), or the reason it is not one: a data part
    ``{"approval": {"id", "decision": "approve" | "deny", "reason"?}}``, or the text
    ``approve [ID]`` / ``deny [ID] [REASON]`` (ID may be left out while one approval waits)."""
    ids = [str(a.get("id")) for a in waiting]
    parts = message.get("parts") if isinstance(message, dict) else None
    for part in parts if isinstance(parts, list) else []:
        data = part.get("data") if isinstance(part, dict) else None
        found = data.get("approval") if isinstance(data, dict) else None
        if isinstance(found, dict):
            decision, reason = found.get("decision"), found.get("reason")
            if decision not in ("approve", "deny"):
                return 'approval.decision must be "approve" or "deny"'
            ident = found.get("id") if found.get("id") is not None else (
                ids[0] if len(ids) == 1 else None)
            return _checked(ident, ids, decision == "approve",
                            str(reason) if isinstance(reason, str) and reason else None)
    matched = DECIDE.match(message_text(message))
    if matched is None:
        return ("the task waits for approval of " + ", ".join(ids)
                + ': answer "approve ID" or "deny ID REASON" (or an approval data part)')
    verb, ident, rest = matched.group(1).lower(), matched.group(2), matched.group(3).strip()
    if ident is None and len(ids) == 1:
        ident = ids[0]
    return _checked(ident, ids, verb == "approve", rest or None if verb == "deny" else None)


def _checked(ident: Any, ids: list[str], approve: bool,
             reason: str | None) -> Decision | str:
    if not isinstance(ident, str) or ident not in ids:
        return f"name one of the approvals this task waits for: {', '.join(ids)}"
    return ident, approve, reason


@dataclass
class TaskRecord:
    """One A2A Task: a message sent to an agent and what became of it."""

    id: str
    context_id: str
    agent: str
    history: list[dict[str, Any]]
    state: str = "TASK_STATE_SUBMITTED"
    status_message: dict[str, Any] | None = None
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    updated: str = field(default_factory=timestamp)
    runner: asyncio.Task[None] | None = None
    listeners: list[asyncio.Queue[dict[str, Any]]] = field(default_factory=list)
    # the approvals its Turn waits for ({id, tool, reason}); set while TASK_STATE_INPUT_REQUIRED
    approvals: list[dict[str, Any]] = field(default_factory=list)
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # ended or input-required

    @property
    def paused(self) -> bool:
        """Ended, or waiting for the client's input (an approval): a send stops waiting."""
        return self.state in TERMINAL_STATES or self.state == INPUT_REQUIRED

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {"state": self.state, "timestamp": self.updated}
        if self.status_message is not None:
            status["message"] = self.status_message
        return status

    def to_dict(self, history_length: int | None = None) -> dict[str, Any]:
        history = self.history
        if history_length is not None:  # the last historyLength messages
            history = history[-history_length:] if history_length > 0 else []
        task: dict[str, Any] = {
            "id": self.id,
            "contextId": self.context_id,
            "status": self.status(),
            "history": history,
        }
        if self.artifacts:
            task["artifacts"] = self.artifacts
        return task


def _skills(ctx: ConnectorContext) -> dict[str, str]:
    raw = setting(ctx, "AGENTS")
    names = [n.strip() for n in raw.split(",") if n.strip()] if raw else [ctx.entry_agent]
    unknown = [n for n in names if n not in ctx.agents]
    if unknown or not names:
        raise config_error(
            ctx,
            f"config AGENTS names agents not in the Swarm: {', '.join(unknown) or '(none)'}",
            "list agents of the Swarm: " + ", ".join(ctx.agents),
        )
    return {
        n: setting(ctx, f"DESCRIPTION_{n}") or ctx.agents.get(n, "") or f"Ask the agent {n}."
        for n in names
    }


class A2aHandler:
    """The request handler: the card, and the JSON-RPC methods (see the module docstring)."""

    def __init__(self, ctx: ConnectorContext, token: str | None, path: str) -> None:
        self.ctx = ctx
        self.token = token
        self.path = path
        self.skills = _skills(ctx)
        self.tasks: dict[str, TaskRecord] = {}
        self.allowed_origins = tuple(
            o.strip() for o in (setting(ctx, "ALLOWED_ORIGINS") or "").split(",") if o.strip()
        )
        self.public_url = setting(ctx, "PUBLIC_URL")

    async def __call__(self, request: Request) -> Response:
        if self.token is not None and not bearer_matches(
            self.token, request.header("authorization")
        ):
            self.ctx.logger.warning("A2A request refused: missing or wrong bearer token")
            return Response(401, b'{"ok":false,"error":"unauthorized"}',
                            headers={"WWW-Authenticate": 'Bearer realm="goondan"'})
        if not origin_allowed(request.header("origin"), self.allowed_origins):
            return Response.error(403, "origin_not_allowed")
        if request.path == CARD_PATH:
            if request.method != "GET":
                return Response(
                    405, b'{"ok":false,"error":"method_not_allowed"}', headers={"Allow": "GET"}
                )
            return Response.json(200, self.card(request.header("host")))
        if request.method != "POST":
            return Response(
                405, b'{"ok":false,"error":"method_not_allowed"}', headers={"Allow": "POST"}
            )
        try:
            message = parse_json_body(request.body)
        except BadBody:
            return Response.json(200, error_response(None, PARSE_ERROR, "parse error"))
        if not isinstance(message, dict) or not isinstance(message.get("method"), str) \
                or not isinstance(message.get("params", {}), dict):
            return Response.json(
                200, error_response(None, INVALID_REQUEST, "one JSON-RPC request object")
            )
        rid, method, params = message.get("id"), message["method"], message.get("params") or {}
        waiting = self._waiting_task(params)
        if waiting is not None and method in ("SendMessage", "SendStreamingMessage"):
            return await self._decision(rid, method, params, waiting)
        if method == "SendStreamingMessage":
            started = self._start(params)
            if isinstance(started, str):
                return Response.json(200, error_response(rid, INVALID_PARAMS, started))
            queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            started.listeners.append(queue)  # before its Turn runs: no update is missed
            return Response(200, content_type=SSE, headers={"Cache-Control": "no-cache"},
                            stream=self._stream(rid, started, queue))
        return Response.json(200, await self._call(rid, method, params))

    def card(self, host: str) -> dict[str, Any]:
        """The agent card (protobuf ``AgentCard`` as JSON)."""
        first = next(iter(self.skills))
        card: dict[str, Any] = {
            "name": setting(self.ctx, "NAME") or self.ctx.connection_name,
            "description": setting(self.ctx, "DESCRIPTION") or self.skills[first],
            "supportedInterfaces": [
                {
                    "url": self.public_url or f"http://{host or '127.0.0.1'}{self.path}",
                    "protocolBinding": "JSONRPC",
                    "protocolVersion": PROTOCOL_VERSION,
                }
            ],
            "version": "1.0.0",
            "capabilities": {"streaming": True, "pushNotifications": False},
            "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [
                {"id": name, "name": name, "description": text, "tags": ["goondan"]}
                for name, text in self.skills.items()
            ],
        }
        if self.token is not None:
            card["securitySchemes"] = {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}}
            card["securityRequirements"] = [{"schemes": {"bearer": {"list": []}}}]
        return card

    async def _call(self, rid: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "SendMessage":
            started = self._start(params)
            if isinstance(started, str):
                return error_response(rid, INVALID_PARAMS, started)
            configuration = params.get("configuration")
            if not (
                isinstance(configuration, dict) and configuration.get("returnImmediately") is True
            ):
                await asyncio.shield(started.settled.wait())  # ended, or waits for approval
            return result_response(rid, {"task": started.to_dict()})
        if method not in ("GetTask", "CancelTask"):
            return error_response(rid, METHOD_NOT_FOUND, f"method not found: {method}")
        record = self.tasks.get(str(params.get("id")))
        if record is None:
            return error_response(rid, TASK_NOT_FOUND, "task not found")
        if method == "GetTask":
            length = params.get("historyLength")
            return result_response(
                rid, record.to_dict(length if isinstance(length, int) and length >= 0 else None)
            )
        if record.state in TERMINAL_STATES or record.runner is None:
            return error_response(rid, TASK_NOT_CANCELABLE, f"task is {record.state}")
        record.runner.cancel()
        await asyncio.wait([record.runner])
        if record.state not in TERMINAL_STATES:  # cancelled before its Turn was handed over
            self._set(record, "TASK_STATE_CANCELED", "cancelled")
        return result_response(rid, record.to_dict())

    def _start(self, params: dict[str, Any]) -> TaskRecord | str:
        """Create the Task of a send and start its Turn; a reason string for bad params."""
        message = params.get("message")
        text = message_text(message)
        if not isinstance(message, dict) or not text.strip():
            return "params.message needs a text part"
        context_id = message.get("contextId") or new_id()
        if not isinstance(context_id, str) or not CONTEXT_ID.match(context_id):
            return "contextId must be 1-128 letters, digits or . _ : -"
        metadata = message.get("metadata")
        agent = (metadata.get("skill") if isinstance(metadata, dict) else None) or next(
            iter(self.skills)
        )
        if agent not in self.skills:
            return f"unknown skill {agent!r}; skills: {', '.join(self.skills)}"
        record = TaskRecord(new_id(), context_id, str(agent), [])
        record.history.append(
            {**message, "contextId": context_id, "taskId": record.id, "role": "ROLE_USER"}
        )
        self._remember(record)
        record.runner = asyncio.ensure_future(self._run(record, text))
        return record

    def _waiting_task(self, params: dict[str, Any]) -> TaskRecord | None:
        """The Task a sent message answers when it waits for approval (``message.taskId``)."""
        message = params.get("message")
        task_id = message.get("taskId") if isinstance(message, dict) else None
        record = self.tasks.get(task_id) if isinstance(task_id, str) else None
        return record if record is not None and record.state == INPUT_REQUIRED else None

    async def _decision(self, rid: Any, method: str, params: dict[str, Any],
                        record: TaskRecord) -> Response:
        """A message to a Task waiting for approval: the decision, stored as ``goondan approvals``
        stores one (``via: a2a``) when ``ALLOW_APPROVAL_DECISIONS`` is ``"true"``; the Task then
        goes on (streamed, or answered once it ended or waits again)."""
        message = params["message"]
        if (setting(self.ctx, "ALLOW_APPROVAL_DECISIONS") or "").lower() != "true":
            return Response.json(200, error_response(
                rid, UNSUPPORTED_OPERATION, "the task waits for approval; deciding it over A2A "
                "is not enabled on this Connection (config ALLOW_APPROVAL_DECISIONS)"))
        parsed = parse_decision(message, record.approvals)
        if isinstance(parsed, str):
            return Response.json(200, error_response(rid, INVALID_PARAMS, parsed))
        ident, approve, reason = parsed
        try:
            stored = await self.ctx.decide_approval(
                ident, approve=approve, by=f"a2a:{record.context_id}", via="a2a", reason=reason)
        except GoondanError as err:
            return Response.json(200, error_response(rid, INVALID_PARAMS,
                                                     f"[{err.code}] {err.message}"))
        record.history.append({**message, "contextId": record.context_id, "taskId": record.id,
                               "role": "ROLE_USER"})
        record.approvals = [a for a in record.approvals if a.get("id") != ident]
        status = stored.get("status")
        self.ctx.logger.info("A2A decision on approval %s: %s", ident, status)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        record.listeners.append(queue)  # before the state changes: no update is missed
        if record.approvals:  # another approval of the Turn still waits
            self._waiting(record, None)
        else:
            self._set(record, "TASK_STATE_WORKING", f"approval {ident} {status}; resuming")
        if method == "SendStreamingMessage":
            return Response(200, content_type=SSE, headers={"Cache-Control": "no-cache"},
                            stream=self._stream(rid, record, queue))
        record.listeners.remove(queue)
        await asyncio.shield(record.settled.wait())
        return Response.json(200, result_response(rid, {"task": record.to_dict()}))

    def _waiting(self, record: TaskRecord, payload: dict[str, Any] | None) -> None:
        """The Turn waits for approval (``approval.requested``): input required, the message
        lists what waits (text, and a data part ``{"approvals": [{id, tool, reason}]}``)."""
        if payload is not None:
            record.approvals.append({"id": payload.get("approvalId"),
                                     "tool": payload.get("toolName"),
                                     "args": payload.get("args"),
                                     "reason": payload.get("reason")})
        lines = ["Waiting for approval:"] + [
            f"- {a['id']}: tool {a['tool']} {_short(a.get('args'))}"
            + (f" ({a['reason']})" if a.get("reason") else "")
            for a in record.approvals]
        lines.append('Answer in this task with "approve ID" or "deny ID REASON".')
        text = "\n".join(lines)
        message = agent_message(text, context_id=record.context_id, task_id=record.id)
        message["parts"].append({"data": {"approvals": list(record.approvals)}})
        record.status_message = message
        self._set(record, INPUT_REQUIRED)

    def _remember(self, record: TaskRecord) -> None:
        self.tasks[record.id] = record
        if len(self.tasks) > MAX_TASKS:
            oldest = next((t for t in self.tasks.values() if t.state in TERMINAL_STATES), None)
            if oldest is not None:
                del self.tasks[oldest.id]

    def _set(self, record: TaskRecord, state: str, text: str | None = None) -> None:
        record.state, record.updated = state, timestamp()
        if record.paused:
            record.settled.set()
        else:
            record.settled.clear()
        if text is not None:
            record.status_message = agent_message(
                text, context_id=record.context_id, task_id=record.id
            )
        update = {
            "statusUpdate": {
                "taskId": record.id,
                "contextId": record.context_id,
                "status": record.status(),
            }
        }
        self._publish(record, update)

    def _publish(self, record: TaskRecord, update: dict[str, Any]) -> None:
        for queue in record.listeners:
            queue.put_nowait(update)

    async def _run(self, record: TaskRecord, text: str) -> None:
        event = ConnectorEvent.text(EVENT_NAME, text, instance_key=f"a2a:{record.context_id}",
                                    properties={"agent": record.agent, "context": record.context_id,
                                                "task": record.id})
        self._set(record, "TASK_STATE_WORKING")
        called: dict[str, Any] = {}  # toolCallId -> args, shown with an approval of that call

        def progress(payload: dict[str, Any]) -> None:
            if payload.get("type") == "tool.called":
                called[str(payload.get("toolCallId"))] = payload.get("args")
            if payload.get("type") == "approval.requested":
                payload = {**payload, "args": called.get(str(payload.get("toolCallId")))}
                self._waiting(record, payload)
            elif record.state != INPUT_REQUIRED:
                self._set(record, "TASK_STATE_WORKING", progress_text(payload))

        try:
            # a Turn parked on an approval answers once resumed: meanwhile the Task is
            # TASK_STATE_INPUT_REQUIRED (``progress``) and a message to it decides (_decision)
            answer = await self.ctx.ask(event, agent=record.agent, on_progress=progress,
                                        wait_for_approval=True)
        except asyncio.CancelledError:
            self._set(record, "TASK_STATE_CANCELED", "cancelled")
            return
        except GoondanError as err:  # refused by the ingress (a rule names an agent not running…)
            self.ctx.logger.warning("A2A message not accepted: %s", err.message)
            self._set(record, "TASK_STATE_FAILED", f"[{err.code}] {err.message}")
            return
        reply, is_error = answer.outcome_text()
        if is_error:
            self._set(record, "TASK_STATE_FAILED", reply)
            return
        answer_message = agent_message(reply, context_id=record.context_id, task_id=record.id)
        record.history.append(answer_message)
        artifact = {"artifactId": new_id(), "name": "answer", "parts": [{"text": reply}]}
        record.artifacts.append(artifact)
        self._publish(
            record,
            {
                "artifactUpdate": {
                    "taskId": record.id,
                    "contextId": record.context_id,
                    "artifact": artifact,
                    "lastChunk": True,
                }
            },
        )
        record.status_message = answer_message
        self._set(record, "TASK_STATE_COMPLETED")

    async def _stream(self, rid: Any, record: TaskRecord,
                      queue: asyncio.Queue[dict[str, Any]]) -> AsyncIterator[bytes]:
        try:
            yield _sse(result_response(rid, {"task": record.to_dict()}))
            while not record.paused or not queue.empty():
                update = await queue.get()
                yield _sse(result_response(rid, update))
        finally:
            record.listeners.remove(queue)


def _short(args: Any, limit: int = 300) -> str:
    """The arguments of a waiting call as compact JSON, cut at ``limit`` characters (the data
    part carries them whole)."""
    text = json.dumps(args if args is not None else {}, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _sse(message: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(message, ensure_ascii=False).encode() + b"\n\n"


async def run(ctx: ConnectorContext) -> None:
    """Serve A2A until cancelled."""
    port = config_int(ctx, "PORT", default=None, maximum=65535)
    max_body = config_int(ctx, "MAX_BODY_BYTES", default=DEFAULT_MAX_BODY_BYTES, minimum=1)
    path = setting(ctx, "PATH") or "/a2a"
    token = signing_secret(ctx, AUTH_TOKEN)
    handler = A2aHandler(ctx, token, path)
    await serve_http(ctx, handler, port=port, path=path, max_body_bytes=max_body,
                     methods=("POST", "GET"), extra_paths=(CARD_PATH,))
