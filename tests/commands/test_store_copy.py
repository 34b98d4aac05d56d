"""``goondan store copy --from STORE --to STORE`` (docs/storage.md "Moving state"): a JSONL state
root filled by real turns is copied into PostgreSQL and back, verified by reading both through
the storage contract; a target that differs is detected, refused without --replace, and a dry
run writes nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import psycopg
import pytest

from goondan.conversation import Message, MessageEvent
from goondan.storage.contract import InstanceSnapshot
from goondan.storage.jsonl import JsonlBackend
from goondan.storage.postgres.backend import PostgresBackend
from goondan.workspace.catalog import iter_instances
from tests.commands.test_store_commands import bundle, here, opened, park_a_turn, run
from tests.support.postgres import password_of

__all__ = ["bundle", "here"]


def fill_state_root(bundle: Path, state: Path) -> str:
    """A parked real turn (messages, journal, approval) and an instance cut short mid-turn
    with extension state; the parked turn's workspace id."""
    park_a_turn(bundle, None, state)
    backend = JsonlBackend(state)
    [workspace] = backend.workspaces()
    store = backend.open_instance(workspace, "assistant", "cut")
    state_now = store.load()
    event = MessageEvent.append(Message.user("committed"))
    state_now.emit(event)
    store.append_event(event, "t1")
    store.commit(state_now)
    store.journal.append({"type": "turn.started", "turnId": "t2"})
    store.append_event(MessageEvent.append(Message.user("cut short")), "t2")
    store.save_extension_state("memory", {"facts": ["tea"]})
    store.close()
    queue = backend.queue(workspace, "inputs/main")  # as the orchestrator's durable inbox
    queue.open_entries()
    queue.append_entry({"id": "in-1", "text": "started"}, "assistant", "k")
    queue.append_entry({"id": "in-2", "text": "still queued"}, "assistant", "k")
    queue.claim("assistant", "k", "in-1")
    queue.close()
    return workspace


def test_copy_into_postgresql_is_verified_idempotent_and_detects_a_corrupted_target(
    here: Path, bundle: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = here / "state"
    workspace = fill_state_root(bundle, state)
    password = password_of(postgres_url)

    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url,
                         "--dry-run")
    assert code == 0, out + err
    assert "dry run: nothing was written" in out and "would copy" in out
    with opened(postgres_url) as backend:
        assert backend.workspaces() == [] and backend.spans().trace_ids(None) == []

    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url,
                         "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] is True and report["to"] == postgres_url.replace(password, "***")
    assert report["totals"] == {"instances": 2, "messages": 3, "events": 1,
                                "journalRecords": report["totals"]["journalRecords"],
                                "extensionStates": 1}
    assert report["totals"]["journalRecords"] >= 3  # the parked turn's and the cut one's
    assert report["approvals"] == {"copied": 1, "unchanged": 0, "refused": 0}
    assert report["inputs"] == {"copied": 2, "unchanged": 0, "refused": 0}
    assert password not in out + err
    # the event logs' spans are rows of the store's span table: the same tree
    code, logged, err = run(capsys, "inspect", "trace", "--last", "--json", "--flat",
                            "--state-root", str(state))
    assert code == 0, err
    expected = json.loads(logged)
    for span in expected["spans"]:  # no message text is stored with a span
        if span["kind"] in ("toolCall", "agentCall") and "error" in span:
            span["error"]["message"] = None
        if span["kind"] == "approval":
            span["attributes"].pop("reason", None)
    assert report["spans"] == {"copied": len(expected["spans"]), "unchanged": 0, "updated": 0}
    code, out, err = run(capsys, "inspect", "trace", "--last", "--json", "--flat", "--store",
                         postgres_url, "--state-root", str(here / "elsewhere"))
    assert code == 0 and json.loads(out) == expected, err
    assert {s["kind"] for s in expected["spans"]} >= {"turn", "toolCall", "approval"}
    source = JsonlBackend(state)
    with opened(postgres_url) as target:
        for key in ("k", "cut"):
            assert target.snapshot(workspace, "assistant", key) == source.snapshot(
                workspace, "assistant", key)
        assert [a.to_dict() for a in target.approvals(workspace).list()] == [
            a.to_dict() for a in source.approvals(workspace).list()]
        queued = target.queue(workspace, "inputs/main")
        assert queued.records() == source.queue(workspace, "inputs/main").records()
        assert [e.id for e in queued.open_entries()] == ["in-2"]
        with target.open_instance(workspace, "assistant", "cut", create=False) as store:
            assert [m.text for m in store.load().next_messages] == ["committed", "cut short"]
    # the folded instance now differs from the source (the target is the newer one)
    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url)
    assert code == 1 and "exists in the target and differs" in err

    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url,
                         "--replace")
    assert code == 0 and "verified: the target holds exactly what the source holds" in out
    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url)
    assert code == 0 and out.count(": unchanged (") == 2, out + err  # a re-run changes nothing
    assert f"spans 0 copied, {len(expected['spans'])} already there, 0 updated" in out

    with psycopg.connect(postgres_url, autocommit=True) as conn:  # corrupt one stored message
        conn.execute(
            "UPDATE goondan_messages SET message = replace(message, 'delete old.txt', 'rm -rf') "
            "WHERE position = 0")
    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url)
    assert code == 1
    assert "assistant:k: exists in the target and differs (message #1 differs)" in err
    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url,
                         "--replace", "--dry-run")
    assert code == 0 and ": would replace (" in out
    code, out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url,
                         "--replace")
    assert code == 0 and "assistant:k: replaced (" in out, out + err


def test_a_copy_that_does_not_read_back_equal_fails(
    here: Path, bundle: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    state = here / "state"
    fill_state_root(bundle, state)
    restore = PostgresBackend.restore

    def lossy(self: PostgresBackend, workspace_id: str, snapshot: InstanceSnapshot,
              replace: bool = False) -> None:
        restore(self, workspace_id, dataclasses.replace(snapshot, messages=snapshot.messages[:-1]),
                replace=replace)

    monkeypatch.setattr(PostgresBackend, "restore", lossy)  # a store that loses a message
    code, _out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url)
    assert code == 1
    assert "the copy differs: 2 messages in the source, 1 in the target" in err
    assert "NOT verified" in err


def test_copy_back_from_postgresql_into_a_state_root(
    here: Path, bundle: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state, back = here / "state", here / "back"
    workspace = fill_state_root(bundle, state)
    assert run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url)[0] == 0
    code, out, err = run(capsys, "store", "copy", "--from", postgres_url, "--to", str(back))
    assert code == 0 and "verified" in out, out + err
    for key in ("k", "cut"):
        assert JsonlBackend(back).snapshot(workspace, "assistant", key) == JsonlBackend(
            state).snapshot(workspace, "assistant", key)
    assert JsonlBackend(back).queue(workspace, "inputs/main").records() == JsonlBackend(
        state).queue(workspace, "inputs/main").records()
    code, out, _ = run(capsys, "inspect", "instance", "k", "--store", str(back), "--json")
    assert "delete old.txt" in out


def test_an_instance_in_use_or_to_be_folded_is_not_copied(
    here: Path, bundle: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = here / "state"
    workspace = fill_state_root(bundle, state)
    source = JsonlBackend(state)
    [paths] = [i.paths for i in iter_instances(state) if i.instance_key == "cut"]
    with paths.events.open("ab") as handle:
        handle.write(b'{"type": "append", "mess')  # a torn last line
    with source.open_instance(workspace, "assistant", "k"):
        code, _out, err = run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url)
    assert code == 1
    assert "assistant:k: [E_INSTANCE_LOCKED]" in err
    assert "assistant:cut: not copied, it must be recovered first" in err
    assert "goondan fold cut" in err


def test_a_bad_store_url_is_e_store_url_with_the_password_masked(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "store", "copy", "--from", str(here / "state"), "--to",
                         "mysql://u:Sup3rSecret@db/x")
    assert code == 3 and "[E_STORE_URL] --to is not a store" in err
    assert "Sup3rSecret" not in out + err and "Traceback" not in err
    code, _, err = run(capsys, "store", "copy", "--from", "", "--to", str(here / "b"))
    assert code == 3 and "[E_STORE_URL] --from is empty" in err


def test_inspect_instance_prints_the_same_for_a_state_root_and_its_copy_in_postgresql(
    here: Path, bundle: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One conversation, in a JSONL state root and copied into PostgreSQL: ``inspect instance``
    shows it alike in every form; only where it is stored differs (``dir``/``sizeBytes`` of the
    state root, ``store`` of PostgreSQL in the ``--json`` instance row)."""
    state = here / "state"
    fill_state_root(bundle, state)
    assert run(capsys, "store", "copy", "--from", str(state), "--to", postgres_url)[0] == 0
    forms = [[], ["--limit", "1"], ["--limit", "0"], ["--messages", "--limit", "1"],
             ["--events"], ["--state"], ["--events", "--state"], ["--raw"], ["--raw", "-n", "1"],
             ["--json"], ["--json", "-n", "1", "--messages", "--state"]]
    where = {"dir", "sizeBytes", "store"}
    seen = ""
    for key in ("k", "cut"):  # a parked turn with a tool call; pending events, extension state
        for form in forms:
            results = [run(capsys, "inspect", "instance", key, "--store", store, *form)
                       for store in (str(state), postgres_url)]
            assert [code for code, _, _ in results] == [0, 0], results
            local, stored = (out for _, out, _ in results)
            seen += local
            if "--json" not in form:
                assert local == stored, (key, form)
                continue
            rows = [json.loads(local), json.loads(stored)]
            assert set(rows[0]["instance"]) ^ set(rows[1]["instance"]) == where
            for row in rows:
                row["instance"] = {k: v for k, v in row["instance"].items() if k not in where}
            assert rows[0] == rows[1], (key, form)
    assert "-> call files__delete" in seen and "-- pending events: 1 --" in seen
    assert "memory: {\"facts\": [\"tea\"]}" in seen
