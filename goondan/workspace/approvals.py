"""ApprovalStore: the durable index of tool calls that wait for a person (docs/approvals.md).

One JSON file per approval under ``<workspace>/approvals/``:

* ``<id>.json`` — the request, written once: a temp file (fsync-ed) hard-linked into place, so
  the file appears whole or not at all, and a second request with the same id (a re-request
  after a crash; ids are deterministic, :func:`approval_id`) finds it and changes nothing;
* ``<id>.decision.json`` — the decision, created the same way: ``link`` fails when the file
  exists, so among any number of deciders (two CLIs, a CLI and a Slack button, two processes
  racing) exactly one wins and every later one gets the first decision back.

Expiry is computed from the stored ``requestedAt`` + ``approvalTimeoutMs`` whenever a record is
read, so no process has to be alive when it passes and a restart cannot lose it;
:meth:`ApprovalStore.decide` on an expired request records ``expired`` (the first decision).

This module does file I/O only: the runtime writes the request before anything of the call
runs and resumes the turn from the decision (goondan/runtime/approvals.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from goondan.errors import WorkspaceError
from goondan.types import JsonObject, now_iso
from goondan.workspace.files import (
    FILE_MODE,
    fsync_dir,
    io_error,
    private_dirs,
    read_json_file,
    write_all,
)
from goondan.workspace.paths import StateLayout

__all__ = [
    "Approval",
    "ApprovalStatus",
    "ApprovalStore",
    "approval_id",
    "decision_document",
    "format_time",
    "parse_time",
]

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]
STATUSES: tuple[str, ...] = ("pending", "approved", "denied", "expired")
_DECISION = ".decision.json"


def approval_id(agent: str, instance_key: str, turn_id: str, tool_call_id: str) -> str:
    """``apr_`` + 24 hex digits of sha256 over the call's identity: the same call, the same id."""
    digest = hashlib.sha256(
        f"{agent}\0{instance_key}\0{turn_id}\0{tool_call_id}".encode()
    ).hexdigest()
    return "apr_" + digest[:24]


def parse_time(text: str) -> datetime:
    """An ISO-8601 time as written by :func:`goondan.types.now_iso` (``...Z``), timezone-aware."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def format_time(value: datetime) -> str:
    """``value`` in the form of :func:`goondan.types.now_iso` (UTC, milliseconds, ``Z``)."""
    return (
        value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    )


@dataclass(frozen=True)
class Approval:
    """One approval: the stored request plus its decision (if any), status computed at ``now``."""

    request: JsonObject
    decision: JsonObject | None = None
    status: ApprovalStatus = "pending"
    extra: JsonObject = field(default_factory=dict)

    @property
    def id(self) -> str:
        return str(self.request["id"])

    @property
    def args(self) -> JsonObject:
        """The arguments the call runs with: the approver's edited ones, else the model's."""
        edited = (self.decision or {}).get("args")
        if isinstance(edited, dict):
            return edited
        args = self.request.get("args")
        return args if isinstance(args, dict) else {}

    def to_dict(self) -> JsonObject:
        """The listing shape (``approvals list --json``)."""
        req, dec = self.request, self.decision or {}
        out: JsonObject = {
            "id": req.get("id"), "tool": req.get("tool"), "args": req.get("args"),
            "agent": req.get("agent"), "instanceKey": req.get("instanceKey"), "status": self.status,
            "requestedAt": req.get("requestedAt"), "turnId": req.get("turnId"),
            "toolCallId": req.get("toolCallId"), "reason": req.get("reason"),
            "expiresAt": req.get("expiresAt"), "decidedAt": dec.get("decidedAt"),
            "decidedBy": dec.get("decidedBy"), "via": dec.get("via"), "note": dec.get("note"),
        }
        if dec.get("reason") is not None:
            out["denyReason"] = dec.get("reason")
        if isinstance(dec.get("args"), dict):
            out["approvedArgs"] = dec["args"]
        return out


def _expired(request: JsonObject, now: datetime) -> bool:
    expires = request.get("expiresAt")
    return isinstance(expires, str) and parse_time(expires) <= now


def _create_once(path: Path, document: JsonObject) -> bool:
    """Create ``path`` holding ``document``, unless it exists; True when this call created it.

    A temp file (fsync-ed) is hard-linked to ``path``: ``link`` never replaces, so exactly one of
    any number of racing writers wins, and a reader never sees a half-written file."""
    data = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(document)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    except OSError as exc:
        raise io_error(exc, path, "write") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    fsync_dir(path.parent)
    return True


def decision_document(current: Approval, *, approve: bool, by: str, via: str,
                      args: JsonObject | None, note: str | None, reason: str | None,
                      now: datetime | None) -> tuple[JsonObject, bool]:
    """The decision to record for the undecided approval ``current`` and whether it is this
    caller's (every backend records the same document): ``expired`` by the system once past its
    ``expiresAt``, else ``approved``/``denied`` by ``by`` via ``via``."""
    at = format_time(now) if now is not None else now_iso()
    if current.status == "expired":
        return {"status": "expired", "decidedAt": at, "decidedBy": "system", "via": "expiry"}, False
    document: JsonObject = {"status": "approved" if approve else "denied", "decidedAt": at,
                            "decidedBy": by, "via": via}
    if note is not None:
        document["note"] = note
    if reason is not None and not approve:
        document["reason"] = reason
    if args is not None and approve:
        document["args"] = args
    return document, True


class ApprovalStore:
    """The approvals of one workspace (``<state root>/workspaces/<id>/approvals/``)."""

    def __init__(self, state_root: Path, workspace_id: str) -> None:
        self.dir = StateLayout(Path(state_root)).workspace_dir(workspace_id) / "approvals"

    def __repr__(self) -> str:
        return f"<ApprovalStore {self.dir}>"

    def _path(self, approval: str) -> Path:
        if not approval.startswith("apr_") or not approval[4:].isalnum():
            raise WorkspaceError(f"{approval!r} is not an approval id", code="E_APPROVAL_NOT_FOUND",
                                 suggestion="'goondan approvals list' shows the ids (apr_...)")
        return self.dir / f"{approval}.json"

    def request(self, *, agent: str, instance_key: str, turn_id: str, tool_call_id: str, tool: str,
                args: JsonObject, reason: str | None = None, timeout_ms: int | None = None,
                requested_at: str | None = None) -> Approval:
        """Record a request (idempotent by id: an existing one is returned unchanged)."""
        ident = approval_id(agent, instance_key, turn_id, tool_call_id)
        path = self._path(ident)
        existing = self.get(ident)
        if existing is not None:
            return existing
        at = requested_at or now_iso()
        expires = (format_time(parse_time(at) + timedelta(milliseconds=timeout_ms))
                   if timeout_ms else None)
        document: JsonObject = {
            "id": ident, "tool": tool, "args": args, "agent": agent, "instanceKey": instance_key,
            "turnId": turn_id, "toolCallId": tool_call_id, "reason": reason, "requestedAt": at,
            "approvalTimeoutMs": timeout_ms, "expiresAt": expires,
        }
        private_dirs(self.dir)
        _create_once(path, document)
        found = self.get(ident)
        assert found is not None
        return found

    def get(self, approval: str, *, now: datetime | None = None) -> Approval | None:
        """The approval ``approval`` with its status at ``now``; None when there is none."""
        path = self._path(approval)
        request = read_json_file(path)
        if not isinstance(request, dict):
            return None
        decision = read_json_file(path.with_name(approval + _DECISION))
        if isinstance(decision, dict) and decision.get("status") in STATUSES:
            return Approval(request, decision, decision["status"])
        when = now or datetime.now(UTC)
        return Approval(request, None, "expired" if _expired(request, when) else "pending")

    def _ids(self) -> Iterator[str]:
        try:
            names = sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise io_error(exc, self.dir, "read") from exc
        for name in names:
            if name.startswith("apr_") and name.endswith(".json") and not name.endswith(_DECISION):
                yield name[:-5]

    def list(self, *, status: str | None = None, agent: str | None = None,
             instance_key: str | None = None, now: datetime | None = None) -> list[Approval]:
        """Every approval (filtered), oldest request first."""
        out: list[Approval] = []
        for ident in self._ids():
            found = self.get(ident, now=now)
            if found is None:
                continue
            req = found.request
            if (
                (status is None or found.status == status)
                and (agent is None or req.get("agent") == agent)
                and (instance_key is None or req.get("instanceKey") == instance_key)
            ):
                out.append(found)
        out.sort(key=lambda a: (str(a.request.get("requestedAt")), a.id))
        return out

    def decide(self, approval: str, *, approve: bool, by: str, via: str,
               args: JsonObject | None = None, note: str | None = None, reason: str | None = None,
               now: datetime | None = None) -> tuple[Approval, bool]:
        """Record the decision; ``(approval, True)`` when this call decided it.

        The first decision wins: a decided approval is returned as it is, ``False``; a pending
        one past its ``expiresAt`` is recorded ``expired`` (``False``: this decision was not
        taken). Raises ``E_APPROVAL_NOT_FOUND`` for an unknown id."""
        current = self.get(approval, now=now)
        if current is None:
            raise WorkspaceError(
                f"no approval {approval!r} in this workspace",
                code="E_APPROVAL_NOT_FOUND",
                suggestion="'goondan approvals list' shows the ids; check --bundle "
                "and --state-root",
            )
        if current.decision is not None:
            return current, False
        document, mine = decision_document(current, approve=approve, by=by, via=via, args=args,
                                           note=note, reason=reason, now=now)
        won = _create_once(self._path(approval).with_name(approval + _DECISION), document)
        found = self.get(approval, now=now)
        assert found is not None
        return found, won and mine

    def restore(self, request: JsonObject, decision: JsonObject | None) -> bool:
        """Store an approval as given (``goondan store copy``); False when its id exists."""
        ident = str(request["id"])
        path = self._path(ident)
        private_dirs(self.dir)
        if not _create_once(path, request):
            return False
        if decision is not None:
            _create_once(path.with_name(ident + _DECISION), decision)
        return True

    def remove_instance(self, agent: str, instance_key: str) -> int:
        """Delete every approval of (agent, instance key); returns how many."""
        removed = 0
        for found in self.list(agent=agent, instance_key=instance_key):
            for path in (
                self._path(found.id),
                self._path(found.id).with_name(found.id + _DECISION),
            ):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed += 1
        return removed

