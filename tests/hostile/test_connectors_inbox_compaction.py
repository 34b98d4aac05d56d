"""Issue 27 item 10 (part): the connector inbox is compacted.

Consumed records (their Turn's start is final in a claim file) are rewritten as ``{"consumed":
id}`` lines when a restart finds enough of them; the pending ones stay whole and in order, and a
consumed id is still refused as a duplicate. The rewrite is atomic: a crash at any file-system
call of the compaction leaves an inbox whose next open gives exactly the same pending events.
"""

from __future__ import annotations

from pathlib import Path

from goondan.connectors.event import ConnectorEvent
from goondan.connectors.inbox import COMPACT_MIN_CONSUMED, ConnectionInbox
from tests.support.crash_points import crash_at

CONSUMED = COMPACT_MIN_CONSUMED + 200
PAYLOAD = "x" * 400  # a record of realistic size: compaction must shrink the file a lot


def _fill(directory: Path) -> list[str]:
    """CONSUMED events whose Turn started (final claims) and 3 pending ones; the pending ids."""
    inbox = ConnectionInbox(directory)
    inbox.open()
    ids = [f"e{i}" for i in range(CONSUMED + 3)]
    pending = [ids[5], ids[CONSUMED // 2], ids[-1]]
    for event_id in ids:
        inbox.append(
            ConnectorEvent.text("msg", f"{event_id} {PAYLOAD}", instance_key="k", id=event_id),
            "a",
            "k",
        )
    inbox.close()
    started = "".join(f'{{"id":"{i}"}}\n' for i in ids if i not in pending)
    (directory / "started" / "a.k.jsonl").write_text(started)  # the claims of agent process a.k
    return pending


def _pending_ids(directory: Path) -> tuple[list[str], ConnectionInbox]:
    inbox = ConnectionInbox(directory)
    records = inbox.open()
    return [r.event.id for r in records], inbox


def test_a_restart_compacts_consumed_records_and_keeps_exactly_the_pending_ones(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "conn"
    pending = _fill(directory)
    before = (directory / "inbox.jsonl").stat().st_size
    ids, inbox = _pending_ids(directory)
    inbox.close()
    assert ids == pending
    after = (directory / "inbox.jsonl").stat().st_size
    assert after < before / 10, (before, after)
    claims = directory / "started" / "a.k.jsonl"
    assert claims.read_text() == ""  # every final claim is now a {"consumed"} line of the inbox
    ids, inbox = _pending_ids(directory)  # the compacted inbox reads the same
    try:
        assert ids == pending
        assert inbox.seen("e0") and inbox.seen(pending[0])  # a consumed id is still a duplicate
        assert not inbox.seen("new")
        inbox.append(ConnectorEvent.text("msg", "new", instance_key="k", id="new"), "a", "k")
    finally:
        inbox.close()
    ids, inbox = _pending_ids(directory)
    inbox.close()
    assert ids == [*pending, "new"]
    assert not (directory / "inbox.jsonl.compact").exists()


def test_a_crash_at_any_point_of_a_compaction_recovers(tmp_path: Path) -> None:
    point = 1
    while True:
        directory = tmp_path / f"c{point}"
        pending = _fill(directory)

        def compact(directory: Path = directory) -> None:
            ConnectionInbox(directory).open()

        killed = crash_at(point, compact)
        ids, inbox = _pending_ids(directory)
        try:
            assert ids == pending, f"crash point {point}"
            assert inbox.seen("e0") and inbox.seen(pending[-1])
        finally:
            inbox.close()
        assert not (directory / "inbox.jsonl.compact").exists()
        assert not list((directory / "started").glob("*.compact"))
        if not killed:
            break
        point += 1
    assert point > 4  # the writes and renames of both rewrites were each a crash point
