"""Tool ``agents`` of ``@goondan/base``: agent-to-agent calls through ``ctx.runtime``.

Exports (docs/base-package.md): ``request``, ``send``, ``spawn``, ``list``, ``catalog``. Every
handler needs the runtime's agent API (``ToolContext.runtime``); without it, and for every
refused or failed call (unknown target, cycle, depth, timeout, crashed target), the handler
raises a :class:`~goondan.tools.executor.ToolFailure` with the ``E_AGENT_*`` code, which the
executor turns into a structured error ToolResult.
"""

from __future__ import annotations

from typing import Any

from goondan.errors import AgentError
from goondan.tools.executor import ToolFailure


def _runtime(ctx: Any) -> Any:
    runtime = getattr(ctx, "runtime", None)
    if runtime is None:
        raise ToolFailure(
            "agent-to-agent calls are not available here (no runtime attached)",
            code="E_AGENT_UNAVAILABLE",
            suggestion="run the swarm with 'goondan run' or the embedding Runtime",
        )
    return runtime


def _text(value: Any, name: str, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise ToolFailure(f"'{name}' is required", code="E_TOOL_INVALID_ARGS")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise ToolFailure(f"'{name}' must be a non-empty string", code="E_TOOL_INVALID_ARGS")
    return value


def _metadata(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ToolFailure("'metadata' must be an object", code="E_TOOL_INVALID_ARGS")
    return dict(value)


def _failure(err: AgentError) -> ToolFailure:
    return ToolFailure(err.message, code=err.code, suggestion=err.suggestion, help_url=err.help_url)


async def request(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """Ask ``target``: ``{target, eventId, correlationId, response}`` (+ ``accepted``, ``async``).

    ``timeoutMs`` defaults to the calling Agent's ``spec.requestTimeoutMs``, else 15 000.
    With ``async: true`` the call returns at once (``response`` null) and the answer arrives
    later as a new ``agent.response`` event of the calling instance.
    """
    runtime = _runtime(ctx)
    target = _text(input.get("target"), "target", required=True)
    timeout = input.get("timeoutMs")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise ToolFailure("'timeoutMs' must be a positive number", code="E_TOOL_INVALID_ARGS")
    async_mode = input.get("async", False)
    if not isinstance(async_mode, bool):
        raise ToolFailure("'async' must be a boolean", code="E_TOOL_INVALID_ARGS")
    options: dict[str, Any] = {"async_mode": True} if async_mode else {}
    try:
        result = await runtime.request(
            target,
            _text(input.get("input"), "input"),
            instance_key=_text(input.get("instanceKey"), "instanceKey"),
            timeout_ms=int(timeout) if timeout is not None else None,
            metadata=_metadata(input.get("metadata")),
            event_type=_text(input.get("eventType"), "eventType") or "agent.request",
            call_source="tool",
            **options,
        )
    except AgentError as err:
        raise _failure(err) from None
    out: dict[str, Any] = {
        "target": result["target"],
        "eventId": result.get("eventId"),
        "correlationId": result.get("correlationId"),
        "response": result.get("response"),
    }
    if async_mode:
        out.update({"accepted": bool(result.get("accepted", True)), "async": True})
    return out


async def send(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """Notify ``target``: ``{target, eventId, accepted}``."""
    runtime = _runtime(ctx)
    try:
        result = await runtime.send(
            _text(input.get("target"), "target", required=True),
            _text(input.get("input"), "input"),
            instance_key=_text(input.get("instanceKey"), "instanceKey"),
            metadata=_metadata(input.get("metadata")),
            event_type=_text(input.get("eventType"), "eventType") or "agent.send",
            call_source="tool",
        )
    except AgentError as err:
        raise _failure(err) from None
    return {
        "target": result["target"],
        "eventId": result.get("eventId"),
        "accepted": bool(result.get("accepted")),
    }


async def spawn(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """Prepare an instance: ``{target, instanceKey, spawned, cwd}``."""
    runtime = _runtime(ctx)
    try:
        result: dict[str, Any] = await runtime.spawn(
            _text(input.get("target"), "target", required=True),
            instance_key=_text(input.get("instanceKey"), "instanceKey"),
            cwd=_text(input.get("cwd"), "cwd"),
        )
    except AgentError as err:
        raise _failure(err) from None
    return {
        "target": result.get("target"), "instanceKey": result.get("instanceKey"),
        "spawned": bool(result.get("spawned")), "cwd": result.get("cwd"),
    }


async def list_(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """Spawned instances: ``{count, agents}``."""
    runtime = _runtime(ctx)
    include_all = input.get("includeAll", False)
    if not isinstance(include_all, bool):
        raise ToolFailure("'includeAll' must be a boolean", code="E_TOOL_INVALID_ARGS")
    try:
        result: dict[str, Any] = await runtime.list(include_all=include_all)
    except AgentError as err:
        raise _failure(err) from None
    return result


async def catalog(ctx: Any, input: dict[str, Any]) -> dict[str, Any]:
    """The swarm's agents: ``{swarmName, entryAgent, selfAgent, …, callableAgents}``."""
    result: dict[str, Any] = await _runtime(ctx).catalog()
    return result


handlers = {"request": request, "send": send, "spawn": spawn, "list": list_, "catalog": catalog}
