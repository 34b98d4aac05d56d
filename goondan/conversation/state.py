"""ConversationState: ``next_messages = base_messages + SUM(events)``, kept incrementally.

Two implementations of the same rule live here on purpose:

* :func:`fold` is the pure, obviously-correct definition (used by recovery, by ``goondan fold``
  and as the oracle of the property tests);
* :class:`ConversationState` applies each emitted event in O(1) amortised time: messages sit in a
  slot list with tombstones for removals, an id index finds ``replace``/``remove`` targets, and
  the tombstones are compacted lazily the next time ``next_messages`` is read. The index itself
  is built on the first ``replace``/``remove``/``get`` of a Turn, so starting a Turn (and the
  fold-commit that creates the next state) costs no per-message Python work. Likewise a second
  slot list holds each message's ``data`` dict, built on the first
  :meth:`~ConversationState.to_llm_messages` and then updated by the same few lines that update
  the first, so that call (made every step) is one list copy rather than a Python loop over the
  history. The fold-commit hands that list on to the next Turn's state
  (:meth:`~ConversationState.detach_llm_messages`). The property tests check both lists against
  the naive fold.

Event semantics (docs/conversations.md "During a Turn"): ``append`` adds at the end; ``replace``
swaps the *first* message whose id equals ``targetId`` (the new message may carry a new id);
``remove`` drops it; ``truncate`` empties the conversation. A missing target is skipped with a
warning diagnostic ``E_MESSAGE_TARGET_NOT_FOUND`` and never raises.
"""

from __future__ import annotations

import bisect
import copy
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast, overload

from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import Diagnostic

__all__ = [
    "TARGET_NOT_FOUND",
    "ConversationState",
    "LlmMessages",
    "LlmView",
    "MessagePrefix",
    "fold",
    "same_messages",
    "target_not_found",
]

TARGET_NOT_FOUND = "E_MESSAGE_TARGET_NOT_FOUND"


def target_not_found(event: MessageEvent, event_index: int) -> Diagnostic:
    """The warning recorded when a ``replace``/``remove`` names an id that is not present."""
    return Diagnostic(
        code=TARGET_NOT_FOUND,
        message=f"{event.type} event #{event_index} targets message {event.target_id!r}, "
        "which is not in the conversation; the event was skipped",
        severity="warning",
        suggestion="emit replace/remove only for ids taken from next_messages",
        extra={"eventIndex": event_index, "targetId": event.target_id},
    )


class LlmMessages(list[dict[str, Any]]):
    """The list :meth:`ConversationState.to_llm_messages` returns: a plain list that also says
    where it came from.

    ``lineage`` names an append-only run of the state's message list: while it stays the same,
    that list only grew at its end, so two ``LlmMessages`` of one lineage are prefixes of one
    another. A model adapter's wire cache (goondan/llm/wire.py) uses it to know that a request
    extends the one it converted last without comparing the whole history, which keeps a step
    O(new messages). Any change to the list itself drops the claim (``lineage`` becomes
    ``None``), and the cache then falls back to comparing.
    """

    __slots__ = ("lineage",)

    def __init__(self, items: Iterable[dict[str, Any]] = (), lineage: object | None = None) -> None:
        super().__init__(items)
        self.lineage = lineage

    def __reduce_ex__(self, protocol: Any) -> Any:
        # A copy (copy.deepcopy by a recording model, pickle) is a plain list: copied dicts are
        # not the state's, so the copy must not claim its lineage.
        return (list, (list(self),))


class LlmView(Sequence[dict[str, Any]]):
    """A read-only view of a conversation's message dicts as they stood when it was made, with
    no copy (:meth:`ConversationState.llm_view`): what the turn loop sends to the model.

    It reads the state's own data list, which the state only appends to while views of it may
    be alive (it copies the list before a ``replace``/``remove``), so the first ``len(view)``
    entries never change. Indexing, slicing (a new list), iteration, ``reversed``, ``in``,
    ``==`` with a list and ``+`` work as on a list; ``copy``/``deepcopy``/pickle give a list.
    ``lineage`` is that of :class:`LlmMessages`.
    """

    __slots__ = ("_items", "_length", "lineage")

    def __init__(self, items: list[dict[str, Any]], length: int, lineage: object | None) -> None:
        self._items = items
        self._length = length
        self.lineage = lineage

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            return self._items[start:stop:step]
        position = index + self._length if index < 0 else index
        if not 0 <= position < self._length:
            raise IndexError("LlmView index out of range")
        return self._items[position]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return itertools.islice(self._items, self._length)

    def __reversed__(self) -> Iterator[dict[str, Any]]:
        items = self._items
        return (items[i] for i in range(self._length - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, LlmView)):
            return len(other) == self._length and all(
                a == b for a, b in zip(self, other, strict=False)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like a list

    def __add__(self, other: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*self, *other]

    def __radd__(self, other: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*other, *self]

    def __copy__(self) -> list[dict[str, Any]]:
        return self[:]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[dict[str, Any]]:
        return copy.deepcopy(self[:], memo)

    def __reduce__(self) -> Any:
        return (list, (self[:],))

    def __repr__(self) -> str:
        return f"<LlmView {self._length} messages>"


def _forgets_lineage(name: str) -> Any:
    method = getattr(list, name)

    def mutate(self: LlmMessages, *args: Any, **kwargs: Any) -> Any:
        self.lineage = None
        return method(self, *args, **kwargs)

    mutate.__name__ = name
    mutate.__doc__ = method.__doc__
    return mutate


for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert",
              "pop", "remove", "clear", "sort", "reverse"):
    setattr(LlmMessages, _name, _forgets_lineage(_name))


class MessagePrefix:
    """The first ``length`` messages of a list whose owners never change those entries in place.

    What the fold-commit keeps as "what ``base.jsonl`` holds" (:meth:`ConversationState.successor`):
    the list is the next Turn's working list, which only grows at its end, and is copied before
    a ``replace``/``remove`` would change it, so the prefix stays the committed snapshot without
    a copy per Turn. Its length and its ends are O(1); :meth:`to_list` copies, once.
    """

    __slots__ = ("_items", "_list", "length")

    def __init__(self, items: list[Message], length: int | None = None) -> None:
        self._items = items
        self.length = len(items) if length is None else length
        self._list: list[Message] | None = items if length is None else None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Message:
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        return self._items[index]

    def to_list(self) -> list[Message]:
        """The messages as a list nobody changes (made on the first call)."""
        if self._list is None:
            self._list = self._items[: self.length]
        return self._list

    def __repr__(self) -> str:
        return f"<MessagePrefix {self.length} messages>"


def fold(
    base: Iterable[Message], events: Iterable[MessageEvent], *, first_index: int = 0
) -> tuple[list[Message], list[Diagnostic]]:
    """Apply ``events`` to ``base`` in order; return the new list and any warnings.

    This is the naive reference definition (O(n) per replace/remove). ``first_index`` offsets
    the ``eventIndex`` reported in diagnostics.
    """
    messages = list(base)
    diagnostics: list[Diagnostic] = []
    for offset, event in enumerate(events):
        if event.type == "append":
            assert event.message is not None
            messages.append(event.message)
        elif event.type == "truncate":
            messages.clear()
        else:
            position = next((i for i, m in enumerate(messages) if m.id == event.target_id), None)
            if position is None:
                diagnostics.append(target_not_found(event, first_index + offset))
            elif event.type == "replace":
                assert event.message is not None
                messages[position] = event.message
            else:
                del messages[position]
    return messages, diagnostics


class ConversationState:
    """The conversation of one Turn: a base snapshot, the Turn's events, and their fold.

    ``base_messages`` never changes during the Turn. ``events`` is the ordered list of every
    emitted event (including skipped ones, so that a later fold reproduces the same warnings).
    ``next_messages`` is the current view; treat it as read-only and change the conversation
    only through :meth:`emit`.
    """

    __slots__ = (
        "_base",
        "_base_len",
        "_data",
        "_data_viewed",
        "_events",
        "_frozen",
        "_index",
        "_limit",
        "_lineage",
        "_shared",
        "_slots",
        "_tombstones",
        "diagnostics",
    )

    def __init__(self, base_messages: Iterable[Message] = ()) -> None:
        # None while the base is the first _base_len entries of _slots (see successor()).
        self._base: list[Message] | None = list(base_messages)
        self._base_len = len(self._base)
        self._events: list[MessageEvent] = []
        self.diagnostics: list[Diagnostic] = []
        self._slots: list[Message | None] = list(self._base)
        # None until needed; then _data[i] is _slots[i].data (None for a tombstone).
        self._data: list[dict[str, Any] | None] | None = None
        self._tombstones = 0
        self._index: dict[str, list[int]] | None = None
        self._shared = False  # _slots is a list others hold (detach_messages): copy before a change
        # The first _frozen entries of _slots are relied on by others (successor()): copy the list
        # before changing it other than by an append.
        self._frozen = 0
        # Set on a state that handed its list to its successor: its view is the first _limit
        # entries, copied out before it is used again.
        self._limit: int | None = None
        # Replaced whenever _data changes other than by an append (see LlmMessages).
        self._lineage = object()
        self._data_viewed = False  # an LlmView may read _data: copy it before changing an entry

    @classmethod
    def adopt(
        cls,
        base_messages: list[Message],
        base_data: list[dict[str, Any]] | None = None,
        *,
        slots: list[Message] | None = None,
        lineage: object | None = None,
    ) -> ConversationState:
        """A state that uses ``base_messages`` as its base without copying it.

        For owners that never mutate that list afterwards (``InstanceStore.commit``); saves one
        O(n) copy per Turn on long histories. ``base_data``, when given, must be a list nobody
        else holds equal to ``[m.data for m in base_messages]`` (the previous state's
        :meth:`detach_llm_messages`); the state takes it over, which spares the per-message
        loop that would otherwise build it on the first :meth:`to_llm_messages`. Likewise
        ``slots``, a list nobody else holds equal to ``base_messages`` (the previous state's
        :meth:`detach_messages`), becomes the new state's working list instead of a copy.
        ``lineage`` (the previous state's :attr:`lineage`, read before detaching ``base_data``)
        continues that list's append-only run, so a model's wire cache keeps matching across
        Turns.
        """
        state = cls.__new__(cls)
        state._base = base_messages
        state._base_len = len(base_messages)
        state._frozen = 0
        state._limit = None
        state._events = []
        state.diagnostics = []
        state._slots = list(base_messages) if slots is None else cast("list[Message | None]", slots)
        state._shared = False
        # Taken over, not copied; a list without tombstones is a valid _data.
        state._data = cast("list[dict[str, Any] | None] | None", base_data)
        state._lineage = lineage if lineage is not None and base_data is not None else object()
        state._tombstones = 0
        state._index = None
        state._data_viewed = base_data is not None  # the previous state's views may read it
        return state

    # -- views -----------------------------------------------------------------------------------
    @property
    def base_messages(self) -> list[Message]:
        """The messages loaded at Turn start (do not mutate)."""
        base = self._base
        if base is None:
            base = self._base = self._slots[: self._base_len]  # type: ignore[assignment]  # an intact prefix
        return base  # type: ignore[return-value]

    @property
    def base_length(self) -> int:
        """``len(base_messages)``, in O(1)."""
        return self._base_len

    def base_ends(self) -> tuple[Message, Message] | None:
        """The first and last message of the base (``None`` when empty), in O(1)."""
        if not self._base_len:
            return None
        base = self._base if self._base is not None else self._slots
        return base[0], base[self._base_len - 1]  # type: ignore[return-value]  # no tombstone in a base

    @property
    def events(self) -> list[MessageEvent]:
        """Every event emitted in this Turn, in order (do not mutate)."""
        return self._events

    @property
    def next_messages(self) -> list[Message]:
        """``base_messages + SUM(events)``; O(1) unless removals are pending compaction."""
        if self._limit is not None:
            self._unshare()
        if self._tombstones:
            self._compact()
        return self._slots  # type: ignore[return-value]  # no None left after compaction

    def __len__(self) -> int:
        if self._limit is not None:
            return self._limit
        return len(self._slots) - self._tombstones

    def to_llm_messages(self) -> list[dict[str, Any]]:
        """The provider-neutral message dicts (``data``) of ``next_messages``, in order.

        The list is new (one C-level copy) but the dicts are the messages' own ``data``, shared
        and read-only: copying each one cost a Python allocation per message and step (about
        2 ms, plus the garbage collection it set off, at 10,000 messages), and a shallow copy
        never protected the nested content anyway. Model adapters build their wire format from
        it without changing it; change the conversation only through :meth:`emit`.
        """
        return LlmMessages(self._llm_data(), self._lineage)

    def llm_view(self) -> LlmView:
        """The same messages as :meth:`to_llm_messages` as a read-only :class:`LlmView`: no
        copy, so building a model request does not grow with the history (the turn loop's)."""
        data = self._llm_data()
        self._data_viewed = True
        return LlmView(data, len(data), self._lineage)

    @property
    def lineage(self) -> object:
        """The current append-only run of :meth:`to_llm_messages` (see :class:`LlmMessages`)."""
        return self._lineage

    def detach_llm_messages(self) -> list[dict[str, Any]]:
        """Hand over the list behind :meth:`to_llm_messages` (for the next Turn's state).

        Used by the fold-commit, which passes it to :meth:`adopt` instead of copying it. This
        state stays fully usable: it builds a new list if it is asked for one again.
        """
        data = self._llm_data()
        self._data = None
        return data

    def detach_messages(self, snapshot: list[Message]) -> list[Message]:
        """Hand over the list behind :attr:`next_messages` (for the next Turn's state).

        ``snapshot`` must be an equal list that nobody changes (the committed base); this state
        reads it from now on and copies it before its next change, so it stays fully usable.
        Used by the fold-commit with :meth:`adopt`: one list copy per Turn instead of two.
        """
        slots = self.next_messages
        self.base_messages  # noqa: B018 - materialised: the lazy base is a prefix of the list handed on
        self._slots = snapshot  # type: ignore[assignment]  # a list without tombstones is valid
        self._shared = True
        self._frozen = 0
        return slots

    def successor(self) -> ConversationState:
        """The state the next Turn starts from: ``base_messages`` = this state's ``next_messages``,
        no events — built without copying the history.

        The successor takes over this state's message list (its base is a prefix of it, which only
        grows at its end, and which it copies before a ``replace``/``remove``), its data list
        and its lineage (:class:`LlmMessages`). This state keeps the first ``len`` entries as its
        view and copies them out if it is ever used again. :meth:`committed_prefix` of the
        successor is the snapshot the store keeps. Used by the fold-commit.
        """
        slots = self.next_messages
        length = len(slots)
        lineage = self._lineage
        data = self.detach_llm_messages()
        # This state's own base stays a lazy prefix: the successor never changes those entries.
        successor = ConversationState.__new__(ConversationState)
        successor._base = None
        successor._base_len = length
        successor._events = []
        successor.diagnostics = []
        successor._slots = slots  # type: ignore[assignment]  # compacted: no None
        successor._data = data  # type: ignore[assignment]  # compacted: no None
        successor._data_viewed = True  # this state's views may read it
        successor._lineage = lineage
        successor._tombstones = 0
        successor._index = None
        successor._shared = False
        successor._frozen = length
        successor._limit = None
        self._limit = length
        self._index = None
        return successor

    def committed_prefix(self) -> MessagePrefix:
        """The base as a :class:`MessagePrefix` (no copy while the base is a prefix of the list)."""
        if self._base is None:
            return MessagePrefix(self._slots, self._base_len)  # type: ignore[arg-type]
        return MessagePrefix(self._base)

    def _unshare(self) -> None:
        # This state handed its list to a successor, which may have appended to it since.
        assert self._limit is not None
        self._slots = self._slots[: self._limit]
        self._limit = None
        self._frozen = 0
        self._shared = False

    def _llm_data(self) -> list[dict[str, Any]]:
        if self._limit is not None:
            self._unshare()
        if self._tombstones:
            self._compact()
        if self._data is None:
            self._data = [m.data for m in self._slots]  # type: ignore[union-attr]
            self._lineage = object()
            self._data_viewed = False
        return self._data  # type: ignore[return-value]  # no None left after compaction

    def get(self, message_id: str) -> Message | None:
        """The first message with ``message_id``, or None."""
        if self._limit is not None:
            self._unshare()
        positions = self._ensure_index().get(message_id)
        return self._slots[positions[0]] if positions else None

    # -- mutation ----------------------------------------------------------------------------------
    def emit(self, event: MessageEvent) -> Diagnostic | None:
        """Record ``event`` and apply it; a missing target returns (and keeps) a warning."""
        if self._limit is not None:
            self._unshare()
        event_index = len(self._events)
        self._events.append(event)
        diagnostic = self._apply(event, event_index)
        if diagnostic is not None:
            self.diagnostics.append(diagnostic)
        return diagnostic

    def emit_all(self, events: Iterable[MessageEvent]) -> list[Diagnostic]:
        """Emit several events; return the warnings they produced."""
        found = (self.emit(event) for event in events)
        return [d for d in found if d is not None]

    def _apply(self, event: MessageEvent, event_index: int) -> Diagnostic | None:
        if self._shared:
            self._slots = list(self._slots)
            self._shared = False
        if event.type == "append":
            assert event.message is not None
            self._slots.append(event.message)
            if self._data is not None:
                self._data.append(event.message.data)
            if self._index is not None:
                self._index_add(self._index, event.message.id, len(self._slots) - 1)
            return None
        if self._base is None:  # the base stops being a prefix of the list
            self._base = self._slots[: self._base_len]  # type: ignore[assignment]
        if self._frozen:  # others rely on the list's entries: change a copy
            self._slots = list(self._slots)
            self._frozen = 0
        if event.type == "truncate":
            self._slots = []
            self._data = None
            self._lineage = object()
            self._index = None
            self._tombstones = 0
            return None
        index = self._ensure_index()
        target = event.target_id or ""
        positions = index.get(target)
        if not positions:
            return target_not_found(event, event_index)
        position = positions.pop(0)
        if not positions:
            del index[target]
        if self._data is not None and self._data_viewed:  # views read the first entries: copy
            self._data = list(self._data)
            self._data_viewed = False
        if event.type == "replace":
            assert event.message is not None
            self._slots[position] = event.message
            if self._data is not None:
                self._data[position] = event.message.data
                self._lineage = object()
            self._index_add(index, event.message.id, position)
        else:
            self._slots[position] = None
            if self._data is not None:
                self._data[position] = None
                self._lineage = object()
            self._tombstones += 1
        return None

    # -- internals ---------------------------------------------------------------------------------
    @staticmethod
    def _index_add(index: dict[str, list[int]], message_id: str, position: int) -> None:
        positions = index.get(message_id)
        if positions is None:
            index[message_id] = [position]
        elif positions[-1] < position:
            positions.append(position)
        else:  # a replace moved this id before a later duplicate
            bisect.insort(positions, position)

    def _ensure_index(self) -> dict[str, list[int]]:
        if self._index is None:
            index: dict[str, list[int]] = {}
            for position, message in enumerate(self._slots):
                if message is not None:
                    index.setdefault(message.id, []).append(position)
            self._index = index
        return self._index

    def _compact(self) -> None:
        self._slots = [m for m in self._slots if m is not None]
        if self._data is not None:
            self._data = [d for d in self._data if d is not None]
            self._lineage = object()
            self._data_viewed = False
        self._tombstones = 0
        self._index = None  # positions moved; rebuilt on the next replace/remove

    def __repr__(self) -> str:
        return (
            f"ConversationState(base={self._base_len}, events={len(self._events)}, "
            f"next={len(self)})"
        )


def same_messages(left: Sequence[Message], right: Sequence[Message]) -> bool:
    """True when both sequences hold equal records (compared through ``to_dict``)."""
    return len(left) == len(right) and all(
        a is b or a.to_dict() == b.to_dict() for a, b in zip(left, right, strict=True)
    )
