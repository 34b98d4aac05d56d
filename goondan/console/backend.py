"""What the REPL talks to: the :class:`ReplBackend` protocol and its in-process implementation.

``goondan repl`` drives an :class:`~goondan.runtime.AgentInstance` in this process
(:class:`InstanceBackend`); ``goondan run``'s interactive mode can implement the same protocol
on top of the orchestrator's IPC and reuse :class:`~goondan.console.session.ReplSession` and
:class:`~goondan.console.render.TurnRenderer` unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from goondan.conversation.messages import Message, MessageEvent
from goondan.pipeline.context import TurnResult
from goondan.types import AgentEvent, JsonObject, TokenUsage, ToolCatalogItem

if TYPE_CHECKING:
    from goondan.runtime.instance import AgentInstance

__all__ = ["InstanceBackend", "ReplBackend"]


class ReplBackend(Protocol):
    """An agent conversation as the REPL sees it."""

    agent_name: str
    instance_key: str

    async def run_turn(self, text: str) -> TurnResult:
        """Run one turn; cancellation must abort it and leave a consistent conversation."""
        ...

    def subscribe(self, listener: Callable[[JsonObject], Any]) -> Callable[[], None]:
        """Receive runtime event payloads (``llm.delta``, ``tool.called`` ...)."""
        ...

    def messages(self) -> list[Message]:
        """The conversation as it stands."""
        ...

    def tools(self) -> list[ToolCatalogItem]:
        """The tool catalog offered to the model."""
        ...

    def describe(self) -> dict[str, str]:
        """Facts for ``/instance`` (agent, instance key, workspace, paths, model ...)."""
        ...

    def usage(self) -> tuple[int, TokenUsage]:
        """``(turns, token usage)`` of this session."""
        ...

    async def clear(self) -> None:
        """Empty the conversation (a recorded ``truncate`` event)."""
        ...

    async def fold(self) -> int:
        """Fold pending events into the base file; returns the message count."""
        ...


class InstanceBackend:
    """:class:`ReplBackend` over an in-process :class:`AgentInstance`."""

    def __init__(self, instance: AgentInstance, *, source_name: str = "cli") -> None:
        self.instance = instance
        self.agent_name = instance.name
        self.instance_key = instance.instance_key
        self.source_name = source_name

    async def run_turn(self, text: str) -> TurnResult:
        event = AgentEvent(
            type="message",
            input=text,
            instance_key=self.instance_key,
            source={"kind": "connector", "name": self.source_name},
        )
        return await self.instance.run(event)

    def subscribe(self, listener: Callable[[JsonObject], Any]) -> Callable[[], None]:
        return self.instance.subscribe(listener)

    def messages(self) -> list[Message]:
        return self.instance.messages

    def tools(self) -> list[ToolCatalogItem]:
        return self.instance.catalog()

    def mcp_servers(self) -> list[dict[str, Any]]:
        """The state of each MCP server of the instance (``/tools``, docs/mcp.md)."""
        out: list[dict[str, Any]] = []
        for provider in self.instance.tools.providers():
            status = getattr(provider, "status", None)
            if callable(status):
                out.append(status())
        return out

    def describe(self) -> dict[str, str]:
        instance = self.instance
        out = {"agent": instance.name, "instance": instance.instance_key}
        paths = getattr(instance.store, "paths", None)
        directory = getattr(paths, "dir", None)
        if directory is not None:
            out["directory"] = str(directory)
        model = instance.model
        out["model"] = f"{model.provider}/{model.model}"
        out["messages"] = str(len(instance.state))
        out["status"] = instance.status
        return out

    def usage(self) -> tuple[int, TokenUsage]:
        return self.instance.turn_count, self.instance.usage

    def cost(self) -> float | None:
        """US dollars of this session (``None`` without the Model's ``spec.pricing``)."""
        cost: float | None = self.instance.cost
        return cost

    async def decide(
        self, approval_id: str, *, approve: bool, reason: str | None = None
    ) -> TurnResult:
        """Store a decision taken at the prompt (``via: cli``) and resume the parked turn."""
        import getpass

        from goondan.runtime.approvals import APPROVAL_DECIDED_EVENT

        gate = self.instance.env.approvals
        assert gate is not None
        await asyncio.to_thread(
            gate.store.decide,
            approval_id,
            approve=approve,
            by=getpass.getuser(),
            via="cli",
            reason=reason,
        )
        return await self.instance.run(
            AgentEvent(
                type=APPROVAL_DECIDED_EVENT,
                instance_key=self.instance_key,
                metadata={"approvalId": approval_id},
            )
        )

    async def clear(self) -> None:
        await self.instance.apply_message_events([MessageEvent.truncate()])

    async def fold(self) -> int:
        return await self.instance.fold()
