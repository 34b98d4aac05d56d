"""``goondan send``: deliver one message to a swarm that ``goondan run`` keeps running.

TEXT ``-`` reads the message from stdin (a command line argument is limited to 128 KiB on Linux).
The message goes over the orchestrator's control socket (``runtime/control/<key>.sock``, see
docs/orchestrator.md) as ``{"command": "request", "input", "agent"?, "instanceKey"?}``; the
orchestrator stores it in the Swarm's durable inbox, acknowledges it (``"ack": true``: an
``{"accepted": {"id", …}}`` line), queues it on (agent, instanceKey) like any event, and the
answer is printed; ``--no-wait`` exits at the acknowledgement and prints the message's id. A
control line may be up to 16 MiB (:data:`goondan.ipc.controlwire.MAX_CONTROL_BYTES`); a larger
message fails with ``E_RUN_MESSAGE_TOO_LARGE`` (exit 2) before anything is sent.
When a tool call needs approval the turn parks and the answer is
``{"status": "waitingForApproval", "approvals": [...]}`` (``--wait``: the final answer instead).
The swarm is found from ``--bundle`` (default: the current directory's bundle, else the
only running swarm: :func:`goondan.commands.common.find_running`).
"""

from __future__ import annotations

import click

from goondan.commands.common import (
    find_running,
    get_globals,
    instance_key_option,
    register_bundle_secrets,
    running_swarm_options,
)
from goondan.commands.store_option import store_option

__all__ = ["send"]


@click.command("send")
@click.argument("text")
@running_swarm_options
@click.option("-a", "--agent", default=None, help="Agent to ask [default: the entry agent].")
@instance_key_option
@click.option("--timeout", "timeout_s", default=600.0, show_default=True, type=float,
              help="Seconds to wait for the answer.")
@click.option(
    "--no-wait",
    "no_wait",
    is_flag=True,
    default=False,
    help="Exit once the message is stored durably (print its id); do not wait for the answer.",
)
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the answer as JSON.")
@click.option("--wait", "wait", is_flag=True, default=False,
              help="When a tool call waits for approval, wait for the final answer instead of "
              "returning.")
@store_option
def send(
    text: str,
    bundle: str | None,
    swarm: str | None,
    agent: str | None,
    instance_key: str | None,
    timeout_s: float,
    as_json: bool,
    wait: bool,
    no_wait: bool = False,
    store: str | None = None,
) -> int:
    """Send TEXT to a running swarm (goondan run --detach, or goondan run elsewhere) and print the
    answer.

    TEXT '-' reads the message from stdin (up to 16 MiB, JSON-encoded). When a tool call needs
    approval the turn parks: send prints the pending approvals and exits 0 (--wait: it waits
    for the decision and the final answer)."""
    import json

    from goondan.errors import GoondanError
    from goondan.secrets import mask

    as_json = as_json or get_globals().json_errors
    try:
        _use_store(store)
        return _send(text, bundle, swarm, agent, instance_key, timeout_s, as_json, wait, no_wait,
                     store)
    except GoondanError as err:
        # --json: stdout always holds one answer object, a failure before any answer too
        # (docs/cli.md); the error itself goes to stderr as every --json error does
        if as_json:
            failed = {"ok": False, "code": err.code, "message": err.message}
            if err.suggestion:
                failed["suggestion"] = err.suggestion
            click.echo(mask(json.dumps(failed, ensure_ascii=False)))
        raise


def _use_store(store: str | None) -> None:
    """``--store``: a path is the state root the swarm runs under; with a PostgreSQL store the
    swarm is still found under the local state root (its control socket is there), and it
    stores the message in the store's queue before acknowledging it (docs/cli.md)."""
    from goondan.storage.url import parse_store

    location = parse_store(store)  # E_STORE_URL for a bad value
    if location.kind == "jsonl" and location.path is not None:
        get_globals().state_root = str(location.path)


def _send(
    text: str,
    bundle: str | None,
    swarm: str | None,
    agent: str | None,
    instance_key: str | None,
    timeout_s: float,
    as_json: bool,
    wait: bool,
    no_wait: bool,
    store: str | None = None,
) -> int:
    import asyncio
    import json
    import sys
    from pathlib import Path

    from goondan.errors import AgentError, IpcError
    from goondan.ipc.controlwire import stream_control
    from goondan.secrets import mask

    options = get_globals()
    active = find_running(bundle, swarm)
    from goondan.storage.url import parse_store
    from goondan.swarm.stored import check_same_store

    check_same_store(active, parse_store(store), where="--store")
    # This process resolved nothing: the answer may repeat a key of the running bundle.
    register_bundle_secrets(options.resolve_state_root(), bundles=(Path(active.bundle_path),))
    if text == "-":
        text = sys.stdin.read()
    request: dict[str, object] = {"command": "request", "input": text, "ack": True}
    if agent:
        request["agent"] = agent
    # the conversation repl and run use too (docs/cli.md "Conversations")
    request["instanceKey"] = instance_key or active.instance_key
    if wait:
        request["waitForApproval"] = True
    accepted: list[dict[str, object]] = []

    def on_accepted(line: dict[str, object]) -> bool:
        info = line.get("accepted")
        accepted.append(info if isinstance(info, dict) else {})
        return no_wait

    try:
        answer = asyncio.run(
            stream_control(
                Path(active.control_socket), request, timeout_s=timeout_s, on_accepted=on_accepted
            )
        )
    except IpcError as err:
        if not accepted:
            raise
        raise IpcError(
            f"{err.message}; the message was accepted (id "
            f"{accepted[0].get('id')}) and is not lost: a "
            "swarm that stopped runs it when started again",
            code=err.code,
            suggestion="see 'goondan logs'; start the swarm again with 'goondan run' if it stopped",
        ) from err
    if no_wait and accepted and "ok" not in answer:
        click.echo(
            json.dumps(accepted[0], ensure_ascii=False)
            if as_json
            else str(accepted[0].get("id") or "")
        )
        return 0
    if not answer.get("ok"):  # printed by send() like any other failure
        raise AgentError(str(answer.get("message")), code=str(answer.get("code") or "E_AGENT"),
                         suggestion=answer.get("suggestion"))
    if as_json:
        click.echo(mask(json.dumps(answer, ensure_ascii=False)))
    elif answer.get("status") == "waitingForApproval":
        approvals = answer.get("approvals") or []
        click.echo(f"Waiting for approval ({len(approvals)}):")
        for row in approvals:
            args = json.dumps(row.get("args"), ensure_ascii=False)
            click.echo(mask(f"  {row.get('id')}  {row.get('tool')} {args}"
                            + (f"  ({row.get('reason')})" if row.get("reason") else "")))
        click.echo(
            "Decide with: goondan approvals approve ID | goondan approvals deny ID --reason TEXT"
        )
    else:
        click.echo(mask(str(answer.get("response") or "")))
    return 0
