"""``goondan send``: deliver one message to a swarm that ``goondan run`` keeps running.

TEXT ``-`` reads the message from stdin (a command line argument is limited to 128 KiB on Linux).
The message goes over the orchestrator's control socket (``runtime/control/<key>.sock``, see
docs/orchestrator.md) as ``{"command": "request", "input", "agent"?, "instanceKey"?}``; the
orchestrator queues it on (agent, instanceKey) like any event and the answer is printed. A
control line may be up to 16 MiB (:data:`goondan.ipc.controlwire.MAX_CONTROL_BYTES`); a larger
message fails with ``E_RUN_MESSAGE_TOO_LARGE`` (exit 2) before anything is sent.
When a tool call needs approval the turn parks and the answer is
``{"status": "waitingForApproval", "approvals": [...]}`` (``--wait``: the final answer instead).
The swarm is found from ``--bundle`` (default: the current directory's bundle, else the
most recently started swarm).
"""

from __future__ import annotations

import click

from goondan.commands.common import (
    find_running,
    get_globals,
    register_bundle_secrets,
    running_swarm_options,
)

__all__ = ["send"]


@click.command("send")
@click.argument("text")
@running_swarm_options
@click.option("-a", "--agent", default=None, help="Agent to ask [default: the entry agent].")
@click.option("-k", "--instance-key", default=None, help="Conversation key [default: control].")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=float,
              help="Seconds to wait for the answer.")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the answer as JSON.")
@click.option("--wait", "wait", is_flag=True, default=False,
              help="When a tool call waits for approval, wait for the final answer instead of "
              "returning.")
def send(text: str, bundle: str | None, swarm: str | None, agent: str | None, instance_key: str | None,
         timeout_s: float, as_json: bool, wait: bool) -> int:
    """Send TEXT to a running swarm (goondan run --detach, or goondan run elsewhere) and print the answer.

    TEXT '-' reads the message from stdin (up to 16 MiB, JSON-encoded). When a tool call needs
    approval the turn parks: send prints the pending approvals and exits 0 (--wait: it waits
    for the decision and the final answer)."""
    import asyncio
    import json
    import sys
    from pathlib import Path

    from goondan.errors import AgentError
    from goondan.ipc.controlwire import send_control
    from goondan.secrets import mask

    options = get_globals()
    as_json = as_json or options.json_errors
    active = find_running(bundle, swarm)
    # This process resolved nothing: the answer may repeat a key of the running bundle.
    register_bundle_secrets(options.resolve_state_root(), bundles=(Path(active.bundle_path),))
    if text == "-":
        text = sys.stdin.read()
    request: dict[str, object] = {"command": "request", "input": text}
    if agent:
        request["agent"] = agent
    if instance_key:
        request["instanceKey"] = instance_key
    if wait:
        request["waitForApproval"] = True
    answer = asyncio.run(send_control(Path(active.control_socket), request, timeout_s=timeout_s))
    if as_json:
        click.echo(mask(json.dumps(answer, ensure_ascii=False)))
    if not answer.get("ok"):
        raise AgentError(str(answer.get("message")), code=str(answer.get("code") or "E_AGENT"),
                         suggestion=answer.get("suggestion"))
    if answer.get("status") == "waitingForApproval" and not as_json:
        approvals = answer.get("approvals") or []
        click.echo(f"Waiting for approval ({len(approvals)}):")
        for row in approvals:
            args = json.dumps(row.get("args"), ensure_ascii=False)
            click.echo(mask(f"  {row.get('id')}  {row.get('tool')} {args}"
                            + (f"  ({row.get('reason')})" if row.get("reason") else "")))
        click.echo("Decide with: goondan approvals approve ID | goondan approvals deny ID --reason TEXT")
    elif not as_json:
        click.echo(mask(str(answer.get("response") or "")))
    return 0
