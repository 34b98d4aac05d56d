"""Read-only discovery of workspaces and instances under a System Root, plus instance deletion.

Lists both goondan's layout and the reference runtime's: ``workspaces/<id>/instances/<dir>/``
where ``<dir>`` is ``<agent>:<key>`` (ours and the reference runner's) or just the key (reference
spec layout), and the legacy ``<root>/instances/<key>/``. An instance is a directory holding a
``metadata.json``; invalid metadata makes the row carry an ``error`` instead of hiding it.
Nothing here takes the instance lock or changes a file, except :func:`delete_instance`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.conversation.codec import decode_events, decode_messages, decode_record
from goondan.conversation.messages import Message, MessageEvent
from goondan.errors import Diagnostic, GoondanError, InstanceLockedError, WorkspaceError
from goondan.workspace.files import count_lines, io_error, iter_lines_backwards, read_bytes
from goondan.workspace.locks import is_locked, lock_holder
from goondan.workspace.paths import InstancePaths, StateLayout
from goondan.workspace.store import read_metadata

__all__ = [
    "InstanceInfo",
    "delete_instance",
    "find_instances",
    "iter_instances",
    "iter_messages",
    "read_pending_events",
    "read_tail_messages",
    "refuse_ambiguous",
    "select_instances",
]

LEGACY_WORKSPACE = "(legacy)"


@dataclass
class InstanceInfo:
    """One instance directory as seen by ``inspect workspace`` / ``instance list``."""

    workspace_id: str
    dir_name: str
    paths: InstancePaths
    agent_name: str | None = None
    instance_key: str = ""
    status: str = "unknown"
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def label(self) -> str:
        return f"{self.agent_name}:{self.instance_key}" if self.agent_name else self.instance_key

    def message_count(self) -> int:
        return count_lines(self.paths.base)

    def pending_events(self) -> int:
        return count_lines(self.paths.events)

    def size_bytes(self) -> int:
        total = 0
        for path in self.paths.dir.rglob("*"):
            try:
                if path.is_file():
                    total += path.stat().st_size
            except OSError:
                continue
        return total

    def locked(self) -> bool:
        return is_locked(self.paths.lock)

    def lock_pid(self) -> int | None:
        return lock_holder(self.paths.lock)

    def to_dict(self, *, details: bool = True) -> dict[str, Any]:
        """camelCase JSON row (``details`` adds counts and size, which read the files)."""
        out: dict[str, Any] = {
            "workspaceId": self.workspace_id, "instanceKey": self.instance_key,
            "agentName": self.agent_name, "status": self.status, "createdAt": self.created_at,
            "updatedAt": self.updated_at, "dir": str(self.paths.dir),
        }
        if details:
            out.update(messages=self.message_count(), pendingEvents=self.pending_events(),
                       sizeBytes=self.size_bytes())
        if self.error:
            out["error"] = self.error
        return out


def _info(workspace_id: str, paths: InstancePaths) -> InstanceInfo:
    info = InstanceInfo(workspace_id=workspace_id, dir_name=paths.dir.name, paths=paths,
                        instance_key=paths.dir.name)
    try:
        meta = read_metadata(paths)
    except GoondanError as exc:
        info.error = exc.message
        return info
    if meta is None:
        info.error = "metadata.json is missing or empty"
        return info
    agent = meta.get("agentName")
    key = str(meta.get("instanceKey"))
    # The reference runner stores "<agent>:<key>" as instanceKey; show the plain key.
    if isinstance(agent, str) and key.startswith(agent + ":") and paths.dir.name.startswith(agent):
        key = key[len(agent) + 1:]
    info.agent_name = agent if isinstance(agent, str) else None
    info.instance_key = key
    info.status = str(meta.get("status", "unknown"))
    info.created_at = meta.get("createdAt") if isinstance(meta.get("createdAt"), str) else None
    info.updated_at = meta.get("updatedAt") if isinstance(meta.get("updatedAt"), str) else None
    info.metadata = meta
    return info


def _sorted_dirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        return []
    except OSError as exc:
        raise io_error(exc, path, "list") from exc


def iter_instances(state_root: Path, *, workspace_id: str | None = None) -> Iterator[InstanceInfo]:
    """Every instance under the root (sorted by workspace, then directory name)."""
    layout = StateLayout(state_root)
    for workspace in _sorted_dirs(layout.workspaces_dir):
        if workspace_id is not None and workspace.name != workspace_id:
            continue
        for directory in _sorted_dirs(workspace / "instances"):
            yield _info(workspace.name, InstancePaths(directory))
    if workspace_id in (None, LEGACY_WORKSPACE):
        for directory in _sorted_dirs(layout.legacy_instances_dir):
            if (directory / "metadata.json").exists():
                yield _info(LEGACY_WORKSPACE, InstancePaths(directory))


def find_instances(state_root: Path, key: str, *, agent: str | None = None,
                   workspace_id: str | None = None) -> list[InstanceInfo]:
    """Instances whose key, ``agent:key`` label or directory name equals ``key``."""
    found: list[InstanceInfo] = []
    for info in iter_instances(state_root, workspace_id=workspace_id):
        if agent is not None and info.agent_name != agent:
            continue
        if key in (info.instance_key, info.label, info.dir_name):
            found.append(info)
    return found


def select_instances(
    state_root: Path,
    key: str,
    *,
    agent: str | None = None,
    workspace_id: str | None = None,
    allow_many: bool = True,
) -> list[InstanceInfo]:
    """Like :func:`find_instances` but raises when nothing (or, optionally, several) match."""
    found = find_instances(state_root, key, agent=agent, workspace_id=workspace_id)
    if not found:
        scope = f" of agent {agent!r}" if agent else ""
        raise WorkspaceError(
            f"no instance {key!r}{scope} under {state_root}", code="E_WORKSPACE_INSTANCE_NOT_FOUND",
            suggestion="goondan inspect workspace lists every instance (check --state-root)",
        )
    refuse_ambiguous(found, key, allow_many=allow_many)
    return found


def refuse_ambiguous(found: Sequence[Any], key: str, *, allow_many: bool) -> None:
    """``E_WORKSPACE_INSTANCE_AMBIGUOUS`` when several instances (anything with ``label`` and
    ``workspace_id``: a state root's or a store's) match ``key`` and one was asked for."""
    if len(found) > 1 and not allow_many:
        labels = ", ".join(f"{i.label} ({i.workspace_id})" for i in found[:10])
        raise WorkspaceError(
            f"{len(found)} instances match {key!r}: {labels}",
            code="E_WORKSPACE_INSTANCE_AMBIGUOUS",
            suggestion="narrow it down with --agent and/or --workspace",
        )


def iter_messages(paths: InstancePaths) -> Iterator[tuple[int, Message]]:
    """Stream ``(line, message)`` from ``base.jsonl`` front to back (a torn tail is skipped)."""
    try:
        handle = paths.base.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise io_error(exc, paths.base, "read") from exc
    name = str(paths.base)  # once: the property builds a Path (~15 % of a long read)
    with handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield line_no, decode_record(line, Message.from_dict, file=name, line_no=line_no)
            except WorkspaceError:
                if line.endswith(b"\n") or handle.read(1):
                    raise
                return  # torn tail of an interrupted append


def read_tail_messages(paths: InstancePaths, limit: int) -> list[tuple[int, Message]]:
    """The last ``limit`` messages of ``base.jsonl`` as ``(offset, message)``, oldest first.

    Reads the file backwards and parses only those lines, so it is fast on huge histories.
    A torn last line is skipped; a corrupt line raises ``WorkspaceCorruptError``.
    """
    out: list[tuple[int, Message]] = []
    if limit <= 0:
        return out
    ends_with_newline = _ends_with_newline(paths.base)
    first = True
    for offset, line in iter_lines_backwards(paths.base):
        try:
            message = decode_record(line, Message.from_dict, file=str(paths.base), line_no=0)
        except WorkspaceError:
            if first and not ends_with_newline:
                first = False
                continue  # torn tail of an interrupted append
            # Reading backwards loses line numbers; a forward decode names file:line.
            decode_messages(read_bytes(paths.base), file=str(paths.base))
            raise
        first = False
        out.append((offset, message))
        if len(out) >= limit:
            break
    out.reverse()
    return out


def _ends_with_newline(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            if size == 0:
                return True
            handle.seek(size - 1)
            return handle.read(1) == b"\n"
    except OSError:
        return True


def read_pending_events(paths: InstancePaths) -> tuple[list[MessageEvent], list[Diagnostic]]:
    """The events waiting in ``events.jsonl`` (never folded by this call)."""
    decoded = decode_events(read_bytes(paths.events), file=str(paths.events))
    return decoded.records, decoded.diagnostics


def delete_instance(info: InstanceInfo, *, force: bool = False) -> None:
    """Remove the whole instance directory; refuses a locked instance unless ``force``."""
    if not force and info.locked():
        pid = info.lock_pid()
        raise InstanceLockedError(
            f"instance {info.label} is in use by "
            f"{'process ' + str(pid) if pid else 'another process'}",
            pid=pid,
            location=str(info.paths.dir),
            suggestion="stop that process first, or pass --force to delete anyway",
        )
    import shutil  # deletion only: shutil imports bz2 and lzma, kept off the start path

    try:
        shutil.rmtree(info.paths.dir)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise io_error(exc, info.paths.dir, "delete") from exc
    if info.agent_name:
        # Its approvals go with it (docs/approvals.md): <root>/workspaces/<id>/instances/<dir>.
        from goondan.workspace.approvals import ApprovalStore

        parents = info.paths.dir.parents
        ApprovalStore(parents[3], parents[1].name).remove_instance(
            info.agent_name, info.instance_key
        )
