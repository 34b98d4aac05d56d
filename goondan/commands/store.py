"""``goondan store copy --from STORE --to STORE``: move state between stores, verifiably
(docs/storage.md "Moving state: goondan store copy"; the work is :mod:`goondan.storage.copy`).

Either end is a state-root path or a ``postgresql://`` URL, so the same command moves a JSONL
state root into PostgreSQL and back. URLs are printed masked.
"""

from __future__ import annotations

import json
from typing import Any

import click

from goondan.secrets import mask

__all__ = ["store"]


@click.group("store")
def store() -> None:
    """Move state between stores (a state root, a PostgreSQL database)."""


def _location(value: str, source: str) -> Any:
    from goondan.errors import ConfigError
    from goondan.storage.url import parse_store

    if not value.strip():  # not the default state root: a copy names both of its ends
        raise ConfigError(f"{source} is empty", code="E_STORE_URL", location=source,
                          suggestion="give a state-root path or a postgresql:// URL")
    return parse_store(value, source=source)


@store.command("copy")
@click.option("--from", "source", required=True, metavar="STORE",
              help="The store to copy from: a state-root path or a postgresql:// URL.")
@click.option("--to", "target", required=True, metavar="STORE",
              help="The store to copy into: a postgresql:// URL or a state-root path.")
@click.option("--replace", is_flag=True,
              help="Overwrite target instances that exist and differ (their history is lost).")
@click.option("--dry-run", is_flag=True, help="Read both stores and say what would be copied.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def copy(source: str, target: str, replace: bool, dry_run: bool, as_json: bool) -> None:
    """Copy every instance (messages, pending events, turn journal, extension state,
    metadata), approval and queued input of one store into another, then read both back and
    compare them (and a state root's spans into a PostgreSQL store's span table). Exits 1
    when anything was refused or differs."""
    from goondan.commands.common import get_globals
    from goondan.commands.store_read import opened_store

    src, dst = _location(source, "--from"), _location(target, "--to")
    as_json = as_json or get_globals().json_errors
    if src.display == dst.display:
        from goondan.errors import UsageError

        raise UsageError(f"--from and --to are the same store ({src.display})", code="E_USAGE",
                         suggestion="copy into another state root or database")
    from goondan.storage.copy import copy_store

    with opened_store(src) as source_backend, opened_store(dst) as target_backend:
        spans = None
        root = getattr(source_backend, "state_root", None)
        if root is not None and callable(getattr(target_backend, "spans", None)):
            from goondan.commands.trace import logged_spans  # a state root's event logs

            spans = logged_spans(root)
        report = copy_store(source_backend, target_backend, replace=replace, dry_run=dry_run,
                            spans=spans)
    doc = {"from": src.display, "to": dst.display, **report.to_dict()}
    if as_json:
        click.echo(mask(json.dumps(doc, ensure_ascii=False, indent=2)))
    else:
        _print(doc)
    if not report.ok:
        raise click.exceptions.Exit(1)


def _print(doc: dict[str, Any]) -> None:
    verb = "would copy" if doc["dryRun"] else "copy"
    click.echo(mask(f"{verb} {doc['from']} -> {doc['to']}"))
    for row in doc["instances"]:
        counts = (f"{row.get('messages', 0)} messages, {row.get('events', 0)} events, "
                  f"{row.get('journalRecords', 0)} journal records, "
                  f"{row.get('extensionStates', 0)} extension states")
        click.echo(mask(f"  {row['workspaceId']} {row['agentName']}:{row['instanceKey']}: "
                        f"{row['outcome']} ({counts})"))
    totals, approvals, inputs = doc["totals"], doc["approvals"], doc["inputs"]
    click.echo(mask(
        f"instances {totals['instances']}, messages {totals['messages']}, events "
        f"{totals['events']}, journal records {totals['journalRecords']}, extension states "
        f"{totals['extensionStates']}; approvals {approvals['copied']} copied, "
        f"{approvals['unchanged']} already there, {approvals['refused']} refused; queued "
        f"inputs {inputs['copied']} copied, {inputs['unchanged']} already there, "
        f"{inputs['refused']} refused; spans {doc['spans']['copied']} copied, "
        f"{doc['spans']['unchanged']} already there, {doc['spans']['updated']} updated"))
    for problem in doc["problems"]:
        click.echo(mask(f"  problem: {problem}"), err=True)
    if doc["dryRun"]:
        click.echo("dry run: nothing was written" + ("" if doc["ok"] else
                   f"; {len(doc['problems'])} problem(s) would stop the copy"))
    elif doc["ok"]:
        click.echo("verified: the target holds exactly what the source holds")
    else:
        click.echo(f"NOT verified: {len(doc['problems'])} problem(s)", err=True)
