"""``goondan instance list`` and ``goondan instance delete KEY``: conversation instances on disk.

When an orchestrator (``goondan run``) is running under the state root, ``instance list`` also
shows its live processes (:data:`PROCESS_COLUMNS`: process, agent, instance key, pid, status,
uptime), read from ``runtime/orchestrators/*.json`` and the status snapshots; ``--json`` adds
them as ``"processes"``.

Built to be extended: rows come from :func:`collect_rows` as plain dicts and are printed through
the :data:`COLUMNS` table, so the orchestrator can add live-process columns (``pid``, ``state``)
by appending to ``COLUMNS`` and enriching rows in an ``ROW_ENRICHERS`` hook, and can attach more
subcommands (``restart``) with ``instance.add_command(...)``. With ``--store postgresql://…``
``list`` and ``delete`` read that store through the storage contract (:mod:`.store_read`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import bundle_option, get_globals, store_option, style
from goondan.secrets import mask
from goondan.workspace.catalog import (
    InstanceInfo,
    delete_instance,
    iter_instances,
    select_instances,
)

__all__ = [
    "COLUMNS",
    "PROCESS_COLUMNS",
    "ROW_ENRICHERS",
    "Column",
    "collect_processes",
    "collect_rows",
    "format_uptime",
    "instance",
    "plural",
]


@dataclass(frozen=True)
class Column:
    """One column of ``instance list``: header, row key, width (0 = no padding)."""

    header: str
    key: str
    width: int = 0


COLUMNS: list[Column] = [
    Column("INSTANCE KEY", "instanceKey", 32),
    Column("AGENT", "agentName", 16),
    Column("STATUS", "status", 11),
    Column("CREATED", "created", 19),
    Column("UPDATED", "updated", 19),
    Column("WORKSPACE", "workspaceId", 0),
]

# Callables (row, info) -> None that add keys to a row, e.g. the live process state.
ROW_ENRICHERS: list[Callable[[dict[str, Any], InstanceInfo], None]] = []

PROCESS_COLUMNS: list[Column] = [
    Column("PROCESS", "process", 24),
    Column("AGENT", "agentName", 16),
    Column("INSTANCE KEY", "instanceKey", 20),
    Column("PID", "pid", 8),
    Column("STATUS", "status", 16),
    Column("UPTIME", "uptime", 0),
]


def format_uptime(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``2h07m``, ``3d04h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    if total < 3600:
        return f"{total // 60}m{total % 60:02d}s"
    if total < 86400:
        return f"{total // 3600}h{total % 3600 // 60:02d}m"
    return f"{total // 86400}d{total % 86400 // 3600:02d}h"


def collect_processes(state_root: Path, *, agent: str | None = None) -> list[dict[str, Any]]:
    """Live processes of the orchestrators running under ``state_root`` (none when no
    orchestrator runs; records left by a killed orchestrator are ignored)."""
    from goondan.swarm.state import list_live_processes

    rows: list[dict[str, Any]] = []
    running: set[str] = set()
    for proc in list_live_processes(state_root):
        if proc.process == "orchestrator":
            if proc.status == "running":
                running.add(proc.orchestrator_key)
            else:
                continue
        elif proc.orchestrator_key not in running:
            continue
        if agent is not None and proc.process != "orchestrator" and proc.agent_name != agent:
            continue
        row = proc.to_dict()
        row["uptime"] = format_uptime(proc.uptime_s)
        rows.append(row)
    return rows


def collect_rows(state_root: Path, *, agent: str | None = None) -> list[dict[str, Any]]:
    """Every instance as a JSON-ready row (most recently updated first)."""
    rows: list[dict[str, Any]] = []
    for info in iter_instances(state_root):
        if agent is not None and info.agent_name != agent:
            continue
        row = info.to_dict(details=False)
        row["created"] = (info.created_at or "-").replace("T", " ")[:19]
        row["updated"] = (info.updated_at or "-").replace("T", " ")[:19]
        row["agentName"] = info.agent_name or "-"
        if info.error:
            row["status"] = "invalid"
        for enrich in ROW_ENRICHERS:
            enrich(row, info)
        rows.append(row)
    rows.sort(key=lambda r: r.get("updatedAt") or "", reverse=True)
    return rows


def _render(row: dict[str, Any], columns: list[Column] | None = None) -> str:
    cells = []
    for column in COLUMNS if columns is None else columns:
        value = str(row.get(column.key, "-") if row.get(column.key) is not None else "-")
        cells.append(value.ljust(column.width) if column.width else value)
    return "  ".join(cells).rstrip()


def _stored_rows(store: Any, agent: str | None) -> list[dict[str, Any]]:
    """:func:`collect_rows` for a PostgreSQL store (read through the storage contract)."""
    from goondan.commands.store_read import iter_stored, opened_store

    rows: list[dict[str, Any]] = []
    with opened_store(store) as backend:
        for found in iter_stored(backend, agent=agent):
            row = found.row()
            row["created"] = (row["createdAt"] or "-").replace("T", " ")[:19]
            row["updated"] = (row["updatedAt"] or "-").replace("T", " ")[:19]
            rows.append(row)
    rows.sort(key=lambda r: r.get("updatedAt") or "", reverse=True)
    return rows


def _list(state_root: str | None, agent: str | None, limit: int, show_all: bool,
          as_json: bool, store: str | None = None) -> None:
    from goondan.commands.store_read import jsonl_root, postgres_location

    opts = get_globals()
    location = postgres_location(store)
    root = opts.resolve_state_root(jsonl_root(store, state_root))
    # Live processes are those of the orchestrators running under this machine's state root.
    rows = collect_rows(root, agent=agent) if location is None else _stored_rows(location, agent)
    processes = collect_processes(root, agent=agent)
    if as_json:
        for row in rows:
            row.pop("created", None)
            row.pop("updated", None)
        for row in processes:
            row.pop("uptime", None)
        document = {"instances": rows, "processes": processes}
        click.echo(mask(json.dumps(document, ensure_ascii=False, indent=2)))
        return
    if not rows:
        click.echo("No instances found.")
    else:
        shown = rows if show_all or limit == 0 else rows[:limit]
        click.echo(style(_header(COLUMNS), opts.color, bold=True))
        for row in shown:
            click.echo(mask(_render(row)))
        if len(shown) < len(rows):
            click.echo(f"... {len(rows) - len(shown)} more (use --all)")
    if processes:
        click.echo("")
        click.echo(style("Live processes", opts.color, bold=True))
        click.echo(style(_header(PROCESS_COLUMNS), opts.color, bold=True))
        for row in processes:
            click.echo(mask(_render(row, PROCESS_COLUMNS)))


def _header(columns: list[Column]) -> str:
    return "  ".join(c.header.ljust(c.width) if c.width else c.header for c in columns).rstrip()


@click.group("instance", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (bare `instance` = list).")
@click.option("--state-root", type=click.Path(), default=None, help="State root to use.")
@store_option
@click.pass_context
def instance(ctx: click.Context, as_json: bool, state_root: str | None,
             store: str | None) -> None:
    """List or delete conversation instances."""
    if ctx.invoked_subcommand is None:
        _list(state_root, None, 20, False, as_json or get_globals().json_errors, store)


@instance.command("list")
@click.option("--agent", "-a", default=None, help="Only instances of this agent.")
@click.option("--limit", "-n", type=click.IntRange(min=0), default=20, show_default=True,
              help="Show at most N rows (0 = all).")
@click.option("--all", "show_all", is_flag=True, help="Show every row.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--state-root", type=click.Path(), default=None, help="State root to use.")
@store_option
def list_instances(agent: str | None, limit: int, show_all: bool, as_json: bool,
                   state_root: str | None, store: str | None) -> None:
    """List conversation instances (most recently updated first)."""
    _list(state_root, agent, limit, show_all, as_json or get_globals().json_errors, store)


@instance.command("delete")
@click.argument("key")
@click.option("--agent", "-a", default=None, help="Only the instance of this agent.")
@click.option("--workspace", "workspace_id", default=None, help="Only in this workspace.")
@click.option("--force", "-f", is_flag=True,
              help="Do not ask, and delete even an instance that is in use.")
@click.option("--state-root", type=click.Path(), default=None, help="State root to use.")
@store_option
def delete(key: str, agent: str | None, workspace_id: str | None, force: bool,
           state_root: str | None, store: str | None) -> None:
    """Delete instance KEY: messages, extension state and metadata.

    Without --force it asks first; without a terminal to ask on, it refuses (exit 2). An
    unknown KEY prints "Instance not found: KEY" (exit 0: nothing to delete); a KEY that
    matches several instances is refused (narrow it with --agent/--workspace) unless --force
    is given.
    """
    from goondan.commands.store_read import jsonl_root, postgres_location
    from goondan.errors import WorkspaceError

    location = postgres_location(store)
    if location is not None:
        _delete_stored(location, key, agent, workspace_id, force)
        return
    root = get_globals().resolve_state_root(jsonl_root(store, state_root))
    try:
        found = select_instances(
            root, key, agent=agent, workspace_id=workspace_id, allow_many=force
        )
    except WorkspaceError as err:
        if err.code != "E_WORKSPACE_INSTANCE_NOT_FOUND":
            raise
        # workspace.md §7: deleting an absent instance is a no-op that says so.
        click.echo(mask(f"Instance not found: {key}"))
        return
    if not force:
        for info in found:  # refuse before asking, and before deleting any of several matches
            if info.locked():
                delete_instance(info)  # raises E_INSTANCE_LOCKED with the holder's pid
        if not _confirm_delete(key, found, lambda info: info.message_count()):
            return
    for info in found:
        delete_instance(info, force=force)
        click.echo(mask(f"Instance deleted: {info.label}"))


def _delete_stored(location: Any, key: str, agent: str | None, workspace_id: str | None,
                   force: bool) -> None:
    """``instance delete`` in a PostgreSQL store: the instance's rows and its approvals. An
    instance open in a process is refused even with --force (its lock is that session's)."""
    from goondan.commands.store_read import find_stored, opened_store

    with opened_store(location) as backend:
        found = find_stored(backend, location.display, key, agent=agent,
                            workspace_id=workspace_id, allow_many=force, missing_ok=True)
        if not found:
            click.echo(mask(f"Instance not found: {key}"))
            return
        def count(one: Any) -> int:
            snap = backend.snapshot(one.workspace_id, one.agent_name, one.instance_key)
            return len(snap.messages) if snap else 0

        if not force and not _confirm_delete(key, found, count):
            return
        for one in found:
            backend.delete_instance(one.workspace_id, one.agent_name, one.instance_key)
            backend.approvals(one.workspace_id).remove_instance(one.agent_name, one.instance_key)
            click.echo(mask(f"Instance deleted: {one.label}"))


def _confirm_delete(key: str, found: Sequence[Any], count: Callable[[Any], int]) -> bool:
    """Ask before ``instance delete`` deletes ``found`` (each listed with its ``count`` of
    messages); ``E_USAGE`` without a terminal to ask on."""
    import sys

    from goondan.errors import UsageError

    if not sys.stdin.isatty():
        raise UsageError(
            f"not deleting {found[0].label} without confirmation: no terminal to ask on",
            code="E_USAGE",
            suggestion=f"pass --force: goondan instance delete {key} --force",
        )
    for one in found:
        messages = count(one)
        click.echo(mask(f"  {one.label}  ({one.workspace_id}, {messages} "
                        f"{plural(messages, 'message')})"))
    if not click.confirm(f"Delete {len(found)} {plural(len(found), 'instance')}?", default=False):
        click.echo("Nothing deleted.")
        return False
    return True


def plural(count: int, word: str) -> str:
    """``message`` for 1, ``messages`` otherwise."""
    return word if count == 1 else word + "s"


@instance.command("restart")
@click.argument("key")
@click.option(
    "--agent",
    "-a",
    default=None,
    help="Only the process of this agent [default: every agent of KEY].",
)
@click.option(
    "--fresh", is_flag=True, default=False, help="Clear the agent's conversation history too."
)
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the outcome as JSON.")
@bundle_option(
    type=click.Path(), help="Bundle whose running swarm to address [default: as goondan restart]."
)
@click.option("-s", "--swarm", default=None, envvar="GOONDAN_SWARM", help="Swarm of the bundle.")
def restart_instance(key: str, agent: str | None, fresh: bool, as_json: bool, bundle: str | None,
                     swarm: str | None) -> int:
    """Restart the running processes of conversation KEY in the running swarm (history kept)."""
    from goondan.commands.restart import restart_processes

    return restart_processes(
        bundle, swarm, agent=agent, instance_key=key, fresh=fresh, as_json=as_json
    )
