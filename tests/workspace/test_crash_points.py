"""Every crash window of fold-commit and of recovery, visited one by one.

Each scenario starts from a prepared state root and runs an action (a turn and its commit, or a
plain open = recovery) in a child killed at its 1st, 2nd, ... mutating file call (writes torn
in half). After each kill the instance is reopened — and that recovery is itself killed at every
point once more — and the final history must be a point of the intended history (the turn cut after
some event, or committed) (recovery: exactly the uninterrupted recovery), with no leftover temporary
file, an empty events file, and a further open that changes nothing (idempotent).
"""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path

import pytest

from goondan.conversation import Message, MessageEvent
from goondan.conversation.codec import encode_event, encode_message
from goondan.conversation.messages import MessageSource
from goondan.conversation.repair import repair_tool_pairs, tool_result_ids
from goondan.types import ToolCall, ToolCallResult
from goondan.workspace import InstanceStore
from tests.support.crash_points import crash_at

WS, AGENT, KEY = "crash-0000cafe", "agent", "k"
Projection = list[tuple[object, ...]]


def msg(mid: str, role: str = "user", text: str = "", calls: list[str] | None = None) -> Message:
    if role == "assistant":
        message = Message.assistant(text, [ToolCall(c, "calc", {"c": c}) for c in calls or []])
    elif role == "tool":
        message = Message.tool_result(ToolCallResult.success(text, "calc", "ok"))
    else:
        message = Message(id=mid, data={"role": role, "content": text or mid},
                          source=MessageSource("user"))
    message.id = mid
    message.created_at = "2026-01-01T00:00:00.000Z"
    return message


def project(messages: list[Message]) -> Projection:
    return [("SYN" if m.metadata.get("synthetic") else m.id, m.role, m.text,
             tuple(tool_result_ids(m))) for m in messages]


def open_load(root: Path) -> tuple[Projection, list[str]]:
    with InstanceStore.open(root, WS, AGENT, KEY, fsync=False) as store:
        state = store.load()
        return project(state.next_messages), [d.code for d in store.recovery_diagnostics]


def prepare(root: Path, base: list[Message], events: list[MessageEvent]) -> None:
    with InstanceStore.open(root, WS, AGENT, KEY, fsync=False) as store:
        paths = store.paths
    paths.base.write_bytes(b"".join(encode_message(m) for m in base))
    paths.events.write_bytes(b"".join(encode_event(e, "turn-old") for e in events))


def assert_clean_and_idempotent(root: Path, expected: Projection) -> None:
    got, _ = open_load(root)
    assert got == expected
    with InstanceStore.open(root, WS, AGENT, KEY, fsync=False) as store:
        paths = store.paths
        before = paths.base.read_bytes()
        again = project(store.load().next_messages)
        assert again == expected and store.recovery_diagnostics == []
        assert paths.base.read_bytes() == before and paths.events.read_bytes() == b""
        assert not paths.base_tmp.exists() and not paths.base_prev.exists()
        assert repair_tool_pairs(store.load().next_messages) == []


Snapshot = dict[str, bytes]


def snapshot(root: Path) -> Snapshot:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def restore(snap: Snapshot, root: Path) -> Path:
    """Make ``root`` hold exactly ``snap`` (reusing its directories: creating and removing
    directories is by far the slowest part of these tests on some file systems)."""
    if root.exists():
        for path in [p for p in root.rglob("*") if p.is_file()]:
            if str(path.relative_to(root)) not in snap:
                path.unlink()
    for name, data in snap.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def needs_recovery(root: Path) -> bool:
    messages = next((root / "workspaces" / WS / "instances").iterdir()) / "messages"
    return any(p.name != "base.jsonl" or not p.read_bytes().endswith(b"\n")
               for p in messages.iterdir() if p.stat().st_size or p.name != "events.jsonl")


def recover_with_crashes(root: Path, tmp: Path) -> Projection:
    """Open ``root`` killed at every point of its recovery; each must end in the same state."""
    snap = snapshot(root)
    wanted, _ = open_load(restore(snap, tmp / "ref"))
    if not needs_recovery(root):  # a plain open writes nothing but the lock's pid
        assert_clean_and_idempotent(root, wanted)
        return wanted
    run = tmp / "rec"
    for point in count(1):
        restore(snap, run)
        killed = crash_at(point, lambda: open_load(run))
        assert_clean_and_idempotent(run, wanted)
        if not killed:
            break
    return wanted


def run_scenario(tmp: Path, base: list[Message], leftovers: list[MessageEvent],
                 turn: list[MessageEvent]) -> int:
    template = tmp / "template"
    prepare(template, base, leftovers)
    before = recover_with_crashes(template, tmp)
    if not turn:
        return 0

    def action(root: Path) -> None:
        with InstanceStore.open(root, WS, AGENT, KEY, fsync=False) as store:
            state = store.load()
            for event in turn:
                state.emit(event)
                store.append_event(event, "turn-new")
            store.commit(state)

    def interrupted(root: Path, cut: int) -> None:
        with InstanceStore.open(root, WS, AGENT, KEY, fsync=False) as store:
            store.load()
            store.append_events(turn[:cut], "turn-new")

    # The intended history up to some point: the turn cut after any event, or committed.
    snap = snapshot(template)
    run = tmp / "run"
    allowed = []
    for cut in range(len(turn) + 1):
        interrupted(restore(snap, run), cut)
        allowed.append(open_load(run)[0])
    action(restore(snap, run))
    after, _ = open_load(run)
    assert after != before and after in allowed
    points = 0
    for point in count(1):
        restore(snap, run)
        killed = crash_at(point, lambda: action(run))
        got = recover_with_crashes(run, tmp)
        assert got in allowed, f"crash point {point}: not a point of the intended history"
        points = point
        if not killed:
            assert got == after
            break
    return points


HISTORY = [msg("u0"), msg("a0", "assistant", calls=["c0"]), msg("r0", "tool", "c0"),
           msg("f0", "assistant", "done")]


def test_crash_anywhere_in_a_delta_commit(tmp_path: Path) -> None:
    turn = [MessageEvent.append(m) for m in (msg("u1"), msg("a1", "assistant", calls=["c1", "c2"]),
                                             msg("r1", "tool", "c1"))]
    assert run_scenario(tmp_path, HISTORY, [], turn) > 5


def test_crash_anywhere_in_a_rewrite_commit(tmp_path: Path) -> None:
    turn = [MessageEvent.replace("f0", msg("f0", "assistant", "edited")),
            MessageEvent.remove("u0"), MessageEvent.append(msg("u1"))]
    assert run_scenario(tmp_path, HISTORY, [], turn) > 5


def test_crash_anywhere_in_a_truncate_then_append_commit(tmp_path: Path) -> None:
    turn = [MessageEvent.truncate(), MessageEvent.append(msg("u1")),
            MessageEvent.append(msg("a1", "assistant", calls=["c1"]))]
    assert run_scenario(tmp_path, HISTORY, [], turn) > 5


def test_crash_anywhere_in_recovery_with_a_synthetic_result_at_the_end(tmp_path: Path) -> None:
    # The interrupted turn left a tool call without result: recovery appends leftovers AND a
    # synthetic result; a crash after that append must not replay the leftovers again.
    leftovers = [MessageEvent.append(m) for m in (msg("u1"), msg("a1", "assistant", calls=["c1"]))]
    run_scenario(tmp_path, HISTORY, leftovers, [])


def test_crash_anywhere_in_recovery_with_a_repair_in_the_middle(tmp_path: Path) -> None:
    base = [msg("u0"), msg("a0", "assistant", calls=["c0", "c1"]), msg("r0", "tool", "c0"),
            msg("u1")]
    leftovers = [MessageEvent.append(msg("u2")), MessageEvent.remove("u1")]
    run_scenario(tmp_path, base, leftovers, [MessageEvent.append(msg("u3"))])


def test_crash_anywhere_in_recovery_of_a_partly_committed_delta(tmp_path: Path) -> None:
    # base already holds the first two leftover appends (a delta commit cut short).
    new = [msg("u1"), msg("a1", "assistant", calls=["c1"]), msg("u2")]
    run_scenario(tmp_path, HISTORY + new[:2], [MessageEvent.append(m) for m in new], [])


@pytest.mark.parametrize("kind", ["extension", "status"])
def test_crash_while_writing_extension_state_or_metadata(tmp_path: Path, kind: str) -> None:
    template = tmp_path / "template"
    prepare(template, HISTORY, [])
    with InstanceStore.open(template, WS, AGENT, KEY, fsync=False) as store:
        store.save_extension_state("memory", {"facts": ["old"]})

    def action(root: Path) -> None:
        with InstanceStore.open(root, WS, AGENT, KEY, fsync=False) as store:
            store.load()
            if kind == "extension":
                store.save_extension_state("memory", {"facts": ["new" * 1000]})
            else:
                store.set_status("processing")

    snap, run = snapshot(template), tmp_path / "run"
    for point in count(1):
        restore(snap, run)
        killed = crash_at(point, lambda: action(run))
        with InstanceStore.open(run, WS, AGENT, KEY, fsync=False) as store:
            assert project(store.load().next_messages) == project(HISTORY)
            assert store.load_extension_state("memory") in (
                {"facts": ["old"]}, {"facts": ["new" * 1000]})
            assert json.loads(store.paths.metadata.read_text())["status"] == "idle"
        if not killed:
            break


def test_harness_really_kills(tmp_path: Path) -> None:
    marker = tmp_path / "m"
    assert crash_at(1, lambda: marker.write_bytes(b"x")) is False and marker.read_bytes() == b"x"
    assert crash_at(1, lambda: marker.unlink()) is True and marker.exists()
