"""``A2aToolProvider``: a remote A2A agent's skills as tools of one agent instance (docs/tools.md
"A2A agents").

Lazy like :class:`~goondan.mcp.McpToolProvider`: the agent card is fetched when the first step
builds its catalog (``<origin of url>/.well-known/agent-card.json``, with the Tool's
``headers``), and kept for the instance's life. A card that cannot be read leaves the Tool's
tools out of that catalog (logged at WARNING); the next step tries again.

Each skill of the card (or of ``exports``) is a tool ``<Tool>__<skill>`` taking ``message``
and an optional ``contextId`` (continue a conversation an earlier answer started). A call
sends ``SendStreamingMessage`` (``SendMessage`` when the card does not stream) with the skill
in ``message.metadata.skill`` and reads the stream to the Task's end (a cancelled call sends
``CancelTask``, which ends the stream); its result is
``{answer, contextId, taskId}``. A Task that fails, is cancelled or rejected, or waits for
input, and an HTTP, JSON-RPC or connection error, is a failed tool result (``E_A2A_…``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from goondan.a2a.wire import CARD_PATH, TERMINAL_STATES, message_text, new_id, task_text
from goondan.config.a2a import A2aAgentSpec
from goondan.mcp.protocol import tool_names
from goondan.tools.context import ToolContext
from goondan.tools.executor import ToolFailure
from goondan.tools.providers import ChangeListener
from goondan.tools.registry import RegisteredTool, build_tool
from goondan.types import JsonObject, JsonValue, ToolCatalogItem, ToolSource

__all__ = ["A2aToolProvider"]

CARD_TIMEOUT_S = 10.0
_DEADLINE_MARGIN_MS = 2_000
PARAMETERS: JsonObject = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to send to the remote agent."},
        "contextId": {"type": "string", "description": "Continue the conversation an earlier "
                      "answer of this tool started: its contextId. Omit to start a new one."},
    },
    "required": ["message"],
}


class A2aError(Exception):
    """A failed exchange; ``code`` is an ``E_A2A_…`` code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.message, self.code = message, code


class A2aToolProvider:
    """A :class:`~goondan.tools.providers.ToolProvider` backed by one remote A2A agent."""

    def __init__(self, spec: A2aAgentSpec, *, env: Mapping[str, str] | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.spec = spec
        self._env = dict(env) if env is not None else None
        self._log = logger or logging.getLogger("goondan.a2a")
        self._pool: Any = None
        self._tools: list[RegisteredTool] | None = None
        self._skills: dict[str, str] = {}     # catalog name → skill id
        self._endpoint = spec.url
        self._streaming = True
        self._on_change: ChangeListener | None = None

    def __repr__(self) -> str:
        return f"<A2aToolProvider {self.spec.name}>"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def lazy(self) -> bool:
        """Read the card at the first catalog, not when the instance opens."""
        return True

    async def open(self, on_change: ChangeListener) -> None:
        self._on_change = on_change

    async def list_tools(self) -> list[RegisteredTool]:
        """The card's skills as tools; ``[]`` while the card cannot be read."""
        if self._tools is None:
            try:
                card = await asyncio.to_thread(self._fetch_card)
            except A2aError as exc:
                self._log.warning("A2A agent %s: %s", self.spec.name, exc.message)
                if self._on_change is not None:
                    self._on_change(self)  # stale: the next step's catalog tries again
                return []
            self._tools = self._build(card)
        return list(self._tools)

    def _headers(self) -> dict[str, str]:
        headers, unset = self.spec.resolve_headers(
            self._env if self._env is not None else dict(os.environ)
        )
        if unset:
            raise A2aError(f"headers {', '.join(unset)} resolve to no value", "E_A2A_UNAVAILABLE")
        return {**headers, "A2A-Version": "1.0"}

    def _request(self, method: str, url: str, timeout_s: float, **kwargs: Any) -> Any:
        import goondan.http as http

        if self._pool is None:
            self._pool = http.new_pool(maxsize=8)
        try:
            return self._pool.request(method, url, preload_content=False,
                                      timeout=http.timeout(timeout_s, total_s=None), **kwargs)
        except Exception as exc:
            failure = http.failure_of(exc)
            if failure is None:
                raise
            code = "E_A2A_TIMEOUT" if failure.timed_out else "E_A2A_UNAVAILABLE"
            raise A2aError(f"{http.safe_origin(url)}: {failure.reason}", code) from None

    def _fetch_card(self) -> JsonObject:
        parts = urlsplit(self.spec.url)
        url = f"{parts.scheme}://{parts.netloc}{CARD_PATH}"
        response = self._request("GET", url, CARD_TIMEOUT_S, headers=self._headers())
        try:
            body = response.read()
        finally:
            response.release_conn()
        if response.status != 200:
            raise A2aError(f"agent card: HTTP {response.status}", "E_A2A_HTTP")
        try:
            card = json.loads(body)
        except ValueError:
            raise A2aError("agent card: not JSON", "E_A2A_PROTOCOL") from None
        if not isinstance(card, dict) or not isinstance(card.get("skills"), list):
            raise A2aError("agent card: no skills list", "E_A2A_PROTOCOL")
        for interface in card.get("supportedInterfaces") or []:
            if isinstance(interface, dict) and interface.get("protocolBinding") == "JSONRPC" \
                    and isinstance(interface.get("url"), str):
                self._endpoint = interface["url"]
                break
        capabilities = card.get("capabilities")
        self._streaming = isinstance(capabilities, dict) and capabilities.get("streaming") is True
        return card

    def _build(self, card: JsonObject) -> list[RegisteredTool]:
        skills = {str(s["id"]): s for s in card["skills"] if isinstance(s, dict) and s.get("id")}
        if self.spec.exports is not None:
            missing = sorted(set(self.spec.exports) - set(skills))
            if missing:
                self._log.warning(
                    "A2A agent %s has no skill %s (exports)", self.spec.name, ", ".join(missing)
                )
            skills = {k: v for k, v in skills.items() if k in self.spec.exports}
        self._skills = tool_names(self.spec.name, list(skills))
        tools = []
        for catalog_name, skill in self._skills.items():
            raw = skills[skill]
            description = str(raw.get("description") or card.get("description") or f"Ask {skill}.")
            item = ToolCatalogItem(catalog_name, description, dict(PARAMETERS),
                                   ToolSource("a2a", self.spec.name))
            tools.append(
                build_tool(
                    item,
                    self._handler(catalog_name),
                    timeout_ms=self.spec.timeout_ms + _DEADLINE_MARGIN_MS,
                    source=item.source,
                )
            )
        return tools

    def _handler(self, catalog_name: str) -> Any:
        async def handler(context: ToolContext, args: JsonObject) -> JsonValue:
            return await self.call(catalog_name, context, args)
        return handler

    async def call(self, name: str, context: ToolContext, args: JsonObject) -> JsonValue:
        """Send the message to the skill and wait for the Task's end (see the module docstring)."""
        skill = self._skills.get(name)
        if skill is None:
            raise ToolFailure(
                f"A2A agent {self.spec.name!r} offers no tool {name!r}", code="E_A2A_NO_TOOL"
            )
        text, context_id = args.get("message"), args.get("contextId")
        if not isinstance(text, str) or not text.strip():
            raise ToolFailure("message must be a non-empty string", code="E_TOOL_INVALID_ARGS")
        message: JsonObject = {
            "messageId": new_id(),
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            "metadata": {"skill": skill},
        }
        if isinstance(context_id, str) and context_id:
            message["contextId"] = context_id
        seen = _Seen()
        try:
            task = await asyncio.to_thread(self._send, message, seen)
        except asyncio.CancelledError:  # the Turn was cancelled: so is the remote Task
            await asyncio.shield(asyncio.to_thread(self._cancel_quietly, seen))
            raise
        except A2aError as exc:
            raise ToolFailure(
                f"A2A agent {self.spec.name!r}: {exc.message}", code=exc.code
            ) from None
        state = str((task.get("status") or {}).get("state"))
        answer = task_text(task) if state == "TASK_STATE_COMPLETED" else \
            message_text((task.get("status") or {}).get("message"))
        if state != "TASK_STATE_COMPLETED":
            code = (
                "E_A2A_INPUT_REQUIRED"
                if state in ("TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED")
                else "E_A2A_TASK_FAILED"
            )
            raise ToolFailure(
                f"A2A agent {self.spec.name!r}: task {state}: {answer}".rstrip(": "), code=code
            )
        return {"answer": answer, "contextId": task.get("contextId"), "taskId": task.get("id")}

    def _cancel_quietly(self, seen: _Seen) -> None:
        """``CancelTask`` once the Task's id is known (best effort: the remote Task may have
        ended meanwhile, or never started)."""
        if not seen.known.wait(CARD_TIMEOUT_S) or seen.task_id is None:
            return
        task_id = seen.task_id
        body = json.dumps(
            {"jsonrpc": "2.0", "id": new_id(), "method": "CancelTask", "params": {"id": task_id}}
        )
        try:
            response = self._request(
                "POST",
                self._endpoint,
                CARD_TIMEOUT_S,
                body=body.encode(),
                headers={**self._headers(), "Content-Type": "application/json"},
            )
            response.read()
            response.release_conn()
        except A2aError as exc:
            self._log.info(
                "A2A agent %s: cancel of task %s not sent: %s", self.spec.name, task_id, exc.message
            )

    def _send(self, message: JsonObject, seen: _Seen) -> JsonObject:
        try:
            return self._exchange(message, seen)
        finally:
            seen.known.set()  # ended without a Task id: nothing to cancel

    def _exchange(self, message: JsonObject, seen: _Seen) -> JsonObject:
        method = "SendStreamingMessage" if self._streaming else "SendMessage"
        body = json.dumps({"jsonrpc": "2.0", "id": new_id(), "method": method,
                           "params": {"message": message}}).encode()
        headers = {**self._headers(), "Content-Type": "application/json",
                   "Accept": "text/event-stream, application/json"}
        response = self._request(
            "POST", self._endpoint, self.spec.timeout_ms / 1000.0, body=body, headers=headers
        )
        try:
            if response.status != 200:
                raise A2aError(f"HTTP {response.status}", "E_A2A_HTTP")
            if "text/event-stream" not in (response.headers.get("content-type") or ""):
                return _task_of(_result(response.read()))
            return _read_stream(response, seen)
        except A2aError:
            raise
        except Exception as exc:  # the stream broke off or timed out while reading
            import goondan.http as http

            failure = http.failure_of(exc)
            if failure is None:
                raise
            raise A2aError(
                failure.reason, "E_A2A_TIMEOUT" if failure.timed_out else "E_A2A_UNAVAILABLE"
            ) from None
        finally:
            response.release_conn()

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.clear()

    def status(self) -> JsonObject:
        return {
            "name": self.spec.name,
            "transport": "a2a",
            "target": self.spec.url,
            "state": "ready" if self._tools is not None else "idle",
            "tools": len(self._tools or []),
        }


def _result(raw: bytes) -> Any:
    try:
        data = json.loads(raw)
    except ValueError:
        raise A2aError("answer is not JSON", "E_A2A_PROTOCOL") from None
    if not isinstance(data, dict):
        raise A2aError("answer is not a JSON-RPC response", "E_A2A_PROTOCOL")
    error = data.get("error")
    if isinstance(error, dict):
        raise A2aError(
            f"JSON-RPC error {error.get('code')}: {error.get('message')}", "E_A2A_RPC_ERROR"
        )
    return data.get("result")


def _task_of(result: Any) -> JsonObject:
    if isinstance(result, dict) and isinstance(result.get("task"), dict):
        return result["task"]  # type: ignore[no-any-return]
    if isinstance(result, dict) and isinstance(result.get("message"), dict):  # a direct reply
        msg = result["message"]
        return {"id": msg.get("taskId"), "contextId": msg.get("contextId"),
                "status": {"state": "TASK_STATE_COMPLETED", "message": msg}}
    raise A2aError("answer holds neither a task nor a message", "E_A2A_PROTOCOL")


class _Seen:
    """The id of a call's Task, as soon as the stream told it (from the reading thread)."""

    def __init__(self) -> None:
        self.task_id: str | None = None
        self.known = threading.Event()


def _read_stream(response: Any, seen: _Seen) -> JsonObject:
    """Fold a ``SendStreamingMessage`` event stream into the final Task (its id goes to
    ``seen`` as soon as it is known, so a cancelled call can cancel it)."""
    task: JsonObject = {}
    buffer = b""
    for chunk in response.stream(8192):
        buffer += chunk
        while b"\n\n" in buffer:
            frame, buffer = buffer.split(b"\n\n", 1)
            data = b"\n".join(
                line[5:].lstrip() for line in frame.splitlines() if line.startswith(b"data:")
            )
            if not data:
                continue
            result = _result(data)
            if not isinstance(result, dict):
                continue
            if "task" in result or "message" in result:
                task = _task_of(result)
            elif isinstance(result.get("statusUpdate"), dict):
                update = result["statusUpdate"]
                task = {**task, "id": update.get("taskId"), "contextId": update.get("contextId"),
                        "status": update.get("status")}
            elif isinstance(result.get("artifactUpdate"), dict):
                artifacts = [
                    *(task.get("artifacts") or []),
                    result["artifactUpdate"].get("artifact"),
                ]
                task = {**task, "artifacts": artifacts}
            if isinstance(task.get("id"), str) and seen.task_id is None:
                seen.task_id = str(task["id"])
                seen.known.set()
            state = (task.get("status") or {}).get("state")
            if state in TERMINAL_STATES or state in (
                "TASK_STATE_INPUT_REQUIRED",
                "TASK_STATE_AUTH_REQUIRED",
            ):
                return task
    if not task:
        raise A2aError("the stream ended without a task", "E_A2A_PROTOCOL")
    return task
