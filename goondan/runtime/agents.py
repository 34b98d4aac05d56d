"""Agent-to-agent calls: ``ctx.agents`` and ``ToolContext.runtime`` (docs/orchestrator.md
"Agent-to-agent calls").

One :class:`AgentCallApi` is made per Turn by an :class:`AgentsFactory` (the ``agents_factory``
hook of ``AgentInstance``). It builds the AgentEvents, enforces the call rules, and hands the
event to an :class:`AgentRouter`, which only moves events:

* ``IpcAgentRouter`` (``goondan/swarm/agent_process.py``) sends them through the orchestrator;
* :class:`~goondan.runtime.local_router.InProcessAgentRouter` runs every instance in this process
  (embedding API, tests).

Rules enforced here, before anything is sent:

* call stack: ``metadata["__goondanAgentCallStack"]`` lists ``"agent@instanceKey"`` of the
  agents *waiting* for an answer, from the first caller to the current one; it is inherited
  from the inbound event and carried by requests only. A request whose target is already on
  the stack (A→B→A, A→B→C→A) or is the caller itself is refused at once with the chain in the
  message (``E_AGENT_CYCLE``); such a request could only deadlock, since an instance runs one
  Turn at a time. A ``send`` waits for nothing, so it does not carry the stack: after A sends to
  B and finishes, B may request A.
* depth: ``metadata["__goondanAgentHops"]`` counts every hop (requests and sends); at
  ``max_depth`` (8) further requests and sends are refused (``E_AGENT_DEPTH``), which also stops
  endless ``send`` ping-pong.
* unknown targets (not an Agent of the running Swarm) → ``E_AGENT_NOT_FOUND``; timeouts (the
  call's ``timeoutMs``, else the caller Agent's ``spec.requestTimeoutMs``, else 15 000 ms) →
  ``E_AGENT_TIMEOUT`` (the callee keeps running, its late answer is dropped).
* ``async`` requests return at once; the answer (or the timeout / failure) reaches the caller
  later as a new inbound ``agent.response`` event, which runs a Turn of its own
  (:meth:`AgentRouter.deliver`; docs/orchestrator.md "Agent-to-agent calls").
* ``traceId`` is the caller's; ``metadata.parentSpanId`` is the calling span; ``auth`` is copied
  unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Protocol

from goondan.errors import AgentError
from goondan.pipeline.context import TurnResult
from goondan.pipeline.tracing import CURRENT_SPAN
from goondan.types import AgentEvent, JsonObject, ReplyChannel, uuid4_hex

__all__ = [
    "CALL_STACK_KEY",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_TIMEOUT_MS",
    "AgentCallApi",
    "AgentRouter",
    "AgentsFactory",
    "SwarmCatalog",
    "TurnHandler",
    "call_stack_of",
    "hops_of",
    "response_event",
    "response_text",
    "turn_error",
]

CALL_STACK_KEY = "__goondanAgentCallStack"
HOPS_KEY = "__goondanAgentHops"
DEFAULT_TIMEOUT_MS = 15_000  # seed 000 §4.4.3; slow workers: spec.requestTimeoutMs or timeoutMs
DEFAULT_MAX_DEPTH = 8
_log = logging.getLogger("goondan.runtime")


@dataclass(frozen=True)
class SwarmCatalog:
    """The running Swarm as agents see it (``agents__catalog``)."""

    swarm_name: str
    entry_agent: str
    agents: tuple[str, ...]

    def to_dict(self, self_agent: str) -> JsonObject:
        available = sorted(self.agents)
        callable_ = [a for a in available if a != self_agent]
        return {
            "swarmName": self.swarm_name,
            "entryAgent": self.entry_agent,
            "selfAgent": self_agent,
            "availableCount": len(available),
            "callableCount": len(callable_),
            "availableAgents": available,
            "callableAgents": callable_,
        }


class AgentRouter(Protocol):
    """Moves agent events; rule checks already happened in :class:`AgentCallApi`."""

    async def request(self, target: str, event: AgentEvent, *, timeout_ms: int) -> AgentEvent:
        """Deliver ``event`` (with ``replyTo``) to ``target`` and return the response event."""
        ...

    async def send(self, target: str, event: AgentEvent) -> None:
        """Deliver ``event`` (no ``replyTo``) to ``target``; do not wait for its Turn."""
        ...

    async def spawn(
        self, owner: tuple[str, str], target: str, *, instance_key: str, cwd: str | None
    ) -> JsonObject:
        """Prepare instance (target, instance_key); ``{target, instanceKey, spawned, cwd}``."""
        ...

    async def list_instances(
        self, owner: tuple[str, str], *, include_all: bool
    ) -> list[JsonObject]:
        """Instances created by ``spawn`` (of ``owner`` unless ``include_all``), oldest first."""
        ...

    async def deliver(self, owner: tuple[str, str], event: AgentEvent) -> None:
        """Queue ``event`` as a new inbound event of instance ``owner`` (async answers)."""
        ...


def hops_of(event: AgentEvent | None) -> int:
    """The ``__goondanAgentHops`` of an inbound event: hops that led to it (0 from a user)."""
    if event is None:
        return 0
    hops = event.metadata.get(HOPS_KEY)
    if isinstance(hops, int) and not isinstance(hops, bool) and hops >= 0:
        return hops
    return len(call_stack_of(event))


def call_stack_of(event: AgentEvent | None) -> list[str]:
    """The ``__goondanAgentCallStack`` of an inbound event (empty when absent or malformed)."""
    if event is None:
        return []
    stack = event.metadata.get(CALL_STACK_KEY)
    if isinstance(stack, list) and all(isinstance(item, str) for item in stack):
        return list(stack)
    return []


def response_text(event: AgentEvent) -> str:
    """The answer carried by a response event; raises the callee's error as :class:`AgentError`."""
    error = event.metadata.get("error")
    if isinstance(error, dict):
        message = str(error.get("message") or "the target agent failed")
        if error.get("turnFailed"):
            message = f"the target agent's turn failed: {message}"
        raise AgentError(
            message,
            code=str(error.get("code") or "E_AGENT_REQUEST_FAILED"),
            suggestion=error.get("suggestion")
            if isinstance(error.get("suggestion"), str)
            else None,
        )
    return event.input or ""


def response_event(
    request: AgentEvent, *, agent_name: str, instance_key: str, text: str | None,
    error: JsonObject | None = None,
) -> AgentEvent:
    """The answer to ``request`` (``metadata.inReplyTo`` = its correlation id)."""
    assert request.reply_to is not None
    metadata: JsonObject = {"inReplyTo": request.reply_to.correlation_id}
    if error is not None:
        metadata["error"] = error
    return AgentEvent(
        type="agent.response",
        input=text if error is None else None,
        instance_key=request.metadata.get("callerInstanceKey") or request.instance_key,
        source={"kind": "agent", "name": agent_name, "instanceKey": instance_key},
        trace_id=request.trace_id,
        metadata=metadata,
        auth=request.auth,
    )


def turn_answer(event: AgentEvent, result: TurnResult, trace_id: str, *, agent_name: str,
                instance_key: str) -> AgentEvent:
    """The answer to ``event`` of the turn that ended with ``result`` (``on_outgoing``): text or
    error, ``finishReason``, and the pending approvals of a parked turn (docs/approvals.md)."""
    assert event.reply_to is not None
    error = turn_error(result)
    answer = response_event(event, agent_name=agent_name, instance_key=instance_key,
                            text=result.text if error is None else None, error=error)
    answer.trace_id = trace_id
    answer.reply_target = event.reply_to.target
    answer.metadata["finishReason"] = result.finish_reason
    if result.finish_reason == "approval_pending":
        answer.metadata["approvals"] = result.metadata.get("approvals") or []
    return answer


def turn_error(result: TurnResult) -> JsonObject | None:
    """The error to send back for a failed Turn, else ``None``.

    The Turn's own code, message and suggestion travel unchanged (the front-end of
    ``goondan run`` shows them as they are); ``turnFailed`` lets a calling agent's
    :func:`response_text` say that it was the target's turn that failed.
    """
    if result.finish_reason != "error":
        return None
    error = dict(result.error or {})
    out: JsonObject = {
        "code": str(error.get("code") or "E_AGENT_TURN_FAILED"),
        "message": str(error.get("message") or "unknown error"),
        "turnFailed": True,
    }
    if error.get("suggestion") is not None:
        out["suggestion"] = error["suggestion"]
    return out


class AgentCallApi:
    """Per-Turn agent-to-agent API: ``ctx.agents`` and ``ToolContext.runtime``."""

    def __init__(
        self,
        router: AgentRouter,
        catalog: SwarmCatalog,
        *,
        agent_name: str,
        instance_key: str,
        input_event: AgentEvent | None = None,
        turn_id: str | None = None,
        trace_id: str | None = None,
        span_id: str | None = None,
        max_depth: int = DEFAULT_MAX_DEPTH,
        request_timeout_ms: int | None = None,
        background: set[asyncio.Task[None]] | None = None,
    ) -> None:
        self.router = router
        self.catalog_info = catalog
        self.request_timeout_ms = request_timeout_ms or DEFAULT_TIMEOUT_MS
        # Async requests outlive the Turn that made them; the factory's set keeps them alive.
        self.background = background if background is not None else set()
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.input_event = input_event
        self.turn_id = turn_id
        self.trace_id = trace_id
        self.span_id = span_id
        self.max_depth = max_depth

    def __repr__(self) -> str:
        return f"<AgentCallApi {self.agent_name}@{self.instance_key} turn={self.turn_id}>"

    @property
    def self_ref(self) -> str:
        return f"{self.agent_name}@{self.instance_key}"

    def _stack(self) -> list[str]:
        stack = call_stack_of(self.input_event)
        if not stack or stack[-1] != self.self_ref:
            stack.append(self.self_ref)
        return stack

    def _hops(self, stack: list[str]) -> int:
        """Agent-to-agent hops up to and including this agent (requests and sends alike)."""
        return max(len(stack), hops_of(self.input_event) + 1)

    def _check_target(self, target: str) -> None:
        if not isinstance(target, str) or not target:
            raise AgentError("'target' must be a non-empty agent name", code="E_AGENT_NOT_FOUND")
        if target not in self.catalog_info.agents:
            raise AgentError(
                f"agent {target!r} is not part of swarm {self.catalog_info.swarm_name!r}",
                code="E_AGENT_NOT_FOUND",
                suggestion="callable agents: " + ", ".join(sorted(self.catalog_info.agents)),
            )

    def _build(
        self, target: str, input: str | None, instance_key: str | None, metadata: JsonObject | None,
        event_type: str, call_source: str, *, is_request: bool,
    ) -> tuple[AgentEvent, str]:
        self._check_target(target)
        key = instance_key or self.instance_key
        stack = self._stack()
        target_ref = f"{target}@{key}"
        if is_request and target_ref == self.self_ref:
            raise AgentError(
                f"agent {self.self_ref} cannot request itself "
                "(the request would wait on its own turn)",
                code="E_AGENT_CYCLE",
                suggestion="use a different instanceKey, or answer directly",
            )
        if is_request and target_ref in stack:
            chain = " → ".join([*stack, target_ref])
            raise AgentError(
                f"agent call cycle refused: {chain}",
                code="E_AGENT_CYCLE",
                suggestion="an agent that is waiting for an answer "
                "cannot be asked again in the same chain",
            )
        hops = self._hops(stack)
        if hops >= self.max_depth:
            raise AgentError(
                f"agent call depth {hops} reached the maximum of {self.max_depth}: "
                + " → ".join([*stack, target_ref]),
                code="E_AGENT_DEPTH",
                suggestion="flatten the delegation chain",
            )
        meta: JsonObject = dict(metadata or {})
        if is_request:
            meta[CALL_STACK_KEY] = stack
        else:
            # A send waits for nothing, so its target starts a chain of its own: carrying the
            # stack would refuse that target's legitimate request back to us (E_AGENT_CYCLE).
            meta.pop(CALL_STACK_KEY, None)
        meta[HOPS_KEY] = hops
        meta.setdefault("callerAgent", self.agent_name)
        meta.setdefault("callerInstanceKey", self.instance_key)
        if self.turn_id is not None:
            meta.setdefault("callerTurnId", self.turn_id)
        meta.setdefault("callSource", call_source)
        current = CURRENT_SPAN.get()
        parent_span = (
            current.span_id
            if current is not None and current.trace_id == self.trace_id
            else self.span_id
        )
        inbound = self.input_event
        event = AgentEvent(
            type=event_type,
            input=input,
            instance_key=key,
            source={"kind": "agent", "name": self.agent_name, "instanceKey": self.instance_key},
            id=f"agent_event_{uuid4_hex()}",
            trace_id=self.trace_id or (inbound.trace_id if inbound else None),
            metadata=meta,
            auth=inbound.auth if inbound is not None else None,
            parent_span_id=parent_span or None,
        )
        return event, key

    async def request(
        self,
        target: str,
        input: str | None = None,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
        metadata: JsonObject | None = None,
        event_type: str = "agent.request",
        call_source: str = "extension-middleware",
        async_mode: bool = False,
    ) -> dict[str, Any]:
        """Ask ``target`` and wait for its answer: ``{target, response, eventId, correlationId}``.

        With ``async_mode`` the call returns at once (``response`` None, ``async`` True) and the
        answer arrives later as an inbound ``agent.response`` event of this instance.
        """
        event, _key = self._build(
            target, input, instance_key, metadata, event_type, call_source, is_request=True
        )
        correlation_id = f"corr_{uuid4_hex()}"
        event.reply_to = ReplyChannel(target=self.agent_name, correlation_id=correlation_id)
        timeout_ms = int(timeout_ms) if timeout_ms and timeout_ms > 0 else self.request_timeout_ms
        if async_mode:
            task = asyncio.ensure_future(
                self._answer_later(target, event, timeout_ms, correlation_id)
            )
            self.background.add(task)
            task.add_done_callback(self.background.discard)
            return {"target": target, "response": None, "eventId": event.id,
                    "correlationId": correlation_id, "accepted": True, "async": True}
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                answer = await self.router.request(target, event, timeout_ms=timeout_ms)
        except TimeoutError:
            raise AgentError(
                f"agent request timeout ({timeout_ms}ms) waiting for {target}@{event.instance_key}",
                code="E_AGENT_TIMEOUT",
                suggestion="raise timeoutMs, or use send for work that does not need an answer",
            ) from None
        return {
            "target": target,
            "response": response_text(answer),
            "eventId": event.id,
            "correlationId": correlation_id,
        }

    async def _answer_later(
        self, target: str, event: AgentEvent, timeout_ms: int, correlation_id: str
    ) -> None:
        """Wait for an async request's answer and deliver it (or its failure) as an inbound
        event."""
        text: str | None = None
        error: JsonObject | None = None
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                answer = await self.router.request(target, event, timeout_ms=timeout_ms)
            text = response_text(answer)
        except TimeoutError:
            error = {
                "code": "E_AGENT_TIMEOUT",
                "message": f"agent request timeout ({timeout_ms}ms) "
                f"waiting for {target}@{event.instance_key}",
            }
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the callee's failure is the answer, not a crash of this one
            error = {
                "code": str(getattr(exc, "code", "E_AGENT_REQUEST_FAILED")),
                "message": str(exc),
            }
        metadata: JsonObject = {
            "asyncResponseTo": correlation_id, "requestEventId": event.id,
            "status": "ok" if error is None else "error",
        }
        if error is not None:
            metadata["error"] = error
        inbound = AgentEvent(
            type="agent.response",
            input=text if error is None else f"[{error['code']}] {error['message']}",
            instance_key=self.instance_key,
            source={"kind": "agent", "name": target, "instanceKey": event.instance_key},
            trace_id=event.trace_id,
            metadata=metadata,
            auth=event.auth,
        )
        try:
            await self.router.deliver((self.agent_name, self.instance_key), inbound)
        except Exception as exc:  # nobody to raise to: the Turn that asked is over
            _log.warning("could not deliver the async answer %s: %s", correlation_id, exc)

    async def send(
        self,
        target: str,
        input: str | None = None,
        *,
        instance_key: str | None = None,
        metadata: JsonObject | None = None,
        event_type: str = "agent.send",
        call_source: str = "extension-middleware",
    ) -> dict[str, Any]:
        """Notify ``target`` without waiting: ``{target, eventId, accepted}``."""
        event, _key = self._build(
            target, input, instance_key, metadata, event_type, call_source, is_request=False
        )
        await self.router.send(target, event)
        return {"target": target, "eventId": event.id, "accepted": True}

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        """Prepare an instance of ``target``: ``{target, instanceKey, spawned, cwd}``."""
        self._check_target(target)
        key = instance_key or f"{target}-instance-{int(time.time() * 1000)}-{os.urandom(3).hex()}"
        return await self.router.spawn(
            (self.agent_name, self.instance_key), target, instance_key=key, cwd=cwd
        )

    async def list(self, *, include_all: bool = False) -> dict[str, Any]:
        """Instances spawned by this agent (every agent's with ``include_all``)."""
        rows = await self.router.list_instances(
            (self.agent_name, self.instance_key), include_all=include_all
        )
        return {"count": len(rows), "agents": rows}

    async def catalog(self) -> dict[str, Any]:
        """``{swarmName, entryAgent, selfAgent, availableAgents, callableAgents, …}``."""
        return self.catalog_info.to_dict(self.agent_name)


class AgentsFactory:
    """The ``agents_factory`` hook: one :class:`AgentCallApi` per Turn of one instance."""

    def __init__(
        self,
        router: AgentRouter,
        catalog: SwarmCatalog,
        *,
        agent_name: str,
        instance_key: str,
        max_depth: int = DEFAULT_MAX_DEPTH,
        request_timeout_ms: int | None = None,
    ) -> None:
        self.router = router
        self.catalog = catalog
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.max_depth = max_depth
        self.request_timeout_ms = request_timeout_ms
        self.background: set[asyncio.Task[None]] = set()

    def __call__(
        self,
        input_event: AgentEvent | None,
        *,
        turn_id: str | None = None,
        trace_id: str | None = None,
        span_id: str | None = None,
        **_: Any,
    ) -> AgentCallApi:
        return AgentCallApi(
            self.router, self.catalog, agent_name=self.agent_name, instance_key=self.instance_key,
            input_event=input_event, turn_id=turn_id, trace_id=trace_id, span_id=span_id,
            max_depth=self.max_depth, request_timeout_ms=self.request_timeout_ms,
            background=self.background,
        )


class TurnHandler(Protocol):
    """What runs an agent instance's turns for a router or an agent process: an
    ``AgentInstance``."""

    async def run(self, event: AgentEvent, *, stream: bool | None = None) -> TurnResult:
        """Run one turn for ``event`` (``stream``: ask the model for deltas; None = default)."""
        ...

    async def close(self) -> None:
        """Finish the running turn and release the instance."""
        ...
