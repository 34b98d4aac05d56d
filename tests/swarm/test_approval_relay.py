"""The orchestrator side of approvals through a Connection (goondan/swarm/approval_relay.py,
docs/approvals.md "Connectors"): a Connection decides only approvals of turns that came from
it, the first decision stands, and a request is announced to the Connection of its turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import GoondanError
from goondan.ipc.control import ApprovalDecided, ApprovalRequested
from goondan.runtime.events import ApprovalRequested as ApprovalRequestedEvent
from goondan.swarm.approval_relay import ApprovalRelay
from goondan.workspace.approvals import ApprovalStore
from goondan.workspace.store import InstanceStore

WS, AGENT = "ws-relay", "bot"


def _parked(root: Path, key: str, connection: str | None) -> str:
    """A turn of (bot, key) whose input came from ``connection`` (None: not a connector)
    that waits for an approval; its id."""
    props: dict[str, Any] = {"channel_id": "C1", "thread_ts": "1.2"}
    if connection is not None:
        props["connection_name"] = connection
    with InstanceStore.open(root, WS, AGENT, key, fsync=False) as store:
        store.journal.append({"type": "turn.started", "turnId": "turn-1", "at": "x",
                              "input": {"type": "message", "metadata": {"properties": props}}})
    found = ApprovalStore(root, WS).request(
        agent=AGENT, instance_key=key, turn_id="turn-1", tool_call_id="call-1",
        tool="bash__exec", args={"command": "ls"}, reason=None, timeout_ms=None)
    return found.id


def _relay(root: Path, sent: list[tuple[str, ApprovalRequested]],
           resumed: list[str]) -> ApprovalRelay:
    async def send(connection: str, message: ApprovalRequested) -> bool:
        sent.append((connection, message))
        return True

    async def resume(approval: str) -> None:
        resumed.append(approval)

    return ApprovalRelay(root, WS, send=send, resume=resume, agents=(AGENT,))


def _decision(approval: str, approve: bool, by: str) -> ApprovalDecided:
    return ApprovalDecided(approval_id=approval, approve=approve, by=by, via=f"slack:{by}")


def test_a_connection_decides_its_own_approvals_once(tmp_path: Path) -> None:
    ident = _parked(tmp_path, "slack:C1:1.2", "slack-in")
    resumed: list[str] = []
    relay = _relay(tmp_path, [], resumed)

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        first = await relay.decide("slack-in", _decision(ident, True, "U2"))
        second = await relay.decide("slack-in", _decision(ident, False, "U3"))
        await asyncio.sleep(0)  # the resume task runs
        return first, second

    first, second = asyncio.run(main())
    assert (first["status"], first["decided"], first["decidedBy"]) == ("approved", True, "U2")
    assert (second["status"], second["decided"], second["decidedBy"]) == ("approved", False, "U2")
    assert resumed == [ident]  # the replay resumes nothing
    stored = ApprovalStore(tmp_path, WS).get(ident)
    assert stored is not None and stored.to_dict()["via"] == "slack:U2"


@pytest.mark.parametrize("origin", ["telegram-in", None])
def test_an_approval_of_another_conversation_is_refused(tmp_path: Path,
                                                        origin: str | None) -> None:
    ident = _parked(tmp_path, "k1", origin)
    relay = _relay(tmp_path, [], [])
    with pytest.raises(GoondanError) as caught:
        asyncio.run(relay.decide("slack-in", _decision(ident, True, "U2")))
    assert caught.value.code == "E_APPROVAL_FORBIDDEN"
    stored = ApprovalStore(tmp_path, WS).get(ident)
    assert stored is not None and stored.status == "pending"
    with pytest.raises(GoondanError) as unknown:
        asyncio.run(relay.decide("slack-in", _decision("apr_" + "0" * 24, True, "U2")))
    assert unknown.value.code == "E_APPROVAL_NOT_FOUND"


def test_a_request_is_announced_to_the_connection_of_its_turn_only(tmp_path: Path) -> None:
    mine = _parked(tmp_path, "slack:C1:1.2", "slack-in")
    cli = _parked(tmp_path, "cli-key", None)
    sent: list[tuple[str, ApprovalRequested]] = []
    relay = _relay(tmp_path, sent, [])

    async def main() -> None:
        for ident in (mine, cli):
            relay.handle(ApprovalRequestedEvent(
                turn_id="turn-1", approval_id=ident, tool_call_id="call-1",
                tool_name="bash__exec"))
        while relay._tasks:
            await asyncio.wait(set(relay._tasks))

    asyncio.run(main())
    [(connection, message)] = sent
    assert connection == "slack-in" and message.approval["id"] == mine
    assert (message.properties["channel_id"], message.properties["thread_ts"]) == ("C1", "1.2")
