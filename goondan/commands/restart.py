"""``goondan restart``: ask the running orchestrator to replace agent processes gracefully.

The command talks to the orchestrator over its control socket (path in
``runtime/active.json``). Each selected process drains — its running turn finishes and is
folded — and is respawned with its history (``--fresh`` clears the agent's history first).
"""

from __future__ import annotations

import click

from goondan.commands.common import get_globals

__all__ = ["restart"]


@click.command("restart")
@click.option("-a", "--agent", default=None, help="Restart only this agent's processes [default: all].")
@click.option("--fresh", is_flag=True, default=False, help="Clear the agent's conversation history too.")
@click.option("-i", "--instance-key", default=None,
              help="Orchestrator instance key [default: the most recently started swarm].")
def restart(agent: str | None, fresh: bool, instance_key: str | None) -> int:
    """Gracefully restart the running swarm's agent processes (history kept unless --fresh)."""
    import asyncio
    from pathlib import Path

    from goondan.errors import AgentError, ConfigError
    from goondan.ipc.service import send_control
    from goondan.ipc.state import read_active

    options = get_globals()
    state_root = options.resolve_state_root()
    active = read_active(state_root, instance_key)
    if active is None or not active.alive or not active.control_socket:
        raise ConfigError(
            "no running swarm found" + (f" with instanceKey {instance_key!r}" if instance_key else ""),
            code="E_RUN_NOT_RUNNING", suggestion="start it with 'goondan run'",
        )
    answer = asyncio.run(send_control(Path(active.control_socket),
                                      {"command": "restart", "agent": agent, "fresh": fresh}))
    if not answer.get("ok"):
        raise AgentError(str(answer.get("message")), code=str(answer.get("code") or "E_AGENT"),
                         suggestion=answer.get("suggestion"))
    restarted = answer.get("restarted") or []
    what = ", ".join(restarted) if restarted else "no running agent process"
    click.echo(f"Orchestrator {active.instance_key} (pid {active.pid}): restarted {what}"
               + (" with fresh history" if fresh else ""))
    return 0
