"""Ingress: durable accept, dedupe, routing into the orchestrator, replay after a restart."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from goondan.connectors.event import ConnectorEvent
from goondan.connectors.inbox import ConnectionInbox
from goondan.connectors.routing import IngressRule
from goondan.connectors.spec import ConnectionSpec
from goondan.errors import ConnectorEventError
from goondan.runtime.inputs import input_text
from goondan.swarm.durable_inputs import claim_in_queue
from goondan.swarm.ingress import Ingress
from goondan.swarm.orchestrator import Orchestrator
from goondan.swarm.spawner import InProcessSpawner
from goondan.workspace.claims import started_ids
from tests.support.ipc_agents import in_process_worker

AGENTS = ["a", "b"]


def spec(name: str = "conn", rules: tuple[IngressRule, ...] = ()) -> ConnectionSpec:
    return ConnectionSpec(
        name=name,
        connector="trigger",
        connector_package=None,
        entry=Path("x.py"),
        swarm="s",
        events=("msg",),
        rules=rules,
    )


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with asyncio.timeout(60):
            return await fn()

    return asyncio.run(main())


def make(
    tmp_path: Path, record: list[str], rules: tuple[IngressRule, ...] = ()
) -> tuple[Orchestrator, Ingress]:
    orch = Orchestrator(
        InProcessSpawner(in_process_worker(AGENTS, record)),
        swarm_name="s",
        entry_agent="a",
        agents=AGENTS,
        reconcile_interval_s=0,
    )
    return orch, Ingress(orch, [spec(rules=rules)], {"conn": tmp_path / "conn"}, entry_agent="a")


def event(text: str, *, id: str, key: str = "k", **props: Any) -> ConnectorEvent:
    return ConnectorEvent.text("msg", text, instance_key=key, properties=props, id=id)


def test_accept_appends_routes_and_runs_each_event_as_its_own_turn(tmp_path: Path) -> None:
    record: list[str] = []

    async def main() -> None:
        orch, ingress = make(
            tmp_path,
            record,
            (IngressRule(properties={"to": "b"}, agent="b", instance_key="fixed"), IngressRule()),
        )
        async with orch:
            await ingress.open()
            first = await ingress.accept("conn", event("echo:1", id="e1"))
            second = await ingress.accept("conn", event("echo:2", id="e2", to="b"))
            assert not first.receipt.duplicate and first.agent == "a" and second.agent == "b"
            assert first.event is not None and second.event is not None
            assert first.event.trace_id and first.event.trace_id != second.event.trace_id
            assert first.event.source == {"kind": "connector", "name": "trigger"}
            assert first.event.type == "msg" and first.event.instance_key == "k"
            await orch.wait_until(lambda: len(record) == 2, 30)
        ingress.close()
        header = input_text(second.event)
        assert header.startswith("[goondan_context]")
        context = json.loads(header.splitlines()[1])
        assert context["properties"] == {
            "to": "b",
            "connection_name": "conn",
            "connector_name": "trigger",
        }
        assert context["instanceKey"] == "fixed" and "__goondanStartMarker" not in json.dumps(
            context
        )

    run(main)
    assert sorted(record) == ["a@k echo:1", "b@fixed echo:2"]
    lines = (tmp_path / "conn" / "inbox.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"]["id"] for line in lines] == ["e1", "e2"]
    started = {p.name: started_ids(p) for p in (tmp_path / "conn" / "started").iterdir()}
    assert started == {"a.k.jsonl": {"e1"}, "b.fixed.jsonl": {"e2"}}  # reserved, then made final


def test_duplicate_id_is_not_stored_or_delivered_again(tmp_path: Path) -> None:
    record: list[str] = []

    async def main() -> None:
        orch, ingress = make(tmp_path, record)
        async with orch:
            await ingress.open()
            assert not (await ingress.accept("conn", event("echo:1", id="same"))).receipt.duplicate
            again = await ingress.accept("conn", event("echo:other", id="same"))
            assert again.receipt.duplicate and again.event is None
            await orch.wait_until(lambda: len(record) == 1, 30)
        ingress.close()
        # a restarted orchestrator still knows the id
        orch2, ingress2 = make(tmp_path, record)
        async with orch2:
            assert await ingress2.open() == 0
            repeated = await ingress2.accept(
                "conn",
                {
                    "id": "same",
                    "name": "msg",
                    "instanceKey": "k",
                    "message": {"type": "text", "text": "x"},
                },
            )
            assert repeated.receipt.duplicate
        ingress2.close()

    run(main)
    assert record == ["a@k echo:1"]
    assert len((tmp_path / "conn" / "inbox.jsonl").read_text().splitlines()) == 1


def test_event_matching_no_rule_is_dropped_with_a_warning(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """Decision 15: a Connection with rules, none matching → no Turn, nothing stored, a warning."""
    record: list[str] = []

    async def main() -> None:
        orch, ingress = make(tmp_path, record, (IngressRule(event="other", agent="b"),))
        async with orch:
            await ingress.open()
            dropped = await ingress.accept("conn", event("echo:lost", id="e1"))
            assert dropped.receipt.dropped and not dropped.receipt.duplicate
            assert dropped.agent is None and dropped.event is None
            routed = await ingress.accept(
                "conn", ConnectorEvent.text("other", "echo:kept", instance_key="k", id="e2")
            )
            assert routed.agent == "b" and not routed.receipt.dropped
            await orch.wait_until(lambda: len(record) == 1, 30)
        ingress.close()

    with caplog.at_level("WARNING", logger="goondan.swarm.ingress"):
        run(main)
    assert record == ["b@k echo:kept"]
    lines = (tmp_path / "conn" / "inbox.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"]["id"] for line in lines] == ["e2"]
    [warning] = [r for r in caplog.records if getattr(r, "event", None) == "ingress.unrouted"]
    assert (
        warning.levelname == "WARNING"
        and "e1" in warning.getMessage()
        and "conn" in warning.getMessage()
    )


def test_non_string_properties_of_an_event_dict_are_dropped_with_a_debug_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """connectors.md §3: the orchestrator keeps string properties only (reference parsing);
    a connector's own normaliser (``ConnectorEvent.text``) still stringifies primitives."""
    raw = {
        "id": "e1",
        "name": "msg",
        "instanceKey": "k",
        "message": {"type": "text", "text": "echo:x"},
        "properties": {"s": "x", "n": 42, "b": True, "z": None, "o": {"deep": "1"}},
    }
    record: list[str] = []

    async def main() -> Any:
        orch, ingress = make(tmp_path, record)
        async with orch:
            await ingress.open()
            accepted = await ingress.accept("conn", raw)
            await orch.wait_until(lambda: len(record) == 1, 30)
        ingress.close()
        return accepted

    with caplog.at_level("DEBUG", logger="goondan.connectors.event"):
        accepted = run(main)
    assert accepted.event is not None
    assert accepted.event.metadata["properties"] == {
        "s": "x",
        "connection_name": "conn",
        "connector_name": "trigger",
    }
    stored = json.loads((tmp_path / "conn" / "inbox.jsonl").read_text())
    assert stored["event"]["properties"] == {"s": "x"}
    dropped = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "DEBUG" and "dropped" in r.getMessage()
    ]
    assert len(dropped) == 4 and all("'msg'" in line for line in dropped)
    assert ConnectorEvent.text(
        "msg", "x", instance_key="k", properties={"n": 42, "b": True}
    ).properties == {"n": "42", "b": "true"}


@pytest.mark.parametrize("bad", [
    {"name": "", "instanceKey": "k", "message": {"type": "text", "text": "x"}},
    {"name": "msg", "message": {"type": "text", "text": "x"}},
    {"name": "msg", "instanceKey": "k", "message": {"type": "video"}},
    "not an object",
])
def test_invalid_events_are_refused_and_nothing_is_stored(tmp_path: Path, bad: Any) -> None:
    async def main() -> None:
        orch, ingress = make(tmp_path, [])
        async with orch:
            await ingress.open()
            with pytest.raises(ConnectorEventError):
                await ingress.accept("conn", bad)
        ingress.close()

    run(main)
    assert (tmp_path / "conn" / "inbox.jsonl").read_text() == ""


def test_open_replays_unstarted_events_in_order_and_skips_started_ones(tmp_path: Path) -> None:
    directory = tmp_path / "conn"
    inbox = ConnectionInbox(directory)
    assert inbox.open() == []
    for i in range(5):
        inbox.append(event(f"echo:{i}", id=f"e{i}"), "a", "k")
    inbox.close()
    claim_in_queue(inbox.queue, "a", "k", "e0", False)  # as an agent process that runs them
    claim_in_queue(inbox.queue, "a", "k", "e2", False)
    with (directory / "inbox.jsonl").open("ab") as handle:
        handle.write(b'{"event": {"id": "torn"')  # a crash in the middle of an append
    record: list[str] = []

    async def main() -> None:
        orch, ingress = make(tmp_path, record)
        async with orch:
            assert await ingress.open() == 3
            await orch.wait_until(lambda: len(record) == 3, 30)
            await ingress.accept("conn", event("echo:5", id="e5"))
            await orch.wait_until(lambda: len(record) == 4, 30)
        ingress.close()

    run(main)
    assert record == ["a@k echo:1", "a@k echo:3", "a@k echo:4", "a@k echo:5"]
    lines = (directory / "inbox.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"]["id"] for line in lines] == [
        "e0",
        "e1",
        "e2",
        "e3",
        "e4",
        "e5",
    ]


def test_event_routed_to_an_agent_outside_the_swarm_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        orch, ingress = make(tmp_path, [], (IngressRule(agent="gone"),))
        async with orch:
            await ingress.open()
            with pytest.raises(ConnectorEventError, match="not part of the running Swarm"):
                await ingress.accept("conn", event("echo:1", id="e1"))
        ingress.close()

    run(main)


def test_an_accepted_event_is_an_ingress_span_parent_of_its_turn(tmp_path: Path) -> None:
    from goondan.runtime.events import IngressReceived, RuntimeEvent
    from goondan.runtime.observe import EventSink

    class Recorder(EventSink):
        def __init__(self) -> None:
            self.events: list[RuntimeEvent] = []

        def handle(self, event: RuntimeEvent) -> None:
            self.events.append(event)

    async def main() -> None:
        orch, ingress = make(tmp_path, [])
        recorder = Recorder()
        orch.add_event_sink(recorder)
        async with orch:
            await ingress.open()
            accepted = await ingress.accept("conn", event("echo:1", id="e1"))
            duplicate = await ingress.accept("conn", event("echo:1", id="e1"))
        ingress.close()
        assert accepted.event is not None and duplicate.receipt.duplicate
        # not the duplicate
        [received] = [e for e in recorder.events if isinstance(e, IngressReceived)]
        assert received.trace_id == accepted.event.trace_id
        assert received.span_id == accepted.event.parent_span_id  # the turn's parent
        assert (received.source, received.event_id, received.event_type, received.target) == (
            "conn",
            "e1",
            "msg",
            "a",
        )

    run(main)


def test_image_and_file_messages_become_the_reference_input_and_no_reply_is_expected(
    tmp_path: Path,
) -> None:
    """connectors.md §3 and §4 step 5: an image message's Turn input is ``[image] <url>``, a
    file's ``[file:<name>] <url>``; the AgentEvent built from a connector event carries no
    ``replyTo`` (replies go out through tools)."""
    record: list[str] = []
    raws = [
        {"id": "i1", "name": "msg", "instanceKey": "k",
         "message": {"type": "image", "url": "https://example.test/cat.png"}},
        {"id": "f1", "name": "msg", "instanceKey": "k",
         "message": {"type": "file", "url": "https://example.test/r.pdf", "name": "r.pdf"}},
    ]

    async def main() -> list[Any]:
        orch, ingress = make(tmp_path, record)
        async with orch:
            await ingress.open()
            accepted = [await ingress.accept("conn", raw) for raw in raws]
            await orch.wait_until(lambda: len(record) == 2, 30)
        ingress.close()
        return accepted

    image, file = run(main)
    assert image.event.input == "[image] https://example.test/cat.png"
    assert file.event.input == "[file:r.pdf] https://example.test/r.pdf"
    assert image.event.reply_to is None and file.event.reply_to is None
    assert record == ["a@k [image] https://example.test/cat.png", "a@k [file:r.pdf] https://example.test/r.pdf"]
