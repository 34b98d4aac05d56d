"""Orchestrator failover on a PostgreSQL store: one active ``goondan run`` per swarm per store,
the others stand by (docs/orchestrator.md "Failover", docs/storage.md "Leases and fencing").

**The swarm's lease.** ``goondan run --store postgresql://…`` takes the lease
:func:`lease_name` (``swarm:<workspace>/<swarm>``) through a
:class:`~goondan.storage.keeper.LeaseKeeper` — TTL :data:`LEASE_TTL` seconds, renewed every
:data:`RENEW_EVERY` —, its owner a JSON record of this node (:func:`owner_record`: host, pid,
local state root, start time, a random id). While another node holds it, this one is a
**standby**: it holds a lease of its own, ``standby:<workspace>/<swarm>/<id>`` (its heartbeat,
listed by ``goondan status --store``), starts nothing and keeps asking for the swarm's lease.
Once it has it, it starts as a fresh ``goondan run`` on that store would.

**Fencing.** Every write of this node to the store — the orchestrator's (durable inputs,
connection inboxes, approval requests) and its agent processes' (conversations, journals,
queues) — runs :meth:`Leadership.fence` / ``lease_fence(name, token)`` first in its
transaction, with the token this node was granted: when the node lost the lease (it could not
renew in time, it was stopped), the store refuses the write (``E_STORE_LEASE_LOST``). Agent
processes get the lease as ``--store-lease TOKEN:NAME`` through the spawn pipe.

**Instances of a stale leader.** An open instance holds a session advisory lock on PostgreSQL,
which a stopped (SIGSTOP) process keeps. A new leader's agent process therefore takes the
instance over (:func:`take_over_instance`): it terminates (``pg_terminate_backend``) the
sessions that hold the instance's lock *and* were opened under an older token of the same
lease (their ``application_name`` is ``goondan:lease:<token>``, :func:`lease_application_name`)
— the lease says they are stale, and their writes would be refused anyway. Sessions of other
programs (no such name) are never terminated.

**Losing the lease.** When the keeper reports the loss (a renewal answered no, or none succeeded
within the TTL), the node logs ``E_STORE_LEASE_LOST`` and stops as on SIGTERM: its workers are
shut down, and whatever they still try to write is refused by the fence.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from goondan.storage.keeper import LeaseKeeper
from goondan.storage.leases import StaleLeaseError

__all__ = [
    "LEASE_TTL",
    "RENEW_EVERY",
    "Leadership",
    "failover_status",
    "fence_instance",
    "lease_application_name",
    "lease_name",
    "owner_record",
    "parse_lease_arg",
    "take_over_instance",
]

_log = logging.getLogger("goondan.swarm.leadership")

LEASE_TTL = 3.0  # seconds: a standby is active at most ~TTL + RENEW_EVERY after a death
RENEW_EVERY = 0.5  # seconds between renewals (holder) and attempts (standby)
SWARM_PREFIX = "swarm:"
STANDBY_PREFIX = "standby:"
APP_PREFIX = "goondan:lease:"
FIRST_WAIT = 1.5  # seconds: the first answer (a contender waits ≤ 1 s for writes in flight)


def lease_name(workspace_id: str, swarm: str) -> str:
    """The swarm's lease: one active orchestrator per swarm and store."""
    return f"{SWARM_PREFIX}{workspace_id}/{swarm}"


def owner_record(state_root: Path) -> str:
    """This node as a lease owner: JSON of host, pid, state root, start time, a random id."""
    return json.dumps({
        "host": socket.gethostname(), "pid": os.getpid(), "stateRoot": str(state_root),
        "startedAt": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "id": secrets.token_hex(6),
    }, sort_keys=True)


def _owner(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"owner": text}
    return value if isinstance(value, dict) else {"owner": text}


def describe_owner(text: str) -> str:
    who = _owner(text)
    return f"{who.get('host', '?')} pid {who.get('pid', '?')} ({who.get('stateRoot', '?')})"


class Leadership:
    """The swarm's lease for one ``goondan run`` (module docstring)."""

    def __init__(self, leases: Any, workspace_id: str, swarm: str, state_root: Path, *,
                 ttl: float = LEASE_TTL, interval: float = RENEW_EVERY) -> None:
        self.leases = leases
        self.name = lease_name(workspace_id, swarm)
        self.owner = owner_record(state_root)
        self.ttl = ttl
        self.granted: int | None = None  # the token this node was granted (kept after a loss)
        self.lost = False
        self.holder: dict[str, Any] | None = None  # who held the lease when this one stood by
        self.on_lost: Callable[[], None] = _stop_this_process
        self._keeper = LeaseKeeper(leases, self.name, self.owner, ttl=ttl, interval=interval,
                                   on_change=self._changed)
        standby = f"{STANDBY_PREFIX}{workspace_id}/{swarm}/{_owner(self.owner)['id']}"
        self._standby = LeaseKeeper(leases, standby, self.owner, ttl=ttl, interval=interval)
        self._lock = threading.Lock()
        self._db: Any = None  # the lease's own Database (Leadership.open)
        self._closing = False

    @classmethod
    def open(cls, db: Any, workspace_id: str, swarm: str, state_root: Path) -> Leadership:
        """On the database of the store ``db`` with a small pool of its own: renewals never
        wait for the store's work, and the lease is released after the store was closed."""
        from goondan.storage.postgres.db import Database
        from goondan.storage.postgres.leases import PostgresLeases

        own = Database.open(db._url, apply_migrations=False, max_size=2)
        leadership = cls(PostgresLeases(own), workspace_id, swarm, state_root)
        leadership._db = own
        return leadership

    def __repr__(self) -> str:
        return f"<Leadership {self.name!r} token={self.granted}>"

    # -- the fence of every write ---------------------------------------------------------------
    def fence(self, conn: Any) -> None:
        """Refuse the write unless this node holds the swarm's lease (``E_STORE_LEASE_LOST``)."""
        from goondan.storage.postgres.leases import fenced

        token = self.granted
        if token is None:
            raise StaleLeaseError(self.name, 0)
        fenced(conn, self.name, token)

    def lease_arg(self) -> str:
        """``--store-lease`` of the agent processes (:func:`parse_lease_arg`)."""
        return f"{self.granted}:{self.name}"

    # -- becoming active ------------------------------------------------------------------------
    def acquire(self, announce: Callable[[str], None]) -> int:
        """Return once this node holds the swarm's lease; stands by (announced) until then.
        Blocking: ``goondan run`` calls it before its service starts."""
        self._keeper.start()
        token = self._keeper.wait_active(FIRST_WAIT)
        if token is None:
            self._standby.start()
            current = self.leases.lease(self.name)
            holder = describe_owner(current.owner) if current is not None else "another node"
            self.holder = _owner(current.owner) if current is not None else {}
            announce(f"Standing by: swarm lease {self.name} is held by {holder}; this node "
                     "takes over when that one stops renewing it.")
            _log.info("standing by for %s", holder,
                      extra={"event": "orchestrator.standby", "lease": self.name})
            while token is None:
                token = self._keeper.wait_active(1.0)
            self._standby.stop()
        with self._lock:
            if self.granted is None:
                self.granted = token
            token = self.granted
        _log.info("active: holds lease %s (token %d)", self.name, token,
                  extra={"event": "orchestrator.active", "lease": self.name, "token": token})
        return token

    def _changed(self, token: int | None) -> None:
        with self._lock:
            if token is not None:
                if self.granted is None:
                    self.granted = token
                return
            if self.granted is None or self.lost or self._closing:
                return
            self.lost = True
        self._keeper.halt()  # never take it again: this process stops
        _log.error("lost lease %s (token %d): stopping; its writes are refused "
                   "[E_STORE_LEASE_LOST]", self.name, self.granted,
                   extra={"event": "orchestrator.leaseLost", "lease": self.name})
        self.on_lost()

    def close(self) -> None:
        """Stop renewing; release the lease (a standby takes over at once) unless it was lost."""
        with self._lock:
            self._closing = True  # the keeper's own "None" on stopping is not a loss
        self._standby.stop()
        self._keeper.stop(release=not self.lost)
        if self._db is not None:
            self._db.close()


def _stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the front-end's own stop path (workers shut down)


# -- agent processes -----------------------------------------------------------------------------
def parse_lease_arg(value: str) -> tuple[int, str]:
    token, _, name = value.partition(":")
    return int(token), name


def lease_application_name(url: str, token: int) -> str:
    """``url`` whose sessions say they were opened under lease token ``token``."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "application_name"]
    query.append(("application_name", f"{APP_PREFIX}{token}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


def fence_instance(storage: Any, lease: str, workspace_id: str, agent: str, key: str) -> Any:
    """An agent instance's store under the orchestrator's lease (``--store-lease``), from the
    store opened with :func:`lease_application_name` (its sessions named by the token — by the
    agent process, or once for all the instances of a pooled or Ray host): the instance taken
    from a stale leader's sessions, then every write fenced (the same pool)."""
    from goondan.storage.postgres.backend import lease_fence

    token, name = parse_lease_arg(lease)
    take_over_instance(storage.db, workspace_id, agent, key, token)
    return storage.with_fence(lease_fence(name, token))


_HOLDERS = """
SELECT l.pid, a.application_name FROM goondan_instances i
JOIN pg_locks l ON l.locktype = 'advisory' AND l.classid::bigint = %s AND l.objsubid = 2
    AND l.objid::bigint = ((i.id %% 4294967295) - 2147483648) & 4294967295 AND l.granted
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE i.workspace_id = %s AND i.agent_name = %s AND i.instance_key = %s
"""


def take_over_instance(db: Any, workspace_id: str, agent: str, key: str, token: int,
                       *, wait: float = 5.0) -> int:
    """Terminate the sessions holding this instance's lock under an older token of the lease
    (module docstring); wait until they are gone. Returns how many were terminated."""
    import time

    from goondan.storage.postgres.store import LOCK_CLASS

    def stale(conn: Any) -> list[int]:
        found = []
        for pid, app in conn.execute(_HOLDERS, (LOCK_CLASS, workspace_id, agent, key)):
            text = str(app or "")
            if text.startswith(APP_PREFIX) and text[len(APP_PREFIX):].isdigit() and int(
                    text[len(APP_PREFIX):]) < token:
                found.append(int(pid))
        return found

    killed = 0
    deadline = time.monotonic() + wait
    with db.connect() as conn:
        while pids := stale(conn):
            if killed == 0:
                _log.warning("taking over %s:%s from a stale leader's session(s) %s", agent, key,
                             pids, extra={"event": "instance.takenOver", "agentName": agent,
                                          "instanceKey": key})
            for pid in pids:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
            killed += len(pids)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    return killed


# -- goondan status --store ------------------------------------------------------------------------
def failover_status(leases: list[dict[str, Any]], swarm: str | None = None) -> dict[str, Any]:
    """``{"active", "standbys"}`` of ``status --store --json`` from the store's lease rows."""
    active: dict[str, Any] | None = None
    standbys: list[dict[str, Any]] = []
    for row in leases:
        name = str(row["name"])
        if not row.get("held"):
            continue
        if name.startswith(SWARM_PREFIX):
            workspace, _, found = name[len(SWARM_PREFIX):].rpartition("/")
            if swarm is not None and found != swarm:
                continue
            entry = {**_owner(str(row["owner"])), "swarm": found, "workspace": workspace,
                     "token": row["token"], "expiresInSeconds": row["expiresInSeconds"]}
            if active is None:
                active = entry
        elif name.startswith(STANDBY_PREFIX):
            workspace, _, found = name[len(STANDBY_PREFIX):].rsplit("/", 1)[0].rpartition("/")
            if swarm is not None and found != swarm:
                continue
            standbys.append({**_owner(str(row["owner"])), "swarm": found,
                             "workspace": workspace,
                             "expiresInSeconds": row["expiresInSeconds"]})
    return {"active": active, "standbys": standbys}
