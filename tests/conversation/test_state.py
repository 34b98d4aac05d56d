"""ConversationState: incremental fold equals the naive fold; missing targets are warnings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from goondan.conversation import ConversationState, Message, MessageEvent, fold
from goondan.conversation.codec import decode_messages, encode_message
from goondan.conversation.messages import MessageSource
from goondan.conversation.state import LlmView, MessagePrefix


def msg(mid: str, text: str = "") -> Message:
    return Message(
        id=mid,
        data={"role": "user", "content": text or mid},
        source=MessageSource("user"),
        created_at="2026-03-04T08:05:09.120Z",
    )


def dicts(messages: list[Message]) -> list[dict[str, object]]:
    return [m.to_dict() for m in messages]


def llm_view_matches(state: ConversationState, expected: list[Message]) -> bool:
    """``to_llm_messages()`` is exactly the ``data`` dicts (the same objects) of ``expected``."""
    view = state.to_llm_messages()
    return len(view) == len(expected) and all(
        d is m.data for d, m in zip(view, expected, strict=True)
    )


def test_append_replace_remove_truncate() -> None:
    state = ConversationState([msg("a"), msg("b")])
    assert state.emit(MessageEvent.append(msg("c"))) is None
    assert state.emit(MessageEvent.replace("b", msg("b2"))) is None
    assert [m.id for m in state.next_messages] == ["a", "b2", "c"]
    assert state.emit(MessageEvent.remove("a")) is None
    assert [m.id for m in state.next_messages] == ["b2", "c"]
    assert [m.id for m in state.base_messages] == ["a", "b"]
    assert len(state.events) == 3
    state.emit(MessageEvent.truncate())
    assert state.next_messages == []
    assert state.to_llm_messages() == []


def test_missing_target_is_a_warning_not_an_error() -> None:
    state = ConversationState([msg("a")])
    diagnostic = state.emit(MessageEvent.remove("nope"))
    assert diagnostic is not None
    assert diagnostic.code == "E_MESSAGE_TARGET_NOT_FOUND" and diagnostic.severity == "warning"
    assert diagnostic.extra == {"eventIndex": 0, "targetId": "nope"}
    assert [m.id for m in state.next_messages] == ["a"]
    assert state.diagnostics == [diagnostic]


def test_replace_hits_the_first_of_duplicate_ids() -> None:
    state = ConversationState([msg("x", "one"), msg("x", "two")])
    state.emit(MessageEvent.replace("x", msg("y")))
    assert [m.text for m in state.next_messages] == ["y", "two"]
    state.emit(MessageEvent.remove("x"))
    assert [m.id for m in state.next_messages] == ["y"]


def test_to_llm_messages_returns_the_data_dicts() -> None:
    state = ConversationState([msg("a", "hello")])
    assert state.to_llm_messages() == [{"role": "user", "content": "hello"}]


def test_to_llm_messages_is_a_new_list_of_the_messages_own_dicts() -> None:
    state = ConversationState([msg("a"), msg("b")])
    view = state.to_llm_messages()
    view.append({"role": "user", "content": "not in the conversation"})
    assert len(state.to_llm_messages()) == 2  # callers may extend their list freely
    state.emit(MessageEvent.replace("a", msg("a2")))
    state.emit(MessageEvent.remove("b"))
    state.emit(MessageEvent.append(msg("c")))
    assert llm_view_matches(state, state.next_messages)
    assert [d["content"] for d in state.to_llm_messages()] == ["a2", "c"]
    adopted = ConversationState.adopt(state.next_messages, state.to_llm_messages())
    assert llm_view_matches(adopted, state.next_messages)


def test_next_messages_is_not_recomputed_on_append() -> None:
    state = ConversationState([msg(f"m{i}") for i in range(1000)])
    view = state.next_messages
    state.emit(MessageEvent.append(msg("new")))
    # The same list object grows in place: appends never rebuild the view.
    assert state.next_messages is view and view[-1].id == "new"


ids = st.sampled_from([f"m{i}" for i in range(8)])
events = st.one_of(
    st.builds(lambda i: MessageEvent.append(msg(i)), ids),
    st.builds(lambda t, i: MessageEvent.replace(t, msg(i, "r" + i)), ids, ids),
    st.builds(MessageEvent.remove, ids),
    st.just(MessageEvent.truncate()).map(lambda e: MessageEvent.truncate()),
)


@settings(max_examples=300, deadline=None)
@given(base_ids=st.lists(ids, max_size=8), sequence=st.lists(events, max_size=40),
       read_every=st.integers(min_value=1, max_value=5))
def test_incremental_equals_naive_fold(base_ids: list[str], sequence: list[MessageEvent],
                                       read_every: int) -> None:
    base = [msg(i) for i in base_ids]
    state = ConversationState(base)
    warnings = []
    for n, event in enumerate(sequence, start=1):
        found = state.emit(event)
        if found is not None:
            warnings.append(found.extra)
        if n % read_every == 0:  # interleave reads so lazy compaction is exercised mid-stream
            expected, _ = fold(base, sequence[:n])
            assert dicts(state.next_messages) == dicts(expected)
            assert llm_view_matches(state, expected)
    expected, diagnostics = fold(base, sequence)
    assert dicts(state.next_messages) == dicts(expected)
    assert llm_view_matches(state, expected)
    assert warnings == [d.extra for d in diagnostics]
    assert len(state) == len(expected)


@settings(max_examples=300, deadline=None)
@given(base_ids=st.lists(ids, max_size=8), sequence=st.lists(events, max_size=40),
       actions=st.lists(st.sampled_from(["emit", "read", "detach", "commit"]), min_size=40,
                        max_size=80))
def test_llm_view_survives_detach_and_adopt(base_ids: list[str], sequence: list[MessageEvent],
                                           actions: list[str]) -> None:
    # Mirrors what InstanceStore.commit does between Turns: the next state adopts a copy of
    # next_messages and takes over the data list; the old state rebuilds one when asked.
    base = [msg(i) for i in base_ids]
    state = ConversationState(base)
    old_states: list[ConversationState] = []
    applied = 0
    for action in actions:
        if action == "emit" and applied < len(sequence):
            state.emit(sequence[applied])
            applied += 1
        elif action == "read":
            assert llm_view_matches(state, fold(base, sequence[:applied])[0])
        elif action == "detach":
            data, expected = state.detach_llm_messages(), fold(base, sequence[:applied])[0]
            assert len(data) == len(expected)
            assert all(d is m.data for d, m in zip(data, expected, strict=True))
        elif action == "commit":
            old_states.append(state)
            state = ConversationState.adopt(list(state.next_messages), state.detach_llm_messages())
    expected, _ = fold(base, sequence[:applied])
    assert dicts(state.next_messages) == dicts(expected)
    assert llm_view_matches(state, expected)
    for old in old_states:  # still usable after handing its list on
        assert llm_view_matches(old, old.next_messages)


@settings(max_examples=150, deadline=None)
@given(base_ids=st.lists(ids, max_size=8), sequence=st.lists(events, max_size=30))
def test_fold_then_reload_equals_next_messages(
    base_ids: list[str], sequence: list[MessageEvent]
) -> None:
    state = ConversationState([msg(i) for i in base_ids])
    state.emit_all(sequence)
    data = b"".join(encode_message(m) for m in state.next_messages)
    reloaded = decode_messages(data, file="base.jsonl").records
    assert dicts(reloaded) == dicts(state.next_messages)


@given(base_ids=st.lists(ids, max_size=8), sequence=st.lists(events, max_size=40),
       actions=st.lists(st.sampled_from(["emit", "commit", "old-emit"]), min_size=40, max_size=80))
def test_a_detached_message_list_is_never_changed_behind_anyone(
    base_ids: list[str], sequence: list[MessageEvent], actions: list[str]
) -> None:
    # The fold-commit's single copy: the next state takes over the old state's working list
    # (detach_messages) and both bases are the committed snapshot. Neither the snapshot, the
    # next state nor an old state that is used again may see another's changes.
    base = [msg(i) for i in base_ids]
    state = ConversationState(base)
    expected = list(base)
    olds: list[tuple[ConversationState, list[Message]]] = []
    applied = 0
    for action in actions:
        if action == "emit" and applied < len(sequence):
            state.emit(sequence[applied])
            expected, _ = fold(expected, [sequence[applied]])
            applied += 1
        elif action == "commit":
            snapshot = list(state.next_messages)
            data = state.detach_llm_messages()
            slots = state.detach_messages(snapshot)
            olds.append((state, list(snapshot)))
            state = ConversationState.adopt(snapshot, data, slots=slots)
            assert state.base_messages is snapshot
        elif action == "old-emit" and olds:
            old, old_expected = olds[-1]
            old.emit(MessageEvent.append(msg("late")))
            olds[-1] = (old, [*old_expected, msg("late")])
        assert dicts(state.next_messages) == dicts(expected)
        assert llm_view_matches(state, expected)
    for old, old_expected in olds:
        assert dicts(old.next_messages) == dicts(old_expected)
        assert llm_view_matches(old, old.next_messages)


@settings(max_examples=300, deadline=None)
@given(
    base_ids=st.lists(ids, max_size=8),
    sequence=st.lists(events, max_size=40),
    actions=st.lists(
        st.sampled_from(["emit", "commit", "old-emit", "old-read", "llm"]), min_size=40, max_size=90
    ),
)
def test_a_successor_shares_the_history_without_anyone_seeing_another_s_changes(
    base_ids: list[str], sequence: list[MessageEvent], actions: list[str]
) -> None:
    # The fold-commit without a copy (InstanceStore.commit): the successor takes over the list,
    # the store keeps a MessagePrefix of it. Neither that prefix, the successor's base, nor an
    # old state used again may see another's changes; the LLM view and its lineage stay right.
    base = [msg(i) for i in base_ids]
    state = ConversationState(base)
    expected = list(base)
    prefixes: list[tuple[MessagePrefix, list[Message]]] = []
    olds: list[tuple[ConversationState, list[Message]]] = []
    views: list[tuple[LlmView, list[dict[str, object]]]] = []
    applied = 0
    for action in actions:
        if action == "emit" and applied < len(sequence):
            before = state.to_llm_messages()
            state.emit(sequence[applied])
            expected, _ = fold(expected, [sequence[applied]])
            after = state.to_llm_messages()
            if after.lineage is before.lineage:  # the same run: the list only grew at its end
                assert after[: len(before)] == before
            applied += 1
        elif action == "commit":
            snapshot = list(state.next_messages)
            successor = state.successor()
            olds.append((state, snapshot))
            prefix = successor.committed_prefix()
            prefixes.append((prefix, snapshot))
            assert successor.base_length == len(snapshot) and successor.events == []
            state = successor
        elif action == "old-emit" and olds:
            old, old_expected = olds[-1]
            old.emit(MessageEvent.append(msg("late")))
            olds[-1] = (old, [*old_expected, msg("late")])
        elif action == "old-read" and olds:
            old, old_expected = olds[0]
            assert dicts(old.next_messages) == dicts(old_expected)
        elif action == "llm":
            assert llm_view_matches(state, expected)
            views.append((state.llm_view(), [m.data for m in expected]))
        assert dicts(state.next_messages) == dicts(expected)
        assert dicts(state.base_messages) == dicts(prefixes[-1][1] if prefixes else base)
    for view, data in views:  # a view never changes, whatever happened after it was made
        assert len(view) == len(data) and all(a is b for a, b in zip(view, data, strict=True))
        assert view == data and view[:] == data and list(reversed(view)) == data[::-1]
    for prefix, snapshot in prefixes:
        assert len(prefix) == len(snapshot)
        assert all(a is b for a, b in zip(prefix.to_list(), snapshot, strict=True))
    for old, old_expected in olds:
        assert dicts(old.next_messages) == dicts(old_expected)
        assert llm_view_matches(old, old.next_messages)
