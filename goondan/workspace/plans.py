"""Pure planning for the conversation store: what a commit writes, what recovery does.

Nothing here touches a file. :class:`~goondan.workspace.store.InstanceStore` asks
:func:`plan_commit` how to fold a turn into ``base.jsonl`` and :func:`plan_recovery` what to
do with the leftovers of an interrupted turn; ``goondan fold --dry-run`` shows the same
recovery plan. Keeping the decisions pure lets them be tested without a disk, and lets another
:class:`~goondan.workspace.store.ConversationStore` implementation reuse them. The reasoning
about crashes is in the docstring of ``goondan/workspace/store.py`` and in docs/conversations.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from goondan.conversation.messages import Message, MessageEvent
from goondan.conversation.repair import count_tool_results, repair_tool_pairs
from goondan.conversation.state import ConversationState, MessagePrefix
from goondan.errors import Diagnostic

__all__ = [
    "Append",
    "CommitPlan",
    "Noop",
    "RecoveryPlan",
    "Rewrite",
    "duplicate_ids",
    "plan_commit",
    "plan_recovery",
]

RECOVERED = "W_WORKSPACE_RECOVERED"
REPAIRED = "W_WORKSPACE_REPAIRED"
DUPLICATE_ID = "W_WORKSPACE_DUPLICATE_ID"


@dataclass(frozen=True)
class Noop:
    """``base.jsonl`` already holds the state: nothing to write."""


@dataclass(frozen=True)
class Append:
    """The turn only appended: add ``messages`` (the new ones) to the end of ``base.jsonl``."""

    messages: list[Message]


@dataclass(frozen=True)
class Rewrite:
    """Anything else (a replace, a removal, another base): write ``messages`` as the whole file."""

    messages: list[Message]


CommitPlan = Append | Rewrite | Noop


def plan_commit(
    state: ConversationState, on_disk: Sequence[Message] | MessagePrefix | None
) -> CommitPlan:
    """How to fold ``state`` into a base file holding ``on_disk`` (None: not read yet).

    O(new messages) for an appending turn: the bases are compared by length and ends only."""
    events = state.events
    if on_disk is not None and not events and _same_base(state, on_disk):
        return Noop()
    new = state.next_messages
    old_length = state.base_length
    if (events and on_disk is not None and _same_base(state, on_disk)
            and len(new) == old_length + len(events)
            and all(e.type == "append" for e in events)):
        return Append(new[old_length:])
    return Rewrite(new)


def _same_base(state: ConversationState, on_disk: Sequence[Message] | MessagePrefix) -> bool:
    # States come from load()/commit(), which share the Message objects, so comparing the ends
    # by identity is enough to know the on-disk base is the state's base.
    length = state.base_length
    if length != len(on_disk):
        return False
    ends = state.base_ends()
    return ends is None or (ends[0] is on_disk[0] and ends[1] is on_disk[length - 1])


@dataclass
class RecoveryPlan:
    """What recovery does to a base + leftover events (shared by ``load`` and
    ``fold --dry-run``)."""

    state: ConversationState
    already_committed: int = 0
    leftover_events: int = 0
    synthetic_results: int = 0
    dropped_results: int = 0  # orphan or duplicate tool results removed by the repair
    diagnostics: list[Diagnostic] = field(default_factory=list)
    repairs: list[MessageEvent] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.state.events)


def plan_recovery(base: list[Message], leftovers: list[MessageEvent], *, events_file: str = "",
                  base_file: str = "", keep_open_calls: bool = False) -> RecoveryPlan:
    """Fold leftovers (minus an already-committed prefix) onto base, then repair tool pairs.

    ``keep_open_calls``: leave the last assistant message's unanswered calls unanswered (a
    resumed turn decides them, docs/conversations.md "Durability").
    """
    skip = _committed_prefix(base, leftovers)
    state = ConversationState(base)
    plan = RecoveryPlan(state, already_committed=skip, leftover_events=len(leftovers))
    if leftovers:
        turns = sorted({str(e.extra.get("turnId")) for e in leftovers if e.extra.get("turnId")})
        plan.diagnostics.append(Diagnostic(
            code=RECOVERED, severity="warning", file=events_file or None,
            message=f"recovered {len(leftovers)} leftover event(s) of an interrupted turn; "
            f"{len(leftovers) - skip} folded into base.jsonl"
            + (f", {skip} were already committed" if skip else ""),
            extra={"events": len(leftovers), "alreadyCommitted": skip, "turnIds": turns},
        ))
        for event in leftovers[skip:]:
            state.emit(event)
        plan.diagnostics.extend(state.diagnostics)
    repairs = repair_tool_pairs(state.next_messages, keep_open_calls=keep_open_calls)
    if repairs:
        present = {m.id for m in state.next_messages}
        results_before = count_tool_results(state.next_messages)
        plan.synthetic_results = sum(
            1 for e in repairs
            if e.type == "append" and e.message is not None and e.message.id not in present
        )
        state.emit_all(repairs)
        plan.dropped_results = (
            results_before + plan.synthetic_results - count_tool_results(state.next_messages)
        )
        parts = []
        if plan.synthetic_results:
            parts.append(
                f"added {plan.synthetic_results} synthetic E_TURN_INTERRUPTED tool result(s) "
                "for tool calls that never got one"
            )
        if plan.dropped_results:
            parts.append(f"dropped {plan.dropped_results} orphan or duplicate tool result(s)")
        plan.diagnostics.append(
            Diagnostic(
                code=REPAIRED,
                severity="warning",
                file=base_file or None,
                message="; ".join(parts) or "reordered tool results",
                extra={
                    "syntheticResults": plan.synthetic_results,
                    "droppedResults": plan.dropped_results,
                },
            )
        )
        plan.repairs = repairs
    return plan


def _committed_prefix(base: list[Message], events: list[MessageEvent]) -> int:
    """How many leading append events are already the tail of base (an interrupted delta commit).

    Only the leading run of appends can have been delta-committed (a commit with any other
    event rewrites the file, see ``_finish_interrupted_rewrite``); looking at that run rather
    than requiring every event to be an append keeps this exact even if the file ever held a
    committed turn followed by more events.
    """
    ids: list[str] = []
    for event in events:
        if event.type != "append" or event.message is None:
            break
        ids.append(event.message.id)
    if not ids or not base:
        return 0
    first = ids[0]
    for start in range(len(base) - 1, max(-1, len(base) - len(ids) - 1), -1):
        if base[start].id == first:
            count = len(base) - start
            if [m.id for m in base[start:]] == ids[:count]:
                return count
            return 0
    return 0


def duplicate_ids(base: list[Message], file: str) -> list[Diagnostic]:
    """A ``W_WORKSPACE_DUPLICATE_ID`` warning when message ids repeat in ``base`` (else none)."""
    seen: set[str] = set()
    duplicates: list[str] = []
    for message in base:
        if message.id in seen:
            duplicates.append(message.id)
        seen.add(message.id)
    if not duplicates:
        return []
    return [Diagnostic(
        code=DUPLICATE_ID, severity="warning", file=file,
        message=f"{len(duplicates)} message id(s) occur more than once (first: {duplicates[0]!r}); "
        "replace/remove events affect only the first occurrence",
        extra={"ids": duplicates[:20]},
    )]
