"""The incremental SSE parser: framing rules, any chunking, UTF-8 across chunk boundaries."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.llm.sse import SseEvent, SseParser


def parse(*chunks: bytes) -> list[SseEvent]:
    parser = SseParser()
    out: list[SseEvent] = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    out.extend(parser.close())
    return out


def test_single_event_with_type_and_id() -> None:
    events = parse(b"event: message_start\nid: 7\ndata: {\"a\": 1}\n\n")
    assert events == [SseEvent(data='{"a": 1}', event="message_start", id="7")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert parse(b"data: one\ndata: two\ndata:three\n\n") == [SseEvent(data="one\ntwo\nthree")]


def test_only_one_leading_space_is_stripped() -> None:
    assert parse(b"data:  two spaces\n\n")[0].data == " two spaces"


def test_comments_and_unknown_fields_are_ignored() -> None:
    events = parse(b": keep-alive\n\nretry: 100\nfoo: bar\ndata: x\n\n: ping\n\n")
    assert events == [SseEvent(data="x")]


def test_event_without_data_is_not_dispatched_but_empty_data_is() -> None:
    assert parse(b"event: ping\n\n") == []
    assert parse(b"data:\n\n") == [SseEvent(data="")]
    assert parse(b"data\n\n") == [SseEvent(data="")]


def test_done_marker_is_plain_data() -> None:
    assert parse(b"data: [DONE]\n\n") == [SseEvent(data="[DONE]")]


def test_crlf_and_lone_cr_line_endings() -> None:
    assert parse(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n") == [
        SseEvent(data="a"), SseEvent(data="b"), SseEvent(data="c"),
    ]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert parse(b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n") == [
        SseEvent(data="a"),
        SseEvent(data="b"),
    ]


def test_utf8_split_across_chunks() -> None:
    raw = "data: 안녕하세요 👋\n\n".encode()
    for cut in range(1, len(raw)):
        assert parse(raw[:cut], raw[cut:]) == [SseEvent(data="안녕하세요 👋")], cut


def test_id_persists_until_changed() -> None:
    events = parse(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n")
    assert [e.id for e in events] == ["1", "1", "2"]


def test_close_dispatches_a_terminated_last_event_but_drops_a_partial_line() -> None:
    assert parse(b"data: a\n\ndata: last\n") == [SseEvent(data="a"), SseEvent(data="last")]
    assert parse(b"data: a\n\ndata: {\"cut") == [SseEvent(data="a")]


def test_has_partial_reports_buffered_bytes() -> None:
    parser = SseParser()
    parser.feed(b"data: x\n\ndata: y")
    assert parser.has_partial
    parser.feed(b"\n\n")
    assert not parser.has_partial


_field_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=20
)
_events = st.lists(
    st.tuples(st.one_of(st.none(), _field_text.filter(lambda s: s != "")),
              st.lists(_field_text, min_size=1, max_size=3)),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(events=_events, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
       newline=st.sampled_from(["\n", "\r\n", "\r"]))
def test_any_chunking_gives_the_same_events(
    events: list[tuple[str | None, list[str]]], cuts: list[int], newline: str
) -> None:
    text = ""
    for event_type, lines in events:
        if event_type is not None:
            text += f"event: {event_type}{newline}"
        text += "".join(f"data: {line}{newline}" for line in lines) + newline
    raw = text.encode()
    whole = parse(raw)
    assert [(e.event, e.data) for e in whole] == [(t, "\n".join(lines)) for t, lines in events]
    points = sorted({c % (len(raw) + 1) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert parse(*pieces) == whole
