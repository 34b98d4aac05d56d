"""InstanceStore: the durable conversation of one (agent, instanceKey).

:class:`ConversationStore` is the interface the runtime uses (another engine may bring its own
storage); :class:`InstanceStore` implements it on files. Write protocol (docs/conversations.md):

* **During a Turn** each emitted event is appended to ``events.jsonl`` as one ``write`` on an
  ``O_APPEND`` descriptor, with the Turn's ``turnId``. The record reaches the kernel before
  :meth:`InstanceStore.append_event` returns, which is all a SIGKILL needs; it is not fsync-ed
  per event (pass ``fsync_events=True`` to pay for power-loss safety of in-flight events).
* **At Turn end** :meth:`InstanceStore.commit` folds the events into ``base.jsonl``: a *delta
  append* of the new lines when the Turn only appended, otherwise an *atomic rewrite* (temp file
  in the same directory + fsync + rename + directory fsync). ``events.jsonl`` is emptied only
  after the base write succeeded.
* **At open** :meth:`InstanceStore.load` recovers: a torn last line is dropped (warning), leftover
  events are folded into base at once (warning ``W_WORKSPACE_RECOVERED``), and missing tool
  results are filled in (:func:`goondan.conversation.repair_tool_pairs`) — except those of the
  last assistant message when the caller resumes that turn (``load(keep_open_calls=True)``).
* **The turn journal** ``turn.jsonl`` (:attr:`InstanceStore.journal`,
  ``goondan/workspace/journal.py``) records a turn's durable points (started, tool calls
  started, parked, resumed, ended) with the same write policy as ``events.jsonl``.
* **Status** (:meth:`InstanceStore.set_status`, twice per Turn) is advisory: ``metadata.json`` is
  replaced atomically (temp file + rename) but not fsync-ed, since nothing depends on it for
  correctness. After a power loss it may be stale — a ``processing`` left by a dead holder is
  reset by the first :meth:`~InstanceStore.load` — or, on file systems that do not order a rename
  after the data it names, empty: an empty ``metadata.json`` counts as missing and is rebuilt
  (warning ``W_WORKSPACE_METADATA_REBUILT``). The identity fields are written once, at creation,
  and that write is fsync-ed.

Exactly-once across a crash between "base written" and "events emptied":

* delta append — the committed messages are then a suffix of ``base.jsonl`` equal (by id) to a
  prefix of the leftover append events; recovery skips that prefix. This relies on the invariant
  that message ids are unique within an instance (ids are stable forever, docs/conversations.md),
  and on ``events.jsonl`` holding exactly what a commit folds (recovery logs its appended repairs).
* rewrite — before the rename the old base is hard-linked (or copied) to ``base.jsonl.prev``. If
  that file exists at open and differs in content from ``base.jsonl``, the rename happened, so the
  leftover events are already in base and are discarded instead of replayed.

A write that fails half way is cut back (``append_or_undo``); events a commit could not clear are
cleared before the next append, so ``events.jsonl`` never mixes a folded turn with a later one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

from goondan.conversation.codec import decode_events, decode_messages, encode_event, encode_message
from goondan.conversation.messages import MessageEvent
from goondan.conversation.state import ConversationState, MessagePrefix
from goondan.errors import Diagnostic, WorkspaceCorruptError, WorkspaceError
from goondan.text import clean_json
from goondan.types import JsonValue, now_iso
from goondan.workspace.files import (
    FILE_MODE,
    append_or_undo,
    atomic_write,
    fsync_dir,
    io_error,
    private_dirs,
    read_bytes,
    tighten,
    write_all,
)
from goondan.workspace.journal import TurnJournal
from goondan.workspace.locks import InstanceLock
from goondan.workspace.paths import (
    InstancePaths,
    StateLayout,
    collision_dir_name,
    instance_dir_name,
)
from goondan.workspace.plans import (
    Append,
    Noop,
    RecoveryPlan,
    Rewrite,
    duplicate_ids,
    plan_commit,
    plan_recovery,
)

__all__ = [
    "ConversationStore",
    "InstanceStore",
    "RecoveryPlan",
    "Status",
    "locate_instance",
    "metadata_matches",
    "plan_recovery",
    "preview_recovery",
    "read_metadata",
]

Status = Literal["idle", "processing", "waitingForApproval"]
COMMIT_COMPLETED = "W_WORKSPACE_COMMIT_COMPLETED"
METADATA_REBUILT = "W_WORKSPACE_METADATA_REBUILT"


class ConversationStore(Protocol):
    """The durable conversation of one agent instance, as the runtime uses it.

    :class:`InstanceStore` implements it on files; an engine with other storage provides its
    own (tests use an in-memory one, ``tests/support/memory_store.py``). Methods are
    synchronous and may block: the runtime calls them in a worker thread where it matters.
    """

    recovery_diagnostics: list[Diagnostic]

    def load(self, *, keep_open_calls: bool = False) -> ConversationState:
        """The conversation to continue from: leftovers folded, tool pairs repaired, no events.

        ``keep_open_calls``: leave the last assistant message's unanswered calls unanswered.
        """
        ...

    def append_event(self, event: MessageEvent, turn_id: str) -> None:
        """Record one event of the running turn durably before the turn goes on."""
        ...

    def append_events(self, events: Iterable[MessageEvent], turn_id: str) -> None:
        """Record several events as one write (all or nothing after a crash)."""
        ...

    def commit(self, state: ConversationState) -> ConversationState:
        """Fold the turn's events into the base; return the state the next turn starts from."""
        ...

    def set_status(self, status: Status) -> None:
        """Record ``processing`` (a turn runs) or ``idle``; advisory."""
        ...

    def load_extension_state(self, name: str) -> JsonValue | None:
        """The saved state of extension ``name``, or None."""
        ...

    def save_extension_state(self, name: str, value: JsonValue) -> bool:
        """Save an extension's state; False when it was unchanged (nothing written)."""
        ...

    def close(self) -> None:
        """Release the storage (idempotent)."""
        ...


def read_metadata(paths: InstancePaths) -> dict[str, Any] | None:
    """``metadata.json`` as a dict; None when absent or empty; ``WorkspaceCorruptError`` when
    invalid.

    Empty counts as absent: status writes are not fsync-ed (see the module docstring), so a power
    loss can leave a zero-length file (or, on some file systems, one of NUL bytes) behind.
    """
    raw = read_bytes(paths.metadata)
    if not raw.strip(b"\x00 \t\r\n"):
        return None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WorkspaceCorruptError(
            f"{paths.metadata}: invalid JSON ({exc})", location=str(paths.metadata),
            suggestion="fix or remove the file (keep a copy first)",
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("instanceKey"), str):
        raise WorkspaceCorruptError(
            f"{paths.metadata}: expected an object with a string instanceKey",
            location=str(paths.metadata), suggestion="fix or remove the file (keep a copy first)",
        )
    return data


def metadata_matches(meta: dict[str, Any], agent_name: str, instance_key: str) -> bool:
    """True when ``meta`` describes (agent, key); also accepts the reference ``agent:key`` form."""
    key = meta.get("instanceKey")
    agent = meta.get("agentName")
    if agent not in (None, agent_name):
        return False
    return key == instance_key or key == f"{agent_name}:{instance_key}"


def locate_instance(layout: StateLayout, workspace_id: str, agent_name: str,
                    instance_key: str) -> tuple[InstancePaths, bool]:
    """The directory for (agent, key) and whether it exists yet (docs/conversations.md
    "Where state lives", plus collisions)."""
    candidates = [layout.instance(workspace_id, name) for name in (
        instance_dir_name(agent_name, instance_key), collision_dir_name(agent_name, instance_key))]
    # Look at every candidate before picking a free one: the pair's directory may be the
    # collision name even when the plain name is free again (its owner was deleted).
    free: InstancePaths | None = None
    unclaimed: InstancePaths | None = None
    for paths in candidates:
        if not paths.dir.is_dir():
            free = free or paths
            continue
        meta = read_metadata(paths)
        if meta is None:
            unclaimed = unclaimed or paths  # an interrupted creation
        elif metadata_matches(meta, agent_name, instance_key):
            return paths, True
    if unclaimed is not None:
        return unclaimed, True
    if free is not None:
        return free, False
    raise WorkspaceError(
        f"no free directory name for agent {agent_name!r} instance {instance_key!r}",
        code="E_WORKSPACE_COLLISION", location=str(layout.instances_dir(workspace_id)),
        suggestion="use an instance key that differs in its letters and digits",
    )


class InstanceStore:
    """Owns one instance directory while open (exclusive ``fcntl`` lock)."""

    def __init__(self, paths: InstancePaths, *, agent_name: str, instance_key: str,
                 workspace_id: str, lock: InstanceLock, fsync: bool = True,
                 fsync_events: bool = False) -> None:
        self.paths = paths
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.workspace_id = workspace_id
        self.recovery_diagnostics: list[Diagnostic] = []
        self._open_diagnostics: list[Diagnostic] = []  # found by _prepare, reported by load()
        self._lock = lock
        self._fsync = fsync
        self._fsync_events = fsync_events
        self._metadata: dict[str, Any] = {}
        self._base: MessagePrefix | None = None  # what base.jsonl holds, once loaded
        self._events_fd: int | None = None
        self._events_dirty = True  # unknown until load() has looked
        # True from the moment base.jsonl holds the events until events.jsonl is emptied; a
        # clear that failed is retried before anything else is appended, so events.jsonl never
        # mixes records already folded with records of a later turn.
        self._events_folded = False
        self._broken: str | None = None  # a write failed and could not be undone
        self._extension_cache: dict[str, bytes] = {}
        self._journal: TurnJournal | None = None

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, state_root: Path, workspace_id: str, agent_name: str, instance_key: str, *,
             create: bool = True, fsync: bool = True, fsync_events: bool = False) -> InstanceStore:
        """Lock (and if needed create) the instance directory; call :meth:`load` next."""
        layout = StateLayout(Path(state_root))
        try:
            paths, exists = locate_instance(layout, workspace_id, agent_name, instance_key)
            if not exists:
                if not create:
                    raise WorkspaceError(
                        f"no instance {instance_key!r} of agent {agent_name!r} in workspace "
                        f"{workspace_id}", code="E_WORKSPACE_INSTANCE_NOT_FOUND",
                        location=str(paths.dir),
                        suggestion="goondan instance list shows the existing instances",
                    )
                private_dirs(paths.dir)
        except OSError as exc:
            raise io_error(exc, layout.instances_dir(workspace_id), "create") from exc
        return cls.open_dir(paths, agent_name=agent_name, instance_key=instance_key,
                            workspace_id=workspace_id, fsync=fsync, fsync_events=fsync_events)

    @classmethod
    def open_dir(cls, paths: InstancePaths, *, agent_name: str, instance_key: str,
                 workspace_id: str = "", fsync: bool = True,
                 fsync_events: bool = False) -> InstanceStore:
        """Lock an instance directory found by other means (``goondan fold``, reference layouts)."""
        lock = InstanceLock(paths.lock, label=f"{agent_name}:{instance_key}")
        lock.acquire()
        store = cls(paths, agent_name=agent_name, instance_key=instance_key,
                    workspace_id=workspace_id, lock=lock, fsync=fsync, fsync_events=fsync_events)
        try:
            store._prepare()
        except BaseException:
            store.close()
            raise
        return store

    def _prepare(self) -> None:
        paths = self.paths
        try:
            private_dirs(paths.messages_dir)
            private_dirs(paths.extensions_dir)
            for file in (paths.base, paths.events):
                if not file.exists():
                    os.close(os.open(file, os.O_WRONLY | os.O_CREAT, FILE_MODE))
            # An instance written by an older version was 0644/0755: private from now on.
            tighten(paths.dir, paths.messages_dir, paths.extensions_dir, paths.base, paths.events,
                    paths.metadata, paths.lock, paths.journal)
            meta = read_metadata(paths)
            if meta is None:
                if paths.metadata.exists():
                    self._open_diagnostics.append(Diagnostic(
                        code=METADATA_REBUILT, severity="warning", file=str(paths.metadata),
                        message="metadata.json was empty (a status write cut short by a power "
                        "loss); it was rebuilt with a new createdAt",
                    ))
                now = now_iso()
                meta = {"status": "idle", "agentName": self.agent_name,
                        "instanceKey": self.instance_key, "createdAt": now, "updatedAt": now}
                # Written last: a directory with metadata.json is a complete instance.
                atomic_write(paths.metadata, _json_bytes(meta), fsync=self._fsync)
            self._metadata = meta
            self._events_fd = os.open(paths.events, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise io_error(exc, paths.dir, "prepare") from exc
        self._journal = TurnJournal.open(paths.dir, fsync=self._fsync_events)

    # -- properties ------------------------------------------------------------------------------
    @property
    def metadata(self) -> dict[str, Any]:
        """The parsed ``metadata.json`` (a copy)."""
        return dict(self._metadata)

    @property
    def status(self) -> str:
        return str(self._metadata.get("status", "idle"))

    @property
    def journal(self) -> TurnJournal:
        """The instance's turn journal (``turn.jsonl``), open while the store is."""
        if self._journal is None:
            self._require_open()
            raise WorkspaceError(f"instance {self.agent_name}:{self.instance_key} has no journal",
                                 code="E_WORKSPACE_CLOSED", suggestion="open the instance again")
        return self._journal

    # -- loading and recovery ----------------------------------------------------------------------
    def load(self, *, keep_open_calls: bool = False) -> ConversationState:
        """The conversation with leftovers folded and tool pairs repaired; events are empty.

        ``keep_open_calls``: the caller resumes the interrupted turn, so the tool calls of the
        last assistant message that have no result are left without one (the runtime decides
        what they get) instead of receiving synthetic ``E_TURN_INTERRUPTED`` results.
        """
        if self._base is not None and not self._events_dirty:
            return ConversationState.adopt(self._base.to_list())
        first_load = self._base is None
        self.recovery_diagnostics, self._open_diagnostics = self._open_diagnostics, []
        diagnostics = self.recovery_diagnostics
        paths = self.paths
        self._finish_interrupted_rewrite()
        try:
            paths.base_tmp.unlink(missing_ok=True)
        except OSError as exc:
            raise io_error(exc, paths.base_tmp, "remove") from exc

        base_file = decode_messages(read_bytes(paths.base), file=str(paths.base))
        diagnostics.extend(base_file.diagnostics)
        if base_file.torn or base_file.missing_newline:
            self._heal_tail(paths.base, base_file.valid_size, base_file.missing_newline)
        base = base_file.records
        diagnostics.extend(duplicate_ids(base, str(paths.base)))

        events_file = decode_events(read_bytes(paths.events), file=str(paths.events))
        diagnostics.extend(events_file.diagnostics)
        if events_file.torn or events_file.missing_newline:
            self._heal_tail(paths.events, events_file.valid_size, events_file.missing_newline)
        leftovers = events_file.records
        self._base = MessagePrefix(base)
        self._events_folded = False
        plan = plan_recovery(base, leftovers, events_file=str(paths.events),
                             base_file=str(paths.base), keep_open_calls=keep_open_calls)
        diagnostics.extend(plan.diagnostics)
        self._events_dirty = bool(leftovers)
        if plan.repairs and all(e.type == "append" for e in plan.repairs):
            # Logged like any turn's events, so that events.jsonl holds exactly what the delta
            # append below adds: a crash after it is then recognised (the base tail equals the
            # logged appends) instead of the leftovers being applied twice. Any prefix of these
            # appends is safe to replay. A repair that moves messages (remove + append) is not
            # logged — a torn prefix of it would drop the moved messages — and needs none: its
            # commit is an atomic rewrite, and a crash before the rename simply repairs again.
            turn_id = next((str(e.extra["turnId"]) for e in reversed(leftovers)
                            if e.extra.get("turnId")), "recovery")
            self.append_events(plan.repairs, turn_id)
        state = self.commit(plan.state)
        if first_load and self.status == "processing":
            # We hold the lock, so no Turn is running: the holder that wrote it died mid-Turn.
            self.set_status("idle")
        return state

    def _finish_interrupted_rewrite(self) -> None:
        prev = self.paths.base_prev
        if not os.path.lexists(prev):
            return
        if rewrite_committed(self.paths) and read_bytes(self.paths.events):
            self._clear_events()
            self.recovery_diagnostics.append(Diagnostic(
                code=COMMIT_COMPLETED, severity="warning", file=str(self.paths.events),
                message="the previous turn was committed to base.jsonl but its events were not "
                "cleared; they were discarded instead of being applied twice",
            ))
        try:
            prev.unlink(missing_ok=True)
        except OSError as exc:
            raise io_error(exc, prev, "remove") from exc

    def _heal_tail(self, path: Path, valid_size: int, missing_newline: bool) -> None:
        # A torn tail must go before the next append, or it would become a corrupt line in the
        # middle of the file.
        try:
            fd = os.open(path, os.O_WRONLY)
            try:
                if missing_newline:
                    os.lseek(fd, 0, os.SEEK_END)
                    write_all(fd, b"\n")
                else:
                    os.ftruncate(fd, valid_size)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise io_error(exc, path, "repair the end of") from exc

    # -- writing ---------------------------------------------------------------------------------
    def append_event(self, event: MessageEvent, turn_id: str) -> None:
        """Append one event record (with ``turnId``) to ``events.jsonl`` and flush it."""
        self._write_events(encode_event(event, turn_id))

    def append_events(self, events: Iterable[MessageEvent], turn_id: str) -> None:
        """Append several events in one write."""
        self._write_events(b"".join(encode_event(e, turn_id) for e in events))

    def _write_events(self, data: bytes) -> None:
        fd = self._require_open()
        if self._events_folded:
            self._clear_events()  # the last commit could not clear them; never mix turns
        try:
            append_or_undo(fd, data, fsync=self._fsync_events)
        except OSError as exc:
            self._fail(exc)
            raise io_error(exc, self.paths.events, "append to") from exc
        self._events_dirty = True

    def commit(self, state: ConversationState) -> ConversationState:
        """Fold ``state`` into ``base.jsonl`` (delta append or atomic rewrite), then clear events.

        Returns the state for the next Turn (base = the folded messages, no events).
        """
        self._require_open()
        plan = plan_commit(state, self._base)
        if isinstance(plan, Append):
            self._append_base(b"".join(encode_message(m) for m in plan.messages))
        elif isinstance(plan, Rewrite):
            self._rewrite_base(b"".join(encode_message(m) for m in plan.messages))
        if self._base is not None and isinstance(plan, Noop):
            # Nothing written: adopt() derives the lists (a fold with nothing to fold).
            committed = ConversationState.adopt(self._base.to_list())
        else:
            # No copy of the history: the next state takes over this state's message and data
            # lists, and its base — what base.jsonl now holds — is a prefix of them that it never
            # changes in place (docs/runtime.md "Performance").
            committed = state.successor()
            self._base = committed.committed_prefix()
        if self._events_dirty:
            self._events_folded = True
            self._clear_events()
        return committed

    def _append_base(self, data: bytes) -> None:
        try:
            fd = os.open(self.paths.base, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            try:
                append_or_undo(fd, data, fsync=self._fsync)
            finally:
                os.close(fd)
        except OSError as exc:
            self._fail(exc)
            raise io_error(exc, self.paths.base, "append to") from exc

    def _fail(self, exc: OSError) -> None:
        # A partial append that could not be cut back leaves a torn line that the next append
        # would bury in the middle of the file: stop writing until the instance is reopened
        # (recovery then drops the torn tail).
        if getattr(exc, "undo_failed", False):
            self._broken = f"a failed write could not be undone ({exc.strerror or exc})"

    def _rewrite_base(self, data: bytes) -> None:
        paths = self.paths
        try:
            fd = os.open(paths.base_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            try:
                write_all(fd, data)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            paths.base_prev.unlink(missing_ok=True)
            # The marker telling a crash after the rename from one before it (see
            # rewrite_committed); a copy where the file system has no hard links.
            try:
                os.link(paths.base, paths.base_prev)
            except FileNotFoundError:
                paths.base_prev.touch()  # no base: the old base was empty
            except OSError:
                import shutil  # rare fallback; shutil is kept off the start path

                shutil.copyfile(paths.base, paths.base_prev)
            os.replace(paths.base_tmp, paths.base)
            if self._fsync:
                fsync_dir(paths.messages_dir)
        except OSError as exc:
            raise io_error(exc, paths.base, "rewrite") from exc

    def _clear_events(self) -> None:
        """Empty ``events.jsonl`` (its events are in base) and drop the rewrite marker."""
        try:
            if self._events_fd is not None:
                os.ftruncate(self._events_fd, 0)
            else:
                os.truncate(self.paths.events, 0)
            # Not optional: a stale marker would make a later crash discard a later turn.
            self.paths.base_prev.unlink(missing_ok=True)
        except OSError as exc:
            raise io_error(exc, self.paths.events, "clear") from exc
        self._events_dirty = False
        self._events_folded = False

    def set_status(self, status: Status) -> None:
        """Write ``status`` (``processing`` during a Turn, ``idle`` after) and ``updatedAt``.

        Atomic (readers see the old or the new file) but not fsync-ed: the status is advisory and
        the two fsyncs of a durable replace cost more than the rest of a step on a real disk.
        """
        if status not in ("idle", "processing", "waitingForApproval"):
            raise ValueError(
                f"status must be 'idle', 'processing' or 'waitingForApproval', not {status!r}"
            )
        self._require_open()
        self._metadata = {**self._metadata, "status": status, "updatedAt": now_iso()}
        atomic_write(self.paths.metadata, _json_bytes(self._metadata), fsync=False)

    # -- extension state -------------------------------------------------------------------------
    def load_extension_state(self, name: str) -> JsonValue | None:
        """The saved state of extension ``name``, or None."""
        path = self.paths.extension(name)
        data = read_bytes(path)
        if not data:
            return None
        try:
            value = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise WorkspaceCorruptError(
                f"{path}: invalid JSON ({exc})", location=str(path),
                suggestion="fix or delete the file; the extension then starts with no state",
            ) from exc
        self._extension_cache[name] = data
        return value

    def save_extension_state(self, name: str, value: JsonValue) -> bool:
        """Write the state atomically unless unchanged; return True when it was written."""
        self._require_open()
        data = extension_state_bytes(name, value)
        if self._extension_cache.get(name) == data:
            return False
        path = self.paths.extension(name)
        if path.parent != self.paths.extensions_dir:  # a package extension: <package>/<name>.json
            try:
                private_dirs(path.parent)
            except OSError as exc:
                raise io_error(exc, path.parent, "create") from exc
        atomic_write(path, data, fsync=self._fsync)
        self._extension_cache[name] = data
        return True

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Close files and release the lock (idempotent)."""
        if self._events_fd is not None:
            fd, self._events_fd = self._events_fd, None
            os.close(fd)
        if self._journal is not None:
            self._journal.close()
        self._lock.release()

    @property
    def closed(self) -> bool:
        return not self._lock.held

    def __enter__(self) -> InstanceStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _require_open(self) -> int:
        if self._events_fd is None:
            raise WorkspaceError(
                f"instance {self.agent_name}:{self.instance_key} is closed",
                code="E_WORKSPACE_CLOSED", suggestion="open the instance again",
            )
        if self._broken is not None:
            raise WorkspaceError(
                f"instance {self.agent_name}:{self.instance_key}: {self._broken}; "
                "nothing more is written to it",
                code="E_WORKSPACE_IO",
                location=str(self.paths.dir),
                suggestion="fix the disk problem, then restart the agent (reopening recovers it)",
            )
        return self._events_fd

    def __repr__(self) -> str:
        return (f"InstanceStore(agent={self.agent_name!r}, key={self.instance_key!r}, "
                f"dir={str(self.paths.dir)!r}, open={not self.closed})")


def extension_state_bytes(name: str, value: JsonValue) -> bytes:
    """The stored form of an extension's state (``extensions/<name>.json``); every backend
    stores these bytes. Raises ``E_WORKSPACE_EXTENSION_STATE`` for a value that is not JSON."""
    try:
        # clean_json: a lone surrogate in a state must not make it unsaveable (docs/security.md).
        return (json.dumps(clean_json(value), ensure_ascii=False, indent=2) + "\n").encode(
            "utf-8"
        )
    except (TypeError, ValueError) as exc:
        raise WorkspaceError(
            f"the state of extension {name!r} is not JSON-serialisable: {exc}",
            code="E_WORKSPACE_EXTENSION_STATE",
            suggestion="store only dicts, lists, strings, numbers, booleans and None",
        ) from exc


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=2) + "\n").encode("utf-8")


def preview_recovery(paths: InstancePaths, *, keep_open_calls: bool = False) -> RecoveryPlan:
    """What :meth:`InstanceStore.load` would do, computed without the lock and without writing
    (``keep_open_calls`` as for :meth:`InstanceStore.load`)."""
    base_file = decode_messages(read_bytes(paths.base), file=str(paths.base))
    events_file = decode_events(read_bytes(paths.events), file=str(paths.events))
    leftovers = events_file.records
    if rewrite_committed(paths):
        leftovers = []  # an interrupted rewrite already committed them
    plan = plan_recovery(base_file.records, leftovers, events_file=str(paths.events),
                         base_file=str(paths.base), keep_open_calls=keep_open_calls)
    plan.diagnostics[:0] = [*base_file.diagnostics, *events_file.diagnostics,
                            *duplicate_ids(base_file.records, str(paths.base))]
    return plan


def rewrite_committed(paths: InstancePaths) -> bool:
    """True when ``base.jsonl.prev`` exists and the rewrite it guards reached ``base.jsonl``.

    The marker is the old base (a hard link, or a copy where links are unsupported), so the
    rename happened exactly when the base no longer has the marker's content. Contents, not
    inode numbers, are compared: a copy of the directory (backup, ``cp -r``) keeps the answer.
    If the rewrite left the bytes unchanged either answer is right, since the events then
    fold to the same history again.
    """
    prev = read_bytes(paths.base_prev) if os.path.lexists(paths.base_prev) else None
    if prev is None or not paths.base.exists():
        return False
    return read_bytes(paths.base) != prev
