"""``goondan restart``: ask the running orchestrator to replace agent processes gracefully.

The command finds the swarm from ``--bundle`` (default: the current directory's bundle, else
the only running swarm: :func:`goondan.commands.common.find_running`) and talks to its orchestrator
over the control socket. Each selected process drains — its running turn finishes and is folded —
and is respawned with its history (``--fresh`` clears the agent's history first).
"""

from __future__ import annotations

import click

from goondan.commands.common import find_running, get_globals, running_swarm_options

__all__ = ["restart", "restart_processes"]


@click.command("restart")
@running_swarm_options
@click.option(
    "-a", "--agent", default=None, help="Restart only this agent's processes [default: all]."
)
@click.option(
    "--fresh", is_flag=True, default=False, help="Clear the agent's conversation history too."
)
@click.option(
    "--full",
    is_flag=True,
    default=False,
    help="Stop the whole swarm (orchestrator, agents, connectors) and start it again in the "
    "background, with the bundle and .env files read anew.",
)
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the outcome as JSON.")
def restart(bundle: str | None, swarm: str | None, agent: str | None, fresh: bool, full: bool,
            as_json: bool) -> int:
    """Gracefully restart the running swarm's agent processes (history kept unless --fresh)."""
    if full:
        if agent is not None or fresh:
            raise click.UsageError(
                "--full restarts the whole swarm: it takes neither --agent nor --fresh"
            )
        return _restart_full(bundle, swarm, as_json=as_json)
    return restart_processes(bundle, swarm, agent=agent, fresh=fresh, as_json=as_json)


def _restart_full(bundle: str | None, swarm: str | None, *, as_json: bool) -> int:
    """``goondan stop`` then ``goondan run --detach`` with the same bundle, Swarm and --watch."""
    import json
    import os
    from pathlib import Path

    from goondan.commands.stop import grace_of
    from goondan.errors import ConfigError
    from goondan.ipc.logs import log_dir_for
    from goondan.swarm.daemon import detached_argv, start_detached, stop_running

    options = get_globals()
    state_root = options.resolve_state_root()
    active = find_running(bundle, swarm)
    from goondan.storage.url import ENV_STORE, parse_store
    from goondan.swarm.stored import check_same_store

    # the new orchestrator gets this environment: a swarm on PostgreSQL needs its URL there
    check_same_store(active, parse_store(None), where=ENV_STORE)
    root = Path(active.bundle_path).parent
    report = stop_running(active, grace_s=grace_of(active) + 5.0)
    if report.left_running:
        raise ConfigError(
            f"the swarm did not stop (pids {report.left_running} still run)",
            code="E_RUN_STOP_FAILED",
            suggestion="kill them, then 'goondan run --detach' again",
        )
    argv = detached_argv(state_root, root, active.swarm, watch=active.watch)
    started = start_detached(
        argv,
        state_root=state_root,
        key=active.runtime_key,
        log_dir=Path(active.log_dir)
        if active.log_dir
        else log_dir_for(state_root, active.runtime_key),
        env=os.environ,
        cwd=Path.cwd(),
    )
    if as_json or options.json_errors:
        click.echo(
            json.dumps(
                {"instanceKey": started.instance_key, "oldPid": active.pid, "pid": started.pid}
            )
        )
    elif not options.quiet:
        click.echo(
            f"Swarm {started.swarm} restarted "
            f"(instanceKey={started.instance_key}, pid {active.pid} -> "
            f"{started.pid})"
        )
    return 0


def restart_processes(
    bundle: str | None,
    swarm: str | None,
    *,
    agent: str | None = None,
    instance_key: str | None = None,
    fresh: bool = False,
    as_json: bool = False,
) -> int:
    """Ask the running swarm to restart processes (all, one agent's, or one conversation's)."""
    import asyncio
    import json
    from pathlib import Path

    from goondan.errors import AgentError
    from goondan.ipc.controlwire import send_control

    options = get_globals()
    active = find_running(bundle, swarm)
    request: dict[str, object] = {"command": "restart", "agent": agent, "fresh": fresh}
    if instance_key is not None:
        request["instanceKey"] = instance_key
    answer = asyncio.run(send_control(Path(active.control_socket), request))
    if not answer.get("ok"):
        raise AgentError(str(answer.get("message")), code=str(answer.get("code") or "E_AGENT"),
                         suggestion=answer.get("suggestion"))
    restarted = answer.get("restarted") or []
    if as_json or options.json_errors:
        click.echo(
            json.dumps(
                {"instanceKey": active.instance_key, "pid": active.pid, "restarted": restarted}
            )
        )
        return 0
    what = ", ".join(restarted) if restarted else "no running agent process"
    if not options.quiet:
        click.echo(f"Orchestrator {active.instance_key} (pid {active.pid}): restarted {what}"
                   + (" with fresh history" if fresh else ""))
    return 0
