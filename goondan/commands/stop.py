"""``goondan stop``: stop a running swarm gracefully (then by force after the grace period).

See docs/cli.md, "Service mode", and :func:`goondan.swarm.daemon.stop_running`.
"""

from __future__ import annotations

import click

from goondan.commands.common import find_running, get_globals, running_swarm_options

__all__ = ["grace_of", "stop"]


@click.command("stop")
@running_swarm_options
@click.option("--grace", "grace_s", type=click.FloatRange(min=0), default=None,
              help="Seconds to wait for the graceful stop before SIGKILL [default: the Swarm's "
              "shutdown grace period + 5 s].")
@click.option("--json", "as_json", is_flag=True, default=False, help="Print the outcome as JSON.")
def stop(bundle: str | None, swarm: str | None, grace_s: float | None, as_json: bool) -> int:
    """Stop the running swarm: running Turns finish and are folded, every process exits."""
    import json

    from goondan.swarm.daemon import stop_running

    options = get_globals()
    active = find_running(bundle, swarm, standby=True)  # a standby holds nothing: SIGTERM
    if grace_s is None:
        grace_s = grace_of(active) + 5.0
    report = stop_running(active, grace_s=grace_s)
    if as_json or options.json_errors:
        click.echo(json.dumps(report.to_dict()))
    elif not options.quiet:
        how = "" if report.mode == "graceful" else " (forced after the grace period)"
        what = "standby of swarm" if active.standby is not None else "Swarm"
        click.echo(
            f"{what[0].upper()}{what[1:]} {active.swarm} stopped{how} "
            f"(instanceKey={active.instance_key}, pid={active.pid})"
        )
    return 0 if not report.left_running else 1


def grace_of(active: object) -> float:
    """The Swarm's shutdown grace period in seconds (30 s when the bundle cannot be read)."""
    from pathlib import Path

    from goondan.config import load_bundle
    from goondan.swarm.state import ActiveRuntime

    assert isinstance(active, ActiveRuntime)
    try:
        return (
            load_bundle(Path(active.bundle_path)).swarm_spec(active.swarm).shutdown_grace_ms / 1000
        )
    except Exception:  # a bundle edited into an invalid state must not block stopping
        return 30.0
