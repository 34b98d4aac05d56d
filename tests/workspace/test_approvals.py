"""ApprovalStore: requests written once, the first decision wins, expiry from the stored time.

Run against every storage backend (``store_spec``: jsonl, postgres; tests/support/backends.py);
the checks of the JSONL files themselves run for jsonl only."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from goondan.errors import WorkspaceError
from goondan.storage.contract import ApprovalIndex
from goondan.workspace.approvals import approval_id, parse_time
from tests.support.backends import open_backend

Spec = tuple[str, str]


_opened: list[Any] = []


@pytest.fixture(autouse=True)
def _close_backends() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()


def approvals(spec: Spec) -> ApprovalIndex:
    """The approvals of workspace "ws" in the store ``spec`` (a new handle, as a restarted
    process would open it; closed after the test)."""
    backend = open_backend(spec)
    _opened.append(backend)
    return backend.approvals("ws")  # type: ignore[no-any-return]


def jsonl_dir(spec: Spec) -> Path | None:
    """The JSONL approvals directory, or None for another backend."""
    return Path(spec[1]) / "workspaces" / "ws" / "approvals" if spec[0] == "jsonl" else None


def _request(store: ApprovalIndex, *, call: str = "call_1", timeout_ms: int | None = None,
             at: str | None = None, agent: str = "assistant", key: str = "k1") -> str:
    found = store.request(
        agent=agent,
        instance_key=key,
        turn_id="turn_1",
        tool_call_id=call,
        tool="bash__exec",
        args={"command": "rm -rf build"},
        reason="deletes files",
        timeout_ms=timeout_ms,
        requested_at=at,
    )
    return found.id


def test_request_is_listed_pending_with_the_listing_fields(store_spec: Spec) -> None:
    store = approvals(store_spec)
    ident = _request(store)
    assert ident == approval_id("assistant", "k1", "turn_1", "call_1")
    [row] = [a.to_dict() for a in store.list()]
    assert row["id"] == ident and row["status"] == "pending"
    assert row["tool"] == "bash__exec" and row["args"] == {"command": "rm -rf build"}
    assert row["agent"] == "assistant" and row["instanceKey"] == "k1"
    assert row["turnId"] == "turn_1" and row["toolCallId"] == "call_1"
    assert isinstance(row["requestedAt"], str) and row["reason"] == "deletes files"
    files = jsonl_dir(store_spec)
    assert files is None or (files / f"{ident}.json").is_file()


def test_a_second_request_for_the_same_call_returns_the_first(store_spec: Spec) -> None:
    store = approvals(store_spec)
    first = store.request(agent="a", instance_key="k", turn_id="t", tool_call_id="c", tool="x__y",
                          args={"n": 1}, requested_at="2026-01-01T00:00:00.000Z")
    again = store.request(agent="a", instance_key="k", turn_id="t", tool_call_id="c", tool="x__y",
                          args={"n": 2})
    assert again.request == first.request
    assert len(store.list()) == 1


def test_decide_is_idempotent_first_decision_wins(store_spec: Spec) -> None:
    store = approvals(store_spec)
    ident = _request(store)
    approved, mine = store.decide(ident, approve=True, by="alice", via="cli", note="ok",
                                  args={"command": "rm -rf build/tmp"})
    assert mine and approved.status == "approved"
    assert approved.args == {"command": "rm -rf build/tmp"}
    again, mine_again = store.decide(ident, approve=False, by="bob", via="cli", reason="no")
    assert not mine_again
    assert again.status == "approved" and again.decision == approved.decision
    row = again.to_dict()
    assert row["decidedBy"] == "alice" and row["via"] == "cli" and row["note"] == "ok"


def test_deny_keeps_the_reason(store_spec: Spec) -> None:
    store = approvals(store_spec)
    ident = _request(store)
    denied, mine = store.decide(ident, approve=False, by="alice", via="cli", reason="not today")
    assert mine and denied.status == "denied"
    assert denied.decision is not None and denied.decision["reason"] == "not today"
    assert denied.args == {"command": "rm -rf build"}  # a denial never edits arguments


def test_expiry_is_computed_from_the_stored_request_time(store_spec: Spec) -> None:
    at = "2026-01-01T00:00:00.000Z"
    ident = _request(approvals(store_spec), timeout_ms=60_000, at=at)
    # A new store object (a restarted process) reads the same expiry from disk.
    store = approvals(store_spec)
    before = parse_time(at) + timedelta(seconds=59)
    after = parse_time(at) + timedelta(seconds=61)
    found = store.get(ident, now=before)
    assert found is not None and found.status == "pending"
    assert found.request["expiresAt"] == "2026-01-01T00:01:00.000Z"
    late = store.get(ident, now=after)
    assert late is not None and late.status == "expired"
    decided, mine = store.decide(ident, approve=True, by="alice", via="cli", now=after)
    assert not mine and decided.status == "expired"
    # recorded: later reads agree even at an earlier clock
    assert store.get(ident, now=before).status == "expired"  # type: ignore[union-attr]


def test_without_timeout_a_request_never_expires(store_spec: Spec) -> None:
    store = approvals(store_spec)
    ident = _request(store)
    far = datetime.now(UTC) + timedelta(days=3650)
    assert store.get(ident, now=far).status == "pending"  # type: ignore[union-attr]


def test_unknown_or_malformed_id_is_e_approval_not_found(store_spec: Spec) -> None:
    store = approvals(store_spec)
    with pytest.raises(WorkspaceError) as info:
        store.decide("apr_0000", approve=True, by="a", via="cli")
    assert info.value.code == "E_APPROVAL_NOT_FOUND"
    with pytest.raises(WorkspaceError) as bad:
        store.get("../../etc/passwd")
    assert bad.value.code == "E_APPROVAL_NOT_FOUND"


def test_list_filters_and_remove_instance(store_spec: Spec) -> None:
    store = approvals(store_spec)
    a = _request(store, call="c1", key="k1")
    _request(store, call="c2", key="k2")
    store.decide(a, approve=False, by="x", via="cli")
    assert [x.id for x in store.list(status="denied")] == [a]
    assert len(store.list(status="pending")) == 1
    assert [x.request["instanceKey"] for x in store.list(instance_key="k2")] == ["k2"]
    assert store.remove_instance("assistant", "k1") == 1
    assert [x.request["instanceKey"] for x in store.list()] == ["k2"]
    assert store.get(a) is None


def _decide_in_child(spec: Spec, ident: str, who: str, start: multiprocessing.synchronize.Event,
                     out: multiprocessing.queues.Queue[tuple[str, bool, str]]) -> None:
    start.wait()
    found, mine = approvals(spec).decide(
        ident, approve=who == "approver", by=who, via="cli"
    )
    out.put((who, mine, found.status))


@pytest.mark.parametrize("trial", range(3))
def test_two_processes_racing_to_decide_first_wins(store_spec: Spec, trial: int) -> None:
    store = approvals(store_spec)
    ident = _request(store, call=f"c{trial}")
    context = multiprocessing.get_context("fork")
    start = context.Event()
    out: multiprocessing.queues.Queue[tuple[str, bool, str]] = context.Queue()
    children = [
        context.Process(target=_decide_in_child, args=(store_spec, ident, who, start, out))
        for who in ("approver", "denier")
    ]
    for child in children:
        child.start()
    start.set()
    for child in children:
        child.join(timeout=30)
        assert child.exitcode == 0
    results = [out.get(timeout=5) for _ in children]
    winners = [r for r in results if r[1]]
    assert len(winners) == 1
    final = store.get(ident)
    assert final is not None and final.decision is not None
    assert final.decision["decidedBy"] == winners[0][0]
    # both deciders were told the same (first) decision
    assert {r[2] for r in results} == {final.status}
    files = jsonl_dir(store_spec)
    if files is not None:
        leftovers = [n for n in os.listdir(files) if n.endswith(".tmp")]
        assert not leftovers
        assert (
            json.loads((files / f"{ident}.decision.json").read_text())["decidedBy"]
            == winners[0][0]
        )
