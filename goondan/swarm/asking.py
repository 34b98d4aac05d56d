"""The orchestrator side of an asked event (:mod:`goondan.connectors.asking`): accept it like an
emit, run its Turn as a request, return its :class:`~goondan.connectors.asking.TurnAnswer`.

Shared by connector processes (over IPC: ``runtime.emit {answer: true}``, progress as
``runtime.delta``, a ``runtime.cancel`` from the connector cancels) and by in-process front-ends
(``goondan serve mcp``, :mod:`goondan.swarm.mcp_stdio`).
"""

from __future__ import annotations

from goondan.connectors.asking import PROGRESS_EVENT_TYPES, ProgressFn, TurnAnswer
from goondan.connectors.event import ConnectorEvent
from goondan.errors import GoondanError
from goondan.runtime.agents import response_text
from goondan.swarm.ingress import Ingress
from goondan.types import JsonObject

__all__ = ["ask_ingress"]


async def ask_ingress(
    ingress: Ingress,
    connection: str,
    event: ConnectorEvent,
    *,
    agent: str | None = None,
    on_progress: ProgressFn | None = None,
    wait_for_approval: bool = False,
) -> TurnAnswer:
    """Accept ``event`` on ``connection`` like an emit, run its Turn as a request and return
    its answer (see the module docstring). ``agent`` takes the entry agent's place in the
    routing. Raises :class:`ConnectorEventError` for an invalid event (nothing stored) and what
    the inbox append raises.

    A Turn that parks on an approval answers with ``finish_reason`` ``approval_pending`` and the
    pending approvals; with ``wait_for_approval`` it answers only once the resumed Turn ended
    (as ``goondan send --wait``), the wait showing as an ``approval.requested`` progress event."""
    accepted = await ingress.accept(connection, event, submit=False, default_agent=agent)
    if accepted.agent is None or accepted.event is None:  # a duplicate, or no rule matches
        return TurnAnswer(accepted.receipt)
    agent, agent_event = accepted.agent, accepted.event
    if wait_for_approval:
        agent_event.wait_for_final = True

    def progress(payload: JsonObject) -> None:
        if on_progress is not None and payload.get("type") in PROGRESS_EVENT_TYPES:
            on_progress(payload)

    try:
        reply = await ingress.orchestrator.request(
            agent, agent_event, instance_key=agent_event.instance_key or "default",
            on_event=progress if on_progress is not None else None)
        text = response_text(reply)
    except GoondanError as err:
        return TurnAnswer(accepted.receipt, agent, agent_event.instance_key,
                          error_code=err.code, error_message=err.message)
    finish = reply.metadata.get("finishReason")
    approvals = reply.metadata.get("approvals")
    return TurnAnswer(accepted.receipt, agent, agent_event.instance_key, text=text,
                      finish_reason=finish if isinstance(finish, str) else None,
                      approvals=tuple(a for a in approvals if isinstance(a, dict))
                      if isinstance(approvals, list) else ())
