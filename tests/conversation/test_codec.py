"""JSONL codec: reference record format, byte-stable round trips, torn tails, corrupt lines."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from goondan.conversation import Message, fold
from goondan.conversation.codec import (
    TORN_LINE,
    decode_events,
    decode_messages,
    encode_event,
    encode_message,
)
from goondan.errors import WorkspaceCorruptError
from goondan.workspace import InstanceStore

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "workspace" / "golden"


def test_golden_base_rewrites_byte_for_byte() -> None:
    data = (GOLDEN / "base.jsonl").read_bytes()
    decoded = decode_messages(data, file="base.jsonl")
    assert decoded.diagnostics == [] and len(decoded.records) == 6
    assert decoded.records[4].extra == {"futureField": {"kept": ["as", 1, None, True]}}
    assert b"".join(encode_message(m) for m in decoded.records) == data


def test_golden_events_rewrite_byte_for_byte_with_turn_ids() -> None:
    data = (GOLDEN / "events.jsonl").read_bytes()
    events = decode_events(data, file="events.jsonl").records
    assert [e.extra.get("turnId") for e in events] == ["turn-2"] * 5
    assert b"".join(encode_event(e) for e in events) == data
    # Passing the turn id explicitly gives the same bytes (it replaces, never duplicates).
    assert b"".join(encode_event(e, "turn-2") for e in events) == data


def test_golden_fold_matches_the_expected_file() -> None:
    base = decode_messages((GOLDEN / "base.jsonl").read_bytes(), file="base.jsonl").records
    events = decode_events((GOLDEN / "events.jsonl").read_bytes(), file="events.jsonl").records
    folded, diagnostics = fold(base, events)
    assert [d.code for d in diagnostics] == ["E_MESSAGE_TARGET_NOT_FOUND"]
    assert b"".join(encode_message(m) for m in folded) == (GOLDEN / "folded.jsonl").read_bytes()


def test_golden_recovery_through_the_store_is_byte_stable(state_root: Path) -> None:
    store = InstanceStore.open(state_root, "golden-00000000", "agent", "k")
    shutil.copy(GOLDEN / "base.jsonl", store.paths.base)
    shutil.copy(GOLDEN / "events.jsonl", store.paths.events)
    with store:
        state = store.load()
        codes = [d.code for d in store.recovery_diagnostics]
    assert codes == ["W_WORKSPACE_RECOVERED", "E_MESSAGE_TARGET_NOT_FOUND"]
    assert store.paths.base.read_bytes() == (GOLDEN / "folded.jsonl").read_bytes()
    assert store.paths.events.read_bytes() == b""
    assert len(state.next_messages) == 7
    with InstanceStore.open(state_root, "golden-00000000", "agent", "k") as again:
        again.load()
        assert again.recovery_diagnostics == []
    assert store.paths.base.read_bytes() == (GOLDEN / "folded.jsonl").read_bytes()


def test_blank_lines_are_skipped_and_line_numbers_kept() -> None:
    data = (GOLDEN / "base.jsonl").read_bytes().replace(b"\n", b"\n\n", 1)
    decoded = decode_messages(data, file="base.jsonl")
    assert len(decoded.records) == 6 and decoded.lines[:3] == [1, 3, 4]


def test_torn_final_line_is_dropped_with_a_warning() -> None:
    data = (GOLDEN / "base.jsonl").read_bytes()
    decoded = decode_messages(data + b'{"id":"msg-x","da', file="base.jsonl")
    assert len(decoded.records) == 6
    assert decoded.valid_size == len(data)
    [warning] = decoded.diagnostics
    assert warning.code == TORN_LINE and warning.severity == "warning" and warning.line == 7


def test_complete_last_record_without_newline_is_kept() -> None:
    data = (GOLDEN / "base.jsonl").read_bytes().rstrip(b"\n")
    decoded = decode_messages(data, file="base.jsonl")
    assert len(decoded.records) == 6 and decoded.missing_newline and not decoded.diagnostics


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"garbage", "invalid JSON"),
        (b"[1, 2]", "not a valid record"),
        (b'{"id": 5, "data": {"role": "user", "content": "x"}}', "not a valid record"),
        (
            b'{"id": "a", "data": {"role": "user"}, "source": {"type": "user"}}',
            "not a valid record",
        ),
        (
            b'{"id": "a", "data": {"role": "user", "content": ""}, "source": {"type": "robot"}}',
            "not a valid record",
        ),
        (b"\xff\xfe", "invalid JSON"),
    ],
)
def test_corrupt_line_in_the_middle_names_file_and_line(line: bytes, why: str) -> None:
    lines = (GOLDEN / "base.jsonl").read_bytes().splitlines(keepends=True)
    lines.insert(2, line + b"\n")
    with pytest.raises(WorkspaceCorruptError) as info:
        decode_messages(b"".join(lines), file="/x/base.jsonl")
    assert info.value.code == "E_WORKSPACE_CORRUPT"
    assert info.value.location == "/x/base.jsonl:3" and why in info.value.message


def test_unknown_event_type_is_corrupt_not_skipped() -> None:
    with pytest.raises(WorkspaceCorruptError, match=r"events.jsonl:1: not a valid record"):
        decode_events(b'{"type": "explode"}\n', file="events.jsonl")


def test_gigantic_line_round_trips() -> None:
    from goondan.conversation import Message

    message = Message.user("x" * 5_000_000)
    data = encode_message(message)
    assert decode_messages(data, file="b").records[0].text == message.text


def test_lone_surrogates_become_u_fffd_and_encode_to_valid_utf8() -> None:
    """The U+FFFD rule (docs/security.md): a lone surrogate never enters a message; one stored
    by an older version as a JSON escape is healed when the line is read."""
    from goondan.conversation import Message

    line = encode_message(Message.user("bad \ud800 text"))
    line.decode("utf-8")
    assert decode_messages(line, file="b").records[0].text == "bad \ufffd text"
    stored = line.replace("\ufffd".encode(), b"\\udcff")
    assert b"\\udcff" in stored
    assert decode_messages(stored, file="b").records[0].text == "bad \ufffd text"


def test_non_utf8_bytes_name_the_line_and_are_never_skipped() -> None:
    good = encode_message(Message.user("ok"))
    bad = b'{"id":"x","data":{"role":"user","content":"\xff\xfe"},"source":{"type":"user"}}\n'
    with pytest.raises(WorkspaceCorruptError) as info:
        decode_messages(good + bad + good, file="base.jsonl")
    assert info.value.location == "base.jsonl:2"
    # A complete last line (it has its newline) is not a torn write either.
    with pytest.raises(WorkspaceCorruptError) as info:
        decode_messages(good + bad, file="base.jsonl")
    assert info.value.location == "base.jsonl:2"
    torn = decode_messages(good + bad[:-1], file="base.jsonl")  # no newline: a torn write
    assert torn.torn and len(torn.records) == 1


def test_unknown_source_fields_survive_a_rewrite() -> None:
    line = (b'{"id":"m1","data":{"role":"user","content":"hi"},"metadata":{},'
            b'"createdAt":"2026-03-04T08:05:09.120Z","source":{"type":"user","channel":"slack",'
            b'"stepId":"s-1"}}\n')
    [message] = decode_messages(line, file="base.jsonl").records
    assert encode_message(message) == line
    tool = (b'{"id":"m2","data":{"role":"tool","content":[]},"metadata":{},'
            b'"createdAt":"2026-03-04T08:05:09.120Z","source":{"type":"tool","toolCallId":"c1"}}\n')
    [message] = decode_messages(tool, file="base.jsonl").records
    assert encode_message(message) == tool  # no "toolName": null added
