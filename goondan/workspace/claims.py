"""Claim files: "this id was started" recorded once, by whichever process gets there first.

A claim file is JSON lines, one record per write. Two kinds of record:

* ``{"id": ..., "owner": "<pid>:<start time>"}`` — a *reservation*: that process is about to
  start the id's work (a Turn) and has not yet made its start durable;
* ``{"id": ...}`` — the start is *final*: the work's input is durable wherever the work keeps it
  (the Turn's user message in the conversation).

:func:`claim` takes an exclusive ``fcntl.flock`` on the file, reads what other processes
appended since this process last looked, and reserves the id unless it is final or reserved by
a process that is still alive; a reservation whose owner died (SIGKILL between the reservation
and the durable input, the window of issue 27 item 8) is taken over — unless the caller's
``written`` check finds the input was written after all, in which case the start is made final
instead. :func:`confirm` makes a reservation final once the input is durable. So among any
number of processes (an agent process orphaned by a killed orchestrator and its replacement,
say) exactly one runs each id, and an id whose runner died before its start was durable runs
again.

Each record is one ``O_APPEND`` write made under the lock: it survives a SIGKILL of any process
(not a power loss; it is not ``fsync``-ed). A torn last line left by a crash in the middle of a
write is ignored and the next record starts on a new line. Liveness is judged by pid and
process start time (``/proc``; elsewhere by pid alone), so a reused pid is not mistaken for the
owner.

Used by the delivery guarantee of connector events (docs/connectors.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

from goondan.workspace.files import append_or_undo, fsync_dir, io_error, private_dirs, write_all

__all__ = [
    "STARTED",
    "claim",
    "claim_states",
    "compact",
    "confirm",
    "owner_alive",
    "owner_token",
    "pid_start_time",
    "read_claims",
    "started_ids",
]

STARTED = ""  # the state of an id whose start is final; otherwise the owner token
_lock = threading.Lock()
# path → (inode, bytes of complete lines already read, id → state): each call reads only what
# is new.
_seen: dict[str, tuple[int, int, dict[str, str]]] = {}


def _parse(data: bytes, into: dict[str, str]) -> None:
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if not isinstance(value, dict) or value.get("id") is None:
            continue
        claim_id = str(value["id"])
        owner = value.get("owner")
        if isinstance(owner, str) and owner:
            if into.get(claim_id) != STARTED:
                into[claim_id] = owner
        else:
            into[claim_id] = STARTED


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks); None without ``/proc``.
    Raises ``ProcessLookupError`` when the process is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            raise ProcessLookupError(pid) from None
        return None
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    if fields and fields[0] in ("Z", "X"):
        raise ProcessLookupError(pid)
    return fields[19] if len(fields) > 19 else None


def pid_start_time(pid: int | None) -> int | None:
    """When ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22); None when
    it does not run (or is a zombie) or there is no ``/proc``. A pid and its start time name one
    process."""
    if not pid or pid <= 0:
        return None
    try:
        start = _start_time(pid)
    except ProcessLookupError:
        return None
    return int(start) if start is not None and start.isdigit() else None


def owner_token(pid: int | None = None) -> str:
    """This process's (or ``pid``'s) owner token: ``<pid>:<start time>``."""
    pid = os.getpid() if pid is None else pid
    try:
        start = _start_time(pid)
    except ProcessLookupError:
        start = None
    return f"{pid}:{start or ''}"


def owner_alive(token: str) -> bool:
    """True while the process named by an owner token runs (same pid *and* start time)."""
    pid_text, _, start = token.partition(":")
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    try:
        current = _start_time(pid)
        if current is None:
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return current is None or not start or current == start


def claim_states(path: Path) -> dict[str, str]:
    """id → :data:`STARTED` or the owner token of its reservation (empty when no file)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise io_error(exc, path, "read") from exc
    states: dict[str, str] = {}
    _parse(data[: data.rfind(b"\n") + 1], states)
    return states


def read_claims(path: Path) -> set[str]:
    """The ids nobody should start again: final, or reserved by a process that is alive."""
    return {i for i, state in claim_states(path).items() if state == STARTED or owner_alive(state)}


def started_ids(path: Path) -> set[str]:
    """The ids whose start is final."""
    return {i for i, state in claim_states(path).items() if state == STARTED}


def _record(claim_id: str, owner: str | None) -> bytes:
    value: dict[str, object] = {"id": claim_id}
    if owner is not None:
        value["owner"] = owner
    return json.dumps(value, separators=(",", ":")).encode()


def _open_locked(path: Path) -> int:
    """``path`` opened for appending and locked; the file that is at ``path`` once the lock is
    held (a :func:`compact` may have replaced the one opened while this call waited)."""
    while True:
        try:
            private_dirs(path.parent)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise io_error(exc, path, "open") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        except OSError as exc:
            os.close(fd)
            raise io_error(exc, path, "lock") from exc
        os.close(fd)


def compact(path: Path, consumed: set[str]) -> int:
    """Rewrite ``path`` without the records of ``consumed`` ids (the inbox keeps those as
    ``{"consumed": id}``; docs/connectors.md), under its lock: temp file, fsync, rename. A crash
    leaves the old file or the new one (and maybe ``<name>.compact``, removed by the next
    call). Returns how many lines were dropped."""
    temp = path.with_name(path.name + ".compact")
    temp.unlink(missing_ok=True)
    if not path.exists():
        return 0
    fd = _open_locked(path)
    try:
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        kept: list[bytes] = []
        dropped = 0
        for line in data[: data.rfind(b"\n") + 1].split(b"\n")[:-1]:
            states: dict[str, str] = {}
            _parse(line, states)
            if any(claim_id in consumed for claim_id in states):
                dropped += 1
            elif states:
                kept.append(line + b"\n")
        if dropped:
            out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                write_all(out, b"".join(kept))
                os.fsync(out)
            finally:
                os.close(out)
            os.replace(temp, path)
            fsync_dir(path.parent)
        return dropped
    except OSError as exc:
        raise io_error(exc, path, "compact") from exc
    finally:
        os.close(fd)


def _locked(
    path: Path, decide: Callable[[dict[str, str]], str | None], claim_id: str
) -> str | None:
    """Under the file lock: read what is new, ask ``decide`` for the state to append (None:
    nothing), append it. Returns the state appended (None: nothing was)."""
    key = str(path)
    fd = _open_locked(path)
    try:
        with _lock:
            inode = os.fstat(fd).st_ino
            known, offset, states = _seen.get(key, (inode, 0, {}))
            size = os.fstat(fd).st_size
            if size < offset or known != inode:  # replaced (compacted) or truncated: start over
                offset, states = 0, {}
            os.lseek(fd, offset, os.SEEK_SET)
            data = os.read(fd, size - offset) if size > offset else b""
            complete = data.rfind(b"\n") + 1
            _parse(data[:complete], states)
            offset += complete
            state = decide(states)
            if state is None:
                _seen[key] = (inode, offset, states)
                return None
            torn = complete < len(data)
            line = (b"\n" if torn else b"") + _record(claim_id, state or None) + b"\n"
            append_or_undo(fd, line)
            states[claim_id] = state
            _seen[key] = (inode, size + len(line), states)
            return state
    except OSError as exc:
        raise io_error(exc, path, "append to") from exc
    finally:
        os.close(fd)  # releases the flock


def claim(path: Path, claim_id: str, *, owner: str | None = None,
          written: Callable[[], bool] | None = None) -> bool:
    """Reserve ``claim_id`` in ``path`` for ``owner`` (see the module docstring); True when
    this call did and the caller should start the work. Without ``owner`` the start is final
    at once. ``written`` is asked (under the lock) when the id is reserved by a dead owner:
    True means the input was made durable before that owner died, so the start is made final
    and this call returns False.

    Raises ``WorkspaceError`` when the file cannot be used."""
    def decide(states: dict[str, str]) -> str | None:
        state = states.get(claim_id)
        if state == STARTED or (state is not None and owner_alive(state)):
            return None
        if state is not None and written is not None and written():
            return STARTED
        return owner if owner is not None else STARTED

    appended = _locked(path, decide, claim_id)
    # A reservation was appended (or, without an owner, the final start): this call runs it.
    return appended is not None and (owner is None or appended != STARTED)


def confirm(path: Path, claim_id: str) -> None:
    """Make the start of ``claim_id`` final (its input is durable); nothing if it is already."""
    _locked(path, lambda states: None if states.get(claim_id) == STARTED else STARTED, claim_id)
