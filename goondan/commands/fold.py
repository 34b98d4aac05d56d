"""``goondan fold [KEY | --all] [--dry-run]``: fold leftover events into ``base.jsonl``.

Uses exactly the recovery the runtime runs at instance start (``InstanceStore.load``): leftover
events are folded, an interrupted commit is completed without applying anything twice, and
missing tool results are filled in. Running it again finds nothing to do.

``--all`` never stops at one instance: a locked (running) instance is reported as skipped (its
own process recovers it; exit status unaffected), any other failure is reported and makes the
exit status that error's code once every instance was tried. See docs/conversations.md. With
``--store postgresql://…`` the same recovery runs on that store's instances
(:func:`_fold_stored`, through the storage contract).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import get_globals, store_option
from goondan.conversation.codec import TORN_LINE
from goondan.errors import GoondanError, InstanceLockedError, UsageError
from goondan.secrets import mask
from goondan.workspace.catalog import InstanceInfo, iter_instances, select_instances
from goondan.workspace.store import InstanceStore, RecoveryPlan, preview_recovery

__all__ = ["fold"]


def _summary(plan: RecoveryPlan) -> str:
    if not plan.leftover_events and not plan.synthetic_results and not plan.dropped_results:
        return "nothing to fold"
    parts = []
    if plan.leftover_events:
        applied = plan.leftover_events - plan.already_committed
        parts.append(f"folded {applied} leftover event{'s' * (applied != 1)}")
        if plan.already_committed:
            parts.append(f"{plan.already_committed} already committed")
    if plan.synthetic_results:
        parts.append(
            f"added {plan.synthetic_results} synthetic tool "
            f"result{'s' * (plan.synthetic_results != 1)}"
        )
    if plan.dropped_results:
        parts.append(
            f"dropped {plan.dropped_results} orphan or duplicate "
            f"tool result{'s' * (plan.dropped_results != 1)}"
        )
    return ", ".join(parts) + f"; {len(plan.state.next_messages)} messages"


def _fold_one(info: InstanceInfo, dry_run: bool) -> tuple[RecoveryPlan, list[Any]]:
    paths = info.paths
    # The calls of a turn still open in the journal (parked on an approval, or to be resumed)
    # stay unanswered, as the runtime's own recovery leaves them (docs/conversations.md).
    keep = _open_turn(paths.journal, info.label)
    plan = preview_recovery(paths, keep_open_calls=keep)
    dirty = (plan.changed or paths.base_prev.exists() or paths.base_tmp.exists()
             or (paths.events.exists() and paths.events.stat().st_size > 0)
             or any(d.code == TORN_LINE for d in plan.diagnostics))
    if dry_run or not dirty:
        return plan, plan.diagnostics
    with InstanceStore.open_dir(info.paths, agent_name=info.agent_name or "",
                                instance_key=info.instance_key,
                                workspace_id=info.workspace_id) as store:
        store.load(keep_open_calls=keep)
        return plan, store.recovery_diagnostics


def _open_turn(journal: Path, label: str) -> bool:
    """True when the turn journal ``journal`` has a turn open."""
    from goondan.workspace.files import read_bytes
    from goondan.workspace.journal import open_turn_of, parse_records

    return open_turn_of(parse_records(read_bytes(journal), f"{label}/turn")) is not None


def _fold_stored(backend: Any, where: str, found: Any,
                 dry_run: bool) -> tuple[RecoveryPlan, list[Any]]:
    """:func:`_fold_one` for an instance of a PostgreSQL store: the same recovery
    (``open_instance`` + ``load``), previewed from a snapshot read without the lock. The
    calls of a turn still open in the journal (parked on an approval, or to be resumed) are
    left unanswered, as the runtime's own recovery leaves them."""
    from goondan.commands.store_read import decoded, snapshot_of
    from goondan.workspace.journal import open_turn_of, parse_records
    from goondan.workspace.plans import plan_recovery

    snap = snapshot_of(backend, found)
    messages, events, diagnostics = decoded(snap, where)
    journal = "".join(line + "\n" for line in snap.journal).encode("utf-8")
    keep = open_turn_of(parse_records(journal, f"{found.label}/turn")) is not None
    plan = plan_recovery(messages, events, events_file=f"{found.label}/events",
                         base_file=f"{found.label}/messages", keep_open_calls=keep)
    plan.diagnostics[:0] = diagnostics
    if dry_run or not (plan.changed or snap.events):
        return plan, plan.diagnostics
    with backend.open_instance(found.workspace_id, found.agent_name, found.instance_key,
                               create=False) as store:
        store.load(keep_open_calls=keep)
        return plan, store.recovery_diagnostics


@click.command("fold")
@click.argument("key", required=False)
@click.option("--all", "fold_all", is_flag=True, help="Fold every instance under the state root.")
@click.option("--agent", "-a", default=None, help="Only instances of this agent.")
@click.option("--workspace", "workspace_id", default=None, help="Only this workspace.")
@click.option("--dry-run", is_flag=True, help="Show what would change without writing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--state-root", type=click.Path(), default=None, help="State root to use.")
@store_option
def fold(key: str | None, fold_all: bool, agent: str | None, workspace_id: str | None,
         dry_run: bool, as_json: bool, state_root: str | None, store: str | None) -> None:
    """Fold leftover conversation events of instance KEY (or --all) into base.jsonl."""
    if bool(key) == fold_all:
        what = "not both" if fold_all else "nothing given"
        raise UsageError(
            f"fold one instance or all of them ({what})",
            suggestion="'goondan fold KEY' folds the instance KEY (see 'goondan instance list'); "
            "'goondan fold --all' folds every instance under the state root",
        )
    as_json = as_json or get_globals().json_errors
    from goondan.commands.store_read import jsonl_root, opened_store, postgres_location

    location = postgres_location(store)
    if location is not None:
        with opened_store(location) as backend:
            from goondan.commands.store_read import find_stored, iter_stored

            where = location.display
            stored = (list(iter_stored(backend, workspace_id=workspace_id, agent=agent))
                      if fold_all else find_stored(backend, where, str(key), agent=agent,
                                                   workspace_id=workspace_id))
            _fold_targets(stored, lambda i: _fold_stored(backend, where, i, dry_run),
                          fold_all=fold_all, dry_run=dry_run, as_json=as_json)
        return
    root = get_globals().resolve_state_root(jsonl_root(store, state_root))
    if fold_all:
        targets = [i for i in iter_instances(root, workspace_id=workspace_id)
                   if not i.error and (agent is None or i.agent_name == agent)]
    else:
        assert key is not None
        targets = select_instances(root, key, agent=agent, workspace_id=workspace_id)
    _fold_targets(targets, lambda i: _fold_one(i, dry_run), fold_all=fold_all, dry_run=dry_run,
                  as_json=as_json)


def _fold_targets(targets: list[Any], fold_one: Any, *, fold_all: bool, dry_run: bool,
                  as_json: bool) -> None:
    """Fold each target (anything with ``label`` and ``workspace_id``) and report it."""
    rows: list[dict[str, Any]] = []
    failures: list[GoondanError] = []
    for info in targets:
        try:
            plan, diagnostics = fold_one(info)
        except GoondanError as exc:
            if not fold_all:
                raise
            # --all reports the instance and goes on. A locked instance is being run: its
            # process does this recovery itself, so skipping it is not a failure.
            if not isinstance(exc, InstanceLockedError):
                failures.append(exc)
            rows.append({"instance": info.label, "workspaceId": info.workspace_id,
                         "skipped": True, "error": exc.to_dict()})
            if not as_json:
                verb = "skipped" if isinstance(exc, InstanceLockedError) else "failed"
                click.echo(
                    mask(f"{info.label} ({info.workspace_id}): {verb}: [{exc.code}] {exc.message}")
                )
            continue
        rows.append({"instance": info.label, "workspaceId": info.workspace_id,
                     "leftoverEvents": plan.leftover_events,
                     "alreadyCommitted": plan.already_committed,
                     "syntheticResults": plan.synthetic_results,
                     "droppedResults": plan.dropped_results,
                     "messages": len(plan.state.next_messages), "dryRun": dry_run,
                     "diagnostics": [d.to_dict() for d in diagnostics]})
        if not as_json:
            text = _summary(plan)
            if dry_run:
                text = (
                    text.replace("folded", "would fold")
                    .replace("added", "would add")
                    .replace("dropped", "would drop")
                )
            click.echo(mask(f"{info.label} ({info.workspace_id}): {text}"))
            for d in diagnostics:
                if d.code not in ("W_WORKSPACE_RECOVERED", "W_WORKSPACE_REPAIRED"):
                    click.echo(mask(f"  {d.severity}: [{d.code}] {d.message}"))
    if as_json:
        click.echo(mask(json.dumps({"instances": rows}, ensure_ascii=False, indent=2)))
    elif not targets:
        click.echo("No instances found.")
    if failures:
        raise click.exceptions.Exit(failures[0].exit_code)
