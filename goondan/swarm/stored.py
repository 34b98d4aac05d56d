"""``goondan run`` on a store other than its JSONL state root (``--store postgresql://…``,
docs/storage.md, docs/orchestrator.md "The store"): the store check of the commands that talk
to a running swarm, and what a starting swarm reads from its store.

The durable inputs (the Swarm's inbox, the Connections' inboxes, the start markers) are one
implementation on both backends: :mod:`goondan.swarm.durable_inputs`. What stays on the
machine (the connector's ``ctx.state_dir``, logs, the control socket, pid files) stays under
the local state root.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.storage.url import ENV_STORE, StoreLocation

if TYPE_CHECKING:
    from goondan.storage.contract import StorageBackend
    from goondan.swarm.orchestrator import Orchestrator

__all__ = ["check_same_store", "resume_interrupted", "turn_origin_in"]

_log = logging.getLogger("goondan.swarm.durable_inputs")  # the name its log lines had


def _database(url: str) -> tuple[str, int, str]:
    """(host, port, database) of a PostgreSQL URL: two URLs of one database may differ in
    their user, password or options."""
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    try:
        port = parts.port or int(query.get("port") or 5432)
    except ValueError:
        port = 0
    return (parts.hostname or query.get("host") or "", port,
            parts.path.lstrip("/") or query.get("dbname") or "")


def check_same_store(active: Any, location: StoreLocation, *, where: str) -> None:
    """``E_STORE_MISMATCH`` unless ``location`` (a parsed ``--store``/``GOONDAN_STORE``) may
    talk to the running swarm ``active`` (its :class:`~goondan.swarm.state.ActiveRuntime`):
    a PostgreSQL store must be the swarm's; a swarm on PostgreSQL needs its URL when ``where``
    is ``GOONDAN_STORE`` (a restart starts it again from that variable)."""
    from goondan.errors import ConfigError

    store = getattr(active, "store", None)
    if location.kind != "postgres" and (store is None or where != ENV_STORE):
        return
    if location.kind == "postgres" and store is not None and (
            _database(store) == _database(location.display)):
        return
    runs_on = store or "its JSONL state root"
    given = location.display if location.kind == "postgres" else "no PostgreSQL URL"
    raise ConfigError(
        f"the running swarm {active.swarm!r} keeps its state in {runs_on}; {where} gives "
        f"{given}", code="E_STORE_MISMATCH", location=where,
        suggestion="give the store the swarm was started with (its runtime record shows it, "
        "masked)")


def turn_origin_in(storage: StorageBackend, workspace_id: str, agent: str,
                   instance_key: str) -> dict[str, Any] | None:
    """:func:`goondan.swarm.approval_relay.turn_origin` read from a store backend."""
    for found_agent, key, opened in storage.open_turns(workspace_id):
        if (found_agent, key) == (agent, instance_key):
            metadata = opened.input.get("metadata")
            props = metadata.get("properties") if isinstance(metadata, dict) else None
            return dict(props) if isinstance(props, dict) else {}
    return None


async def resume_interrupted(orchestrator: Orchestrator, state_root: Path, workspace_id: str,
                             storage: StorageBackend | None) -> None:
    """Spawn every instance whose last Turn was cut short (every process killed): its new
    process resumes the Turn (docs/orchestrator.md "Crashes"). ``storage`` None: the JSONL
    state root ``state_root``."""
    import asyncio

    from goondan.workspace.journal import interrupted_instances

    if storage is None:
        found = await asyncio.to_thread(interrupted_instances, state_root, workspace_id)
    else:
        found = await asyncio.to_thread(storage.interrupted_instances, workspace_id)
    for agent, key in found:
        if agent in orchestrator.agents:
            _log.info("resuming the interrupted turn of %s@%s", agent, key,
                      extra={"event": "orchestrator.resumeAtStart", "agentName": agent,
                             "instanceKey": key})
            await orchestrator.spawn_instance(agent, key)
