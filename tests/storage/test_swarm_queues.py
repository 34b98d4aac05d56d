"""The durable inputs of ``goondan run`` (goondan/swarm/durable_inputs.py), one implementation on
both backends: what the orchestrator records is delivered again by the next orchestrator until an
agent process claims its start through the input's start marker, and a start is claimed once;
and the store check of ``send``, ``run`` (attaching) and ``restart --full``
(goondan/swarm/stored.py)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from goondan.errors import ConfigError
from goondan.storage.contract import StorageBackend
from goondan.storage.jsonl import JsonlBackend
from goondan.storage.url import ENV_STORE, parse_store
from goondan.swarm.durable_inputs import (
    SwarmInbox,
    claim_in_queue,
    confirm_in_queue,
    marker_queue,
)
from goondan.swarm.state import ActiveRuntime
from goondan.swarm.stored import check_same_store
from goondan.types import AgentEvent


class _Orchestrator:
    def __init__(self) -> None:
        self.submitted: list[tuple[str, AgentEvent]] = []

    async def submit(self, agent: str, event: AgentEvent) -> None:
        self.submitted.append((agent, event))


def _restart(backend: StorageBackend) -> list[tuple[str, AgentEvent]]:
    """A new orchestrator opening the Swarm's inbox: what it delivers again."""
    orchestrator = _Orchestrator()
    inbox = SwarmInbox.of(backend, "ws", "default")
    asyncio.run(inbox.open(orchestrator))  # type: ignore[arg-type]
    inbox.close()
    return orchestrator.submitted


def test_a_recorded_input_is_delivered_again_until_its_start_is_claimed_once(
    backend: StorageBackend,
) -> None:
    inbox = SwarmInbox.of(backend, "ws", "default")
    assert asyncio.run(inbox.open(_Orchestrator())) == 0  # type: ignore[arg-type]
    event = AgentEvent(type="input", input="<<hi>>", instance_key="k")
    inbox.record("assistant", event)
    marker = event.start_marker
    if isinstance(backend, JsonlBackend):  # the claim file itself: any worker can claim there
        assert marker == {"id": event.id, "path": str(
            backend.state_root / "workspaces/ws/inputs/default/started/assistant.k.jsonl")}
    else:  # the store's queue: the agent process claims it in the store it opened
        assert marker == {"queue": "inputs/default", "id": event.id}
    inbox.record("assistant", event)  # already stored (it has a marker): not twice
    inbox.close()
    [(agent, again)] = _restart(backend)
    assert (agent, again.id, again.input, again.start_marker) == (
        "assistant", event.id, "<<hi>>", marker)
    found = marker_queue(marker, functools.partial(backend.queue, "ws"))
    assert found is not None and found[1] == event.id
    queue = found[0]  # what the agent process running the input claims it in
    assert claim_in_queue(queue, "assistant", "k", event.id, False) is True
    # reserved by a live process (this one): nobody else starts it, no orchestrator replays it
    assert claim_in_queue(queue, "assistant", "k", event.id, False) is False
    assert _restart(backend) == []
    confirm_in_queue(queue, "assistant", "k", event.id)
    assert claim_in_queue(queue, "assistant", "k", event.id, False) is False
    assert _restart(backend) == []
    queue.close()


def _active(store: str | None) -> Any:
    return ActiveRuntime(instance_key="k", bundle_path="/b/goondan.yaml", swarm="default",
                         pid=1, started_at="", store=store)


def test_a_postgres_store_must_be_the_running_swarms_database() -> None:
    swarm_store = "postgresql://goondan:***@db.internal:5432/goondan"
    on_pg, on_jsonl = _active(swarm_store), _active(None)
    same = parse_store("postgresql://other:pw@db.internal/goondan?sslmode=require")
    check_same_store(on_pg, same, where="--store")  # one database, another user and options
    check_same_store(on_pg, parse_store(None, env={}), where="--store")  # no --store: any
    check_same_store(on_jsonl, parse_store(None, env={}), where=ENV_STORE)
    for active, location, where in [
        (on_pg, parse_store("postgresql://goondan:pw@db.internal:5432/other"), "--store"),
        (on_jsonl, same, "--store"),
        (on_pg, parse_store(None, env={}), ENV_STORE),  # restart --full needs the URL
    ]:
        with pytest.raises(ConfigError) as caught:
            check_same_store(active, location, where=where)
        assert caught.value.code == "E_STORE_MISMATCH"
        assert "pw" not in caught.value.message
