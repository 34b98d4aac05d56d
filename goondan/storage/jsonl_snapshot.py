"""Instance snapshots of the JSONL state root (:class:`~goondan.storage.contract.InstanceSnapshot`):
read without the instance's lock, written whole under it (``goondan inspect --store``,
``goondan store copy``; docs/storage.md "Moving state").

A snapshot holds the lines of ``base.jsonl``, ``events.jsonl`` and ``turn.jsonl`` as they are
(without their newlines) and the text of each ``extensions/*.json``. An instance that still has
to be recovered — a torn last line, a rewrite of ``base.jsonl`` cut short — is marked
``needs_fold``: its files are not yet what its conversation is (``goondan fold`` makes them so).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from goondan.conversation.codec import decode_events, decode_messages
from goondan.storage.contract import InstanceSnapshot, QueueRecord, instance_exists
from goondan.workspace.catalog import find_instances, iter_instances
from goondan.workspace.claims import STARTED, claim_states
from goondan.workspace.files import append_or_undo, atomic_write, io_error, private_dirs, read_bytes
from goondan.workspace.inbox import DurableInbox, InboxEntry, read_records
from goondan.workspace.journal import parse_records
from goondan.workspace.paths import InstancePaths, StateLayout
from goondan.workspace.store import InstanceStore, locate_instance, read_metadata

__all__ = ["queue_records", "queue_scopes", "read_snapshot", "read_version",
           "restore_queue_record", "restore_snapshot", "workspace_ids"]

_QUEUE_ROOTS = ("inputs", "connections")


def workspace_ids(state_root: Path) -> list[str]:
    """The workspaces with an instance or an approval."""
    found = {info.workspace_id for info in iter_instances(state_root)}
    workspaces = StateLayout(state_root).workspaces_dir
    if workspaces.is_dir():
        found.update(p.name for p in workspaces.iterdir() if (p / "approvals").is_dir()
                     or queue_scopes(state_root, p.name))
    return sorted(found)


def queue_scopes(state_root: Path, workspace_id: str) -> list[str]:
    """``inputs/<swarm>`` and ``connections/<swarm>/<connection>`` that have an inbox."""
    root = StateLayout(state_root).workspace_dir(workspace_id)
    scopes = {inbox.parent.relative_to(root).as_posix()
              for name in _QUEUE_ROOTS if (root / name).is_dir()
              for inbox in (root / name).rglob("inbox.jsonl")}
    return sorted(scopes)


def queue_records(queue: DurableInbox) -> list[QueueRecord]:
    """Every input of the inbox, in acceptance order: final when a claim file says so or the
    inbox keeps only its id (``{"consumed": id}``)."""
    finals = {claim_id for marker in sorted(queue.started_dir.glob("*.jsonl"))
              for claim_id, state in claim_states(marker).items() if state == STARTED}
    out: list[QueueRecord] = []
    ids: set[str] = set()
    for raw, _line in read_records(queue.path):
        consumed = raw.get("consumed")
        try:
            entry = None if isinstance(consumed, str) else InboxEntry.from_dict(raw)
        except (KeyError, TypeError):
            continue
        ident = consumed if entry is None else entry.id
        if not isinstance(ident, str) or ident in ids:
            continue
        ids.add(ident)
        if entry is None or ident in finals:
            out.append(QueueRecord(ident, True))
        else:
            out.append(QueueRecord(ident, False, entry.agent, entry.instance_key,
                                   entry.accepted_at, entry.event))
    out.extend(QueueRecord(ident, True) for ident in sorted(finals - ids))  # claims only
    return out


def restore_queue_record(queue: DurableInbox, record: QueueRecord) -> bool:
    """Append ``record`` to the inbox (a final one as ``{"consumed": id}``) unless its id is
    there; one ``O_APPEND`` write, as the orchestrator's."""
    if any(r.id == record.id for r in queue_records(queue)):
        return False
    value: dict[str, object] = {"consumed": record.id} if record.started else InboxEntry(
        record.id, record.event or {"id": record.id}, record.agent, record.instance_key,
        record.accepted_at).to_dict()
    line = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    for directory in (queue.directory, queue.started_dir):
        private_dirs(directory)
    fd = os.open(queue.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        append_or_undo(fd, line, fsync=True)
    except OSError as exc:
        raise io_error(exc, queue.path, "append to") from exc
    finally:
        os.close(fd)
    return True


def _lines(data: bytes) -> list[str]:
    return [line.decode("utf-8") for line in data.split(b"\n") if line.strip()]


def _paths(state_root: Path, workspace_id: str, agent: str, key: str) -> InstancePaths | None:
    for info in find_instances(state_root, key, agent=agent, workspace_id=workspace_id):
        if info.instance_key == key and info.agent_name == agent and not info.error:
            return info.paths
    return None


def read_version(state_root: Path, workspace_id: str, agent: str, key: str) -> str | None:
    """The instance's files by inode, size and modification time (None when missing)."""
    paths = _paths(state_root, workspace_id, agent, key)
    if paths is None:
        return None
    parts = []
    for path in (paths.base, paths.events, paths.metadata):
        try:
            st = os.stat(path)
        except OSError:
            parts.append("-")
            continue
        parts.append(f"{st.st_ino}.{st.st_size}.{st.st_mtime_ns}")
    return ":".join(parts)


def read_snapshot(state_root: Path, workspace_id: str, agent: str,
                  key: str) -> InstanceSnapshot | None:
    """The instance's files as a snapshot (None when there is no such instance)."""
    paths = _paths(state_root, workspace_id, agent, key)
    if paths is None:
        return None
    meta = read_metadata(paths) or {}
    base, events = read_bytes(paths.base), read_bytes(paths.events)
    journal = read_bytes(paths.journal)
    problems = []
    if decode_messages(base, file=str(paths.base)).torn or (base.strip() and not base.endswith(
            b"\n")):
        problems.append("base.jsonl ends with an incomplete line")
    if decode_events(events, file=str(paths.events)).torn:
        problems.append("events.jsonl ends with an incomplete line")
    if paths.base_prev.exists() or paths.base_tmp.exists():
        problems.append("a rewrite of base.jsonl was cut short")
    parse_records(journal, str(paths.journal))  # E_WORKSPACE_CORRUPT when unreadable
    journal = journal[:journal.rfind(b"\n") + 1]  # a torn last record is dropped, as on open
    extensions: dict[str, str] = {}
    root = paths.extensions_dir
    if root.is_dir():
        for file in sorted(root.rglob("*.json")):
            extensions[file.relative_to(root).as_posix()] = read_bytes(file).decode("utf-8")
    return InstanceSnapshot(
        agent_name=agent, instance_key=key, metadata=meta, messages=_lines(base),
        events=_lines(events), journal=_lines(journal), extensions=extensions,
        needs_fold="; ".join(problems) or None,
    )


def _text(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def restore_snapshot(state_root: Path, workspace_id: str, snapshot: InstanceSnapshot, *,
                     replace: bool = False) -> None:
    """Write the instance's files as ``snapshot`` holds them, under the instance's lock
    (``E_INSTANCE_LOCKED`` when it is open elsewhere)."""
    agent, key = snapshot.agent_name, snapshot.instance_key
    layout = StateLayout(state_root)
    _, exists = locate_instance(layout, workspace_id, agent, key)
    if exists and not replace:
        raise instance_exists(workspace_id, agent, key, str(state_root))
    with InstanceStore.open(state_root, workspace_id, agent, key) as store:
        paths = store.paths
        private_dirs(paths.messages_dir)
        atomic_write(paths.base, _text(snapshot.messages))
        atomic_write(paths.events, _text(snapshot.events))
        atomic_write(paths.journal, _text(snapshot.journal))
        root = paths.extensions_dir
        for old in sorted(root.rglob("*.json")) if root.is_dir() else []:
            if old.relative_to(root).as_posix() not in snapshot.extensions:
                old.unlink()
        for name, text in snapshot.extensions.items():
            target = root / name
            if not target.resolve().is_relative_to(root.resolve()):
                raise ValueError(f"extension state name {name!r} leaves the extensions directory")
            private_dirs(target.parent)
            atomic_write(target, text.encode("utf-8"))
        # Written last, as a new instance's: the directory is complete once it is there.
        meta = json.dumps(snapshot.metadata, ensure_ascii=False, indent=2) + "\n"
        atomic_write(paths.metadata, meta.encode("utf-8"))
