"""The storage contract: what a state root holds, as every backend provides it (docs/storage.md
"Storage contract").

The JSONL state root (``goondan/workspace/``) is the reference backend and the default: its
classes conform to these Protocols directly (:class:`~goondan.workspace.InstanceStore`,
:class:`~goondan.workspace.journal.TurnJournal`,
:class:`~goondan.workspace.approvals.ApprovalStore`) or through the thin adapters of
:mod:`goondan.storage.jsonl` (the durable input queues, instance listing). The PostgreSQL
backend (``goondan/storage/postgres/``, extra ``goondan[postgres]``) implements the same
Protocols; one contract test suite (``tests/storage/contract/``) runs against both.

What a backend holds, per workspace:

* **instances** — per (agent, instanceKey): metadata (status, createdAt, updatedAt), the
  conversation (base messages + the running turn's events; :class:`ConversationStore`), the
  turn journal (:class:`TurnLog`: turn started, tool calls started, approvals requested,
  parked, resumed, ended), extension state. One writer at a time: a second
  :meth:`StorageBackend.open_instance` of an open instance raises ``E_INSTANCE_LOCKED``.
* **input queues** (:class:`InputQueue`) — the Swarm's inbox and each Connection's inbox:
  inputs enqueued with their id (a repeated id is refused), pending ones listed in acceptance
  order, each started exactly once (a reservation, then a final start: the ack).
* **approvals** (:class:`ApprovalIndex`) — one record per tool call that waits for a person;
  the first decision wins.

Positions: the conversation is appended at an expected position. A commit folds the turn
onto the base it was loaded from (``state``'s committed prefix); a backend whose base moved
since (another writer got in) refuses the commit with :data:`STORE_CONFLICT` instead of
overwriting it. The JSONL backend cannot see that happen (its instance lock excludes a second
writer); the PostgreSQL backend checks the position in the commit's transaction.

Methods are synchronous and may block; the runtime calls them in worker threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from goondan.errors import WorkspaceError
from goondan.types import JsonObject
from goondan.workspace.approvals import Approval
from goondan.workspace.inbox import InboxEntry
from goondan.workspace.journal import OpenTurn
from goondan.workspace.store import ConversationStore, Status

__all__ = [
    "STORE_CONFLICT",
    "STORE_INSTANCE_EXISTS",
    "Approval",
    "ApprovalIndex",
    "ConversationStore",
    "InboxEntry",
    "InputQueue",
    "InstanceSnapshot",
    "InstanceStorage",
    "OpenTurn",
    "QueueRecord",
    "Status",
    "StorageBackend",
    "TurnLog",
    "instance_exists",
    "store_conflict",
]

STORE_CONFLICT = "E_STORE_CONFLICT"


STORE_INSTANCE_EXISTS = "E_STORE_INSTANCE_EXISTS"


def instance_exists(workspace_id: str, agent: str, key: str, where: str) -> WorkspaceError:
    """The error of :meth:`StorageBackend.restore` onto an existing instance."""
    return WorkspaceError(
        f"instance {agent}:{key} of workspace {workspace_id} already exists in {where}",
        code=STORE_INSTANCE_EXISTS, location=where,
        suggestion="pass --replace to overwrite it with the copy (its history is lost)",
    )


def store_conflict(what: str, *, location: str | None = None) -> WorkspaceError:
    """The error of a write whose expected position (or lease) is no longer the store's."""
    return WorkspaceError(
        f"{what}: another writer changed the store since this one read it; nothing was written",
        code=STORE_CONFLICT, location=location,
        suggestion="reopen the instance (the other writer's history is kept) and retry",
    )


@dataclass
class InstanceSnapshot:
    """One instance as stored, read without its lock (:meth:`StorageBackend.snapshot`) or
    written whole (:meth:`StorageBackend.restore`): what ``goondan inspect`` shows of a store
    and what ``goondan store copy`` moves between stores.

    Bodies are the JSON text both backends store (a line of ``base.jsonl`` / a row of
    ``goondan_messages``, without its newline), so two stores hold the same instance exactly
    when their snapshots are equal. ``extensions`` is keyed by the stored name
    (:func:`~goondan.workspace.paths.extension_file_name`). ``needs_fold`` names what a JSONL
    instance still has to recover (a torn line, an interrupted rewrite) — copy it only after
    ``goondan fold``; ``None`` when it is clean."""

    agent_name: str
    instance_key: str
    metadata: dict[str, Any]
    messages: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    journal: list[str] = field(default_factory=list)
    extensions: dict[str, str] = field(default_factory=dict)
    needs_fold: str | None = None

    def content(self) -> dict[str, Any]:
        """What a copy must keep equal (``needs_fold`` is about the source, not the data)."""
        return {"metadata": self.metadata, "messages": self.messages, "events": self.events,
                "journal": self.journal, "extensions": self.extensions}


@dataclass(frozen=True)
class QueueRecord:
    """One input a queue accepted (:meth:`InputQueue.records`), as ``goondan store copy`` moves
    it: a pending one whole; one whose start is final by its id alone (its text lives in the
    conversation now; the id keeps a repeated input refused)."""

    id: str
    started: bool
    agent: str = ""
    instance_key: str = ""
    accepted_at: str = ""
    event: JsonObject | None = None


@runtime_checkable
class TurnLog(Protocol):
    """The turn journal of one instance (records of ``goondan/workspace/journal.py``)."""

    def append(self, record: JsonObject) -> None:
        """Append one record durably (it survives a SIGKILL once this returns)."""
        ...

    def records(self) -> list[JsonObject]:
        """Every record, oldest first."""
        ...

    def open_turn(self) -> OpenTurn | None:
        """The turn started and not ended, or None."""
        ...

    def clear(self) -> None:
        """Forget every record (the turn ended and its conversation is committed)."""
        ...


@runtime_checkable
class InstanceStorage(ConversationStore, Protocol):
    """One open instance: its conversation, journal, metadata and extension state."""

    agent_name: str
    instance_key: str
    workspace_id: str

    @property
    def journal(self) -> TurnLog:
        """The instance's turn journal, usable while the instance is open."""
        ...

    @property
    def metadata(self) -> dict[str, Any]:
        """``status``, ``agentName``, ``instanceKey``, ``createdAt``, ``updatedAt`` (a copy)."""
        ...

    @property
    def status(self) -> str:
        ...

    @property
    def closed(self) -> bool:
        ...

    def __enter__(self) -> Any:
        ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Close the instance."""
        ...


@runtime_checkable
class InputQueue(Protocol):
    """A durable inbox of inputs (the Swarm's, or one Connection's).

    Exactly-once start: an input is *pending* from :meth:`append_entry` until its start is
    claimed; :meth:`claim` reserves it for one owner (False for everyone else while the owner
    lives), :meth:`confirm` makes the start final (the ack: the input is durable in the
    conversation). A reservation whose owner died is taken over by the next claim."""

    def open_entries(self) -> list[InboxEntry]:
        """Open the queue; the pending entries (accepted, not started), in acceptance order."""
        ...

    def seen(self, input_id: str) -> bool:
        """True when an input with this id was accepted (pending or started)."""
        ...

    def append_entry(self, event: JsonObject, agent: str, instance_key: str) -> InboxEntry:
        """Enqueue ``event`` (a wire dict with an ``id``) for (agent, instanceKey), durably."""
        ...

    def claim(self, agent: str, instance_key: str, input_id: str, *, owner: str | None = None,
              written: bool = False) -> bool:
        """Reserve the start of ``input_id`` for ``owner`` (final at once without one); True
        when this caller should start it. ``written``: the caller's conversation already holds
        the input, so a dead owner's reservation becomes final instead of being taken over."""
        ...

    def confirm(self, agent: str, instance_key: str, input_id: str) -> None:
        """Make the start of ``input_id`` final (the ack)."""
        ...

    def take(self, agent: str, instance_key: str, *, owner: str) -> InboxEntry | None:
        """Reserve the oldest pending entry of (agent, instanceKey) for ``owner``; None when
        there is none (concurrent takers never get the same entry)."""
        ...

    def records(self) -> list[QueueRecord]:
        """Every accepted input, in acceptance order (a reservation counts as pending)."""
        ...

    def restore(self, record: QueueRecord) -> bool:
        """Add ``record`` as given, after the others (``goondan store copy``); False, changing
        nothing, when an input with its id was accepted already."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class ApprovalIndex(Protocol):
    """The approvals of one workspace (docs/approvals.md)."""

    def request(self, *, agent: str, instance_key: str, turn_id: str, tool_call_id: str,
                tool: str, args: JsonObject, reason: str | None = None,
                timeout_ms: int | None = None, requested_at: str | None = None) -> Approval:
        ...

    def get(self, approval: str, *, now: datetime | None = None) -> Approval | None:
        ...

    def list(self, *, status: str | None = None, agent: str | None = None,
             instance_key: str | None = None, now: datetime | None = None) -> list[Approval]:
        ...

    def decide(self, approval: str, *, approve: bool, by: str, via: str,
               args: JsonObject | None = None, note: str | None = None,
               reason: str | None = None,
               now: datetime | None = None) -> tuple[Approval, bool]:
        ...

    def remove_instance(self, agent: str, instance_key: str) -> int:
        ...

    def restore(self, request: JsonObject, decision: JsonObject | None) -> bool:
        """Store an approval exactly as given (``goondan store copy``); False, changing
        nothing, when one with its id exists."""
        ...


class StorageBackend(Protocol):
    """A deployment's store: a JSONL state root or a PostgreSQL database."""

    def open_instance(self, workspace_id: str, agent_name: str, instance_key: str, *,
                      create: bool = True) -> InstanceStorage:
        """Open (creating it if ``create``) and lock the instance; call ``load()`` next.
        ``E_WORKSPACE_INSTANCE_NOT_FOUND`` when missing and not ``create``; ``E_INSTANCE_LOCKED``
        when another opener holds it."""
        ...

    def instances(self, workspace_id: str) -> Iterator[dict[str, Any]]:
        """The metadata of every instance of the workspace (``agentName``, ``instanceKey``,
        ``status``, ``createdAt``, ``updatedAt``)."""
        ...

    def delete_instance(self, workspace_id: str, agent_name: str, instance_key: str) -> bool:
        """Delete an instance that nobody holds open; False when there was none."""
        ...

    def open_turns(self, workspace_id: str) -> list[tuple[str, str, OpenTurn]]:
        """(agent, instanceKey, open turn) of every instance whose journal has an open turn —
        the interrupted-turn markers: a starting swarm resumes the ones not parked and wakes the
        parked ones whose approvals were decided. Read without the instances' locks; an
        unreadable journal is left out (it is reported when its instance opens)."""
        ...

    def interrupted_instances(self, workspace_id: str) -> list[tuple[str, str]]:
        """(agent, instanceKey) of the instances with an open turn that is not parked."""
        ...

    def approvals(self, workspace_id: str) -> ApprovalIndex:
        ...

    def workspaces(self) -> list[str]:
        """The ids of the workspaces that hold an instance, an approval or a queue, sorted."""
        ...

    def queue_scopes(self, workspace_id: str) -> list[str]:
        """The scopes of the workspace's queues that hold any input, sorted."""
        ...

    def snapshot(self, workspace_id: str, agent_name: str,
                 instance_key: str) -> InstanceSnapshot | None:
        """The instance as stored, read without taking its lock (a running instance may be
        read: its committed messages plus the events written so far); None when missing."""
        ...

    def version(self, workspace_id: str, agent_name: str, instance_key: str) -> str | None:
        """A cheap token (one query, or a few ``stat`` calls) that changes when the instance's
        committed messages, pending events or metadata change; None when it is missing. What a
        reader polls before it reads the :meth:`snapshot` again (the studio's live follow)."""
        ...

    def restore(self, workspace_id: str, snapshot: InstanceSnapshot, *,
                replace: bool = False) -> None:
        """Write the instance exactly as ``snapshot`` holds it, in one step (PostgreSQL: one
        transaction; JSONL: under the instance's lock). An existing instance is
        ``E_STORE_INSTANCE_EXISTS`` unless ``replace``; one held open is ``E_INSTANCE_LOCKED``."""
        ...

    def queue(self, workspace_id: str, scope: str,
              accept: Callable[[InboxEntry], bool] | None = None) -> InputQueue:
        """The input queue ``scope`` of the workspace: ``inputs/<swarm>`` (the Swarm's inbox)
        or ``connections/<swarm>/<connection>`` (a Connection's). ``accept`` may refuse an
        entry read back (a Connection's refuses an event that no longer parses): it is
        neither pending nor taken."""
        ...

    def close(self) -> None:
        ...
