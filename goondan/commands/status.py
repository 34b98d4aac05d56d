"""``goondan status``: the running swarms, their processes, uptime, restarts and queue depths.

Asks each orchestrator over its control socket (``{"command": "status"}``); see docs/cli.md,
"Service mode", for the ``--json`` shape.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import get_globals, running_swarm_options, style
from goondan.commands.store_option import (
    describe_postgres,
    resolve_store,
    store_option,
    store_summary_lines,
)
from goondan.types import JsonObject

__all__ = ["status", "swarm_status", "usage_line"]

_COLUMNS = (
    ("PROCESS", "process", 28),
    ("KIND", "kind", 10),
    ("STATUS", "status", 17),
    ("PID", "pid", 8),
    ("UPTIME", "uptime", 8),
    ("RESTARTS", "restarts", 9),
    ("QUEUED", "queued", 7),
    ("CPU", "cpu", 8),
    ("RSS", "rss", 0),
)


def _uptime(started_at: Any) -> float | None:
    if not isinstance(started_at, str) or not started_at:
        return None
    try:
        start = datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    return round(max(0.0, time.time() - start), 1)


def swarm_status(active: Any, *, timeout_s: float = 10.0) -> JsonObject:
    """The ``--json`` document of one running swarm (see docs/cli.md); ``timeout_s`` bounds
    the wait for its orchestrator's answer."""
    from goondan.errors import GoondanError
    from goondan.swarm.daemon import query_status

    out: JsonObject = {
        "swarm": active.swarm,
        "instanceKey": active.instance_key,
        "runtimeKey": active.runtime_key,
        "bundle": str(Path(active.bundle_path).parent),
        "pid": active.pid,
        "startedAt": active.started_at,
        "uptimeSeconds": _uptime(active.started_at),
        "watch": active.watch,
        "logDir": active.log_dir,
        "reachable": True,
        "processes": [],
    }
    if active.standby is not None:  # standing by for the swarm's lease: nothing runs here yet
        out["standby"] = active.standby
        return out
    try:
        doc = query_status(active, timeout_s=timeout_s)
    except GoondanError as err:
        out["reachable"], out["error"] = False, err.message
        return out
    rows: list[JsonObject] = []
    for proc in doc.get("processes") or []:
        rows.append({**proc, "kind": "agent", "uptimeSeconds": _uptime(proc.get("startedAt"))})
    for proc in doc.get("connections") or []:
        rows.append({**proc, "kind": "connector", "queued": None,
                     "uptimeSeconds": _uptime(proc.get("startedAt"))})
    out["processes"] = rows
    out["hosts"] = doc.get("hosts") or []  # pooled isolation's host processes (docs/scaling.md)
    # Tokens and cost since the swarm started (docs/observability.md "Token and cost ledger").
    out["usage"] = doc.get("usage")
    out["approvals"] = doc.get("approvals") or []  # pending ones (docs/approvals.md)
    return out


def usage_line(usage: Any) -> str | None:
    """``usage: 3 turns · tokens 1200→340 · cost $0.004920`` (``None`` without a ledger)."""
    if not isinstance(usage, dict):
        return None
    tokens = usage.get("tokenUsage") or {}
    line = (f"usage: {usage.get('turns', 0)} turns · tokens {tokens.get('prompt', 0)}→"
            f"{tokens.get('completion', 0)}")
    if usage.get("cost") is not None:
        line += f" · cost ${usage['cost']:.6f}"
    if tokens.get("unknownCalls"):
        line += f" · usage unknown for {tokens['unknownCalls']} model call(s)"
    return line


@click.command("status")
@running_swarm_options
@click.option("--all", "show_all", is_flag=True, default=False,
              help="Every swarm running under the state root (default without a bundle here).")
@click.option(
    "--json", "as_json", is_flag=True, default=False, help="Print JSON (shape: docs/cli.md)."
)
@store_option
def status(
    bundle: str | None, swarm: str | None, show_all: bool, as_json: bool, store: str | None
) -> int:
    """Show the running swarm(s): processes (agents and connectors), uptime, restarts, queues."""
    import json

    from goondan.commands.instance import format_uptime
    from goondan.swarm.daemon import locate_running
    from goondan.swarm.state import running_records

    options = get_globals()
    location, state_root = resolve_store(store, options.resolve_state_root)
    store_doc = describe_postgres(location) if location.kind == "postgres" else None
    bundle = bundle or options.bundle
    here = Path.cwd()
    if show_all or (bundle is None and not (here / "goondan.yaml").is_file()):
        records = running_records(state_root)
    else:
        found = locate_running(state_root, bundle, swarm, standby=True)
        records = [found] if found is not None else []
    swarms = [swarm_status(active) for active in records]
    if as_json or options.json_errors:
        doc: JsonObject = {"swarms": swarms} if store_doc is None else {
            "store": store_doc, "swarms": swarms, **_failover(store_doc, swarm),
        }
        click.echo(json.dumps(doc, ensure_ascii=False, indent=2))
        return 0
    for line in store_summary_lines(store_doc) if store_doc is not None else []:
        click.echo(line)
    if not swarms:
        click.echo(f"No swarm is running under {state_root}.")
        return 0
    for index, doc in enumerate(swarms):
        if index:
            click.echo("")
        head = (f"Swarm {doc['swarm']} (instanceKey={doc['instanceKey']}, pid {doc['pid']}, "
                f"up {format_uptime(doc['uptimeSeconds'])}{', watching' if doc['watch'] else ''})")
        click.echo(style(head, options.color, bold=True))
        click.echo(f"  bundle: {doc['bundle']}")
        usage = usage_line(doc.get("usage"))
        if usage is not None:
            click.echo(f"  {usage}")
        if doc.get("standby") is not None:
            who = doc["standby"]
            click.echo(f"  standing by: the swarm's lease is held by {who.get('host', '?')} "
                       f"pid {who.get('pid', '?')} ({who.get('stateRoot', '?')})")
            continue
        if not doc["reachable"]:
            click.echo(f"  not answering: {doc.get('error')}")
            continue
        if not doc["processes"]:
            click.echo("  no agent process yet (agents start on their first event)")
            continue
        click.echo("  " + style(_line({c[1]: c[0] for c in _COLUMNS}), options.color, bold=True))
        for proc in doc["processes"]:
            cells = {
                **proc,
                "uptime": format_uptime(proc.get("uptimeSeconds")),
                "pid": proc.get("pid") or "-",
                "queued": "-" if proc.get("queued") is None else proc["queued"],
                **_usage_cells(proc),
            }
            click.echo("  " + _line(cells))
        _hosts(doc.get("hosts") or [])
        for proc in doc["processes"]:
            if proc.get("lastError") and proc.get("consecutiveCrashes"):
                click.echo(
                    f"  {proc['process']}: last error "
                    f"({proc['consecutiveCrashes']} crashes in a row): "
                    f"{proc['lastError']}"
                )
        _approvals(doc.get("approvals") or [])
    return 0


def _mib(value: Any) -> str:
    return "-" if not isinstance(value, int) else f"{value / 1048576:.1f}M"


def _usage_cells(proc: JsonObject) -> dict[str, str]:
    """CPU seconds and RSS of a process row; an instance on a pooled host shows its even share
    of the host's figures, marked ``~`` (docs/scaling.md "Pooled hosts")."""
    if proc.get("host") is not None:
        cpu, rss = proc.get("cpuShareSeconds"), proc.get("rssShareBytes")
        return {"cpu": "-" if cpu is None else f"~{cpu:.1f}s",
                "rss": "-" if rss is None else "~" + _mib(rss)}
    cpu = proc.get("cpuSeconds")
    return {"cpu": "-" if cpu is None else f"{cpu:.1f}s", "rss": _mib(proc.get("rssBytes"))}


def _hosts(hosts: list[JsonObject]) -> None:
    """The host processes of pooled isolation and the instances on each."""
    for host in hosts:
        instances = host.get("instances") or []
        cpu = host.get("cpuSeconds")
        cpu_text = "-" if cpu is None else f"{cpu:.1f}s"
        click.echo(f"  host {host.get('host')}: pid {host.get('pid') or '-'}, "
                   f"{host.get('status')}, restarts {host.get('restarts', 0)}, "
                   f"cpu {cpu_text}, rss {_mib(host.get('rssBytes'))}, "
                   f"{len(instances)} instance(s): {', '.join(instances) or '-'}")


def _failover(store_doc: JsonObject, swarm: str | None) -> JsonObject:
    """``active`` (the node holding the swarm's lease) and ``standbys`` (docs/cli.md)."""
    from goondan.swarm.leadership import failover_status

    leases = store_doc.get("leases")
    return failover_status(leases if isinstance(leases, list) else [], swarm)


def _approvals(rows: list[JsonObject]) -> None:
    """Pending approvals, per instance (``goondan approvals list`` shows their arguments)."""
    from goondan.secrets import mask

    by_instance: dict[str, list[JsonObject]] = {}
    for row in rows:
        by_instance.setdefault(f"{row.get('agent')}.{row.get('instanceKey')}", []).append(row)
    for name, waiting in sorted(by_instance.items()):
        click.echo(f"  {name} waits for approval: "
                   + mask(", ".join(f"{r.get('id')} ({r.get('tool')})" for r in waiting)))


def _line(cells: dict[str, Any]) -> str:
    return "  ".join(str(cells.get(key, "-")).ljust(width) if width else str(cells.get(key, "-"))
                     for _, key, width in _COLUMNS).rstrip()
