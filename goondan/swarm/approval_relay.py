"""Approvals through the Connection a conversation came from (docs/approvals.md, "Connectors").

:class:`ApprovalRelay` is an orchestrator event sink. When a turn parks on an approval
(an ``approval.requested`` runtime event) and the turn's input came from a Connection (its
journal's ``turn.started`` input has ``properties.connection_name``), that Connection's
connector process gets ``runtime.approvalRequested {approval, properties}`` and announces it
where the conversation is (Slack buttons in the thread, a Telegram inline keyboard).

A connector's decision comes back as ``runtime.approvalDecided``: :meth:`ApprovalRelay.decide`
stores it in the workspace's :class:`~goondan.workspace.approvals.ApprovalStore` (first
decision wins, so a replayed button press changes nothing) and resumes the parked turn the way
``goondan approvals approve`` does. A Connection may only decide approvals of turns that came
from it: any other pending approval is refused (``E_APPROVAL_FORBIDDEN``). Which people may
press the buttons is the connector's check (config ``APPROVERS``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from goondan.errors import GoondanError
from goondan.ipc.control import ApprovalDecided, ApprovalRequested
from goondan.runtime.events import ApprovalRequested as ApprovalRequestedEvent
from goondan.runtime.observe import EventSink
from goondan.types import JsonObject

__all__ = ["ApprovalRelay", "turn_origin"]

_log = logging.getLogger("goondan.swarm.approvals")

Send = Callable[[str, ApprovalRequested], Awaitable[bool]]  # (connection, message) -> sent
Resume = Callable[[str], Awaitable[Any]]  # approval id -> (the turn resumes)


def turn_origin(state_root: Path, workspace_id: str, agent: str,
                instance_key: str) -> dict[str, Any] | None:
    """The properties of the open turn's input event of an instance (its journal's
    ``turn.started``), or None (blocking: call it in a thread)."""
    from goondan.workspace.catalog import find_instances
    from goondan.workspace.journal import TurnJournal

    for info in find_instances(state_root, instance_key, agent=agent, workspace_id=workspace_id):
        if info.instance_key != instance_key:
            continue
        try:
            opened = TurnJournal.open(info.paths.dir).open_turn()
        except (GoondanError, OSError):
            return None
        if opened is None:
            return None
        metadata = opened.input.get("metadata")
        props = metadata.get("properties") if isinstance(metadata, dict) else None
        return dict(props) if isinstance(props, dict) else {}
    return None


class ApprovalRelay(EventSink):
    """Announces approval requests to the Connection of their turn and stores its decisions."""

    def __init__(self, state_root: Path, workspace_id: str, *, send: Send, resume: Resume,
                 agents: tuple[str, ...], storage: Any = None) -> None:
        self.state_root = Path(state_root)
        self.storage = storage  # the swarm's store; None: the JSONL state root
        self.workspace_id = workspace_id
        self.send = send
        self.resume = resume
        self.agents = agents
        self._tasks: set[asyncio.Future[Any]] = set()

    def __repr__(self) -> str:
        return f"<ApprovalRelay workspace={self.workspace_id!r} announcing={len(self._tasks)}>"

    def _store(self) -> Any:
        from goondan.workspace.approvals import ApprovalStore

        if self.storage is not None:
            return self.storage.approvals(self.workspace_id)
        return ApprovalStore(self.state_root, self.workspace_id)

    def _origin(self, agent: str, instance_key: str) -> dict[str, Any] | None:
        if self.storage is not None:
            from goondan.swarm.stored import turn_origin_in

            return turn_origin_in(self.storage, self.workspace_id, agent, instance_key)
        return turn_origin(self.state_root, self.workspace_id, agent, instance_key)

    def handle(self, event: Any) -> None:  # every event: only approval.requested matters
        """Event sink: an ``approval.requested`` is announced (in a task; never blocks)."""
        if not isinstance(event, ApprovalRequestedEvent):
            return
        task = asyncio.ensure_future(self._announce(event.approval_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _announce(self, approval: str) -> None:
        try:
            found = await asyncio.to_thread(self._store().get, approval)
            if found is None or found.status != "pending":
                return
            agent = str(found.request.get("agent"))
            key = str(found.request.get("instanceKey"))
            props = await asyncio.to_thread(self._origin, agent, key)
            connection = (props or {}).get("connection_name")
            if not isinstance(connection, str) or not connection:
                return  # not a connector's conversation: the CLI, send, an agent
            sent = await self.send(connection, ApprovalRequested(found.to_dict(), props or {}))
            _log.info("approval %s %s Connection %s", approval,
                      "announced on" if sent else "not announced: no process of", connection,
                      extra={"event": "orchestrator.approvalAnnounced", "connection": connection,
                             "approvalId": approval, "sent": sent})
        except Exception:  # an announcement is a courtesy: the approval stays listed
            _log.exception("announcing approval %s failed", approval)

    async def decide(self, connection: str, message: ApprovalDecided) -> JsonObject:
        """Store a connector's decision and resume the turn; the ``runtime.answer`` result.
        Raises :class:`GoondanError` (``E_APPROVAL_NOT_FOUND``, ``E_APPROVAL_FORBIDDEN``)."""
        store = self._store()
        found = await asyncio.to_thread(store.get, message.approval_id)
        if found is None or found.request.get("agent") not in self.agents:
            raise GoondanError(f"no approval {message.approval_id!r} in this swarm",
                               code="E_APPROVAL_NOT_FOUND",
                               suggestion="'goondan approvals list' shows the ids")
        if found.status == "pending":
            props = await asyncio.to_thread(
                self._origin, str(found.request.get("agent")),
                str(found.request.get("instanceKey")))
            if (props or {}).get("connection_name") != connection:
                raise GoondanError(
                    f"approval {found.id} belongs to a conversation of another channel",
                    code="E_APPROVAL_FORBIDDEN",
                    suggestion="decide it where it was announced, or with 'goondan approvals'")
        args = message.args if isinstance(message.args, dict) else None
        decided, mine = await asyncio.to_thread(
            store.decide, found.id, approve=bool(message.approve), by=message.by, via=message.via,
            args=args, note=message.note, reason=message.reason)
        if mine:
            _log.info("approval %s %s by %s (%s)", found.id, decided.status, message.by,
                      message.via, extra={"event": "orchestrator.approvalDecided",
                                          "approvalId": found.id, "connection": connection})
            # the turn resumes in the background: the person's channel gets its answer now
            task = asyncio.ensure_future(self.resume(found.id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        decision = decided.decision or {}
        return {"id": found.id, "status": decided.status, "decided": mine,
                "decidedBy": decision.get("decidedBy"), "via": decision.get("via")}
