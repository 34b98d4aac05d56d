"""``goondan inspect trace`` and ``inspect instance KEY --traces``: the span tree of one request.

Spans are rebuilt from the ``runtime-events.jsonl`` of every instance directory under the state
root (every agent, every process) and from the orchestrators' logs directories (ingress
events), then linked by ``parentSpanId`` (docs/observability.md "Span tree"). With ``--store
postgresql://…`` they are read from the store's span table instead (``goondan_spans``, written
by every process that runs an instance or an orchestrator on that store, on any machine): the
same span objects, the same tree. Read-only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from goondan.commands.common import get_globals, store_option, style
from goondan.errors import WorkspaceError
from goondan.runtime.eventlog import iter_event_log
from goondan.runtime.traces import (
    SpanAssembler,
    SpanRecord,
    TraceSummary,
    build_tree,
    format_tree,
    summarize_traces,
    trace_totals,
)
from goondan.secrets import mask
from goondan.types import JsonObject
from goondan.workspace.catalog import InstanceInfo, iter_instances

__all__ = ["load_spans", "logged_spans", "print_instance_traces", "span_table", "stored_spans",
           "trace", "trace_spans"]


def _event_dirs(root: Path) -> list[Path]:
    dirs = [info.paths.dir for info in iter_instances(root)]
    logs = root / "runtime" / "logs"
    if logs.is_dir():
        dirs.extend(sorted(p for p in logs.iterdir() if p.is_dir()))
    return dirs


def load_spans(root: Path, dirs: Iterable[Path] | None = None) -> list[SpanRecord]:
    """Every span recorded under ``root`` (or in ``dirs``); unfinished spans stay ``running``."""
    spans: list[SpanRecord] = []
    for directory in (_event_dirs(root) if dirs is None else dirs):
        assembler = SpanAssembler()
        for payload in iter_event_log(directory):
            record = assembler.feed(payload)
            if record is not None:
                spans.append(record)
        spans.extend(assembler.open.values())
    return spans


def logged_spans(root: Path) -> dict[str, list[tuple[JsonObject, int]]]:
    """The spans of the event logs under ``root`` by workspace, as a store keeps them
    (``stored_span``; ``goondan store copy``). An orchestrator's ingress spans go with the
    workspace of their trace's turns."""
    from goondan.runtime.span_store import stored_span

    out: dict[str, list[tuple[JsonObject, int]]] = {}
    traces: dict[str, str] = {}
    for info in iter_instances(root):
        for record in load_spans(root, [info.paths.dir]):
            out.setdefault(info.workspace_id, []).append(
                (stored_span(record), record.start_unix_nanos))
            traces[record.trace_id] = info.workspace_id
    logs = root / "runtime" / "logs"
    for record in load_spans(root, sorted(p for p in logs.iterdir() if p.is_dir())
                             if logs.is_dir() else []):
        if record.trace_id in traces:
            out[traces[record.trace_id]].append((stored_span(record), record.start_unix_nanos))
    return out


def span_table(backend: Any) -> Any:
    """The span table of a PostgreSQL backend (:class:`goondan.storage.postgres.spans.
    PostgresSpans`)."""
    return backend.spans()


def stored_spans(table: Any, trace_id: str | None) -> list[SpanRecord]:
    """The spans of the store's traces that ``trace_id`` (a prefix; None: the latest trace)
    may name — enough for :func:`trace_spans` to choose as it does among logged spans."""
    ids = table.trace_ids(None if trace_id is None else trace_id.lower())
    return [SpanRecord.from_dict(doc, start) for doc, start in table.of_traces(ids)]


def trace_spans(spans: list[SpanRecord], trace_id: str | None) -> tuple[str, list[SpanRecord]]:
    """The spans of ``trace_id`` (a unique prefix is enough), or of the latest trace for
    ``None``."""
    if not spans:
        raise WorkspaceError("no runtime events recorded yet", code="E_TRACE_NOT_FOUND",
                             suggestion="run a turn first (goondan run / goondan repl)")
    if trace_id is None:
        chosen = max(spans, key=lambda s: s.start_unix_nanos).trace_id
    else:
        ids = {s.trace_id for s in spans if s.trace_id.startswith(trace_id.lower())}
        if len(ids) != 1:
            raise WorkspaceError(
                f"trace {trace_id!r} " + ("is ambiguous" if ids else "was not found"),
                code="E_TRACE_NOT_FOUND",
                suggestion="list traces with 'goondan inspect instance KEY --traces' "
                "or use 'goondan inspect trace --last'",
            )
        chosen = ids.pop()
    return chosen, [s for s in spans if s.trace_id == chosen]


def _preorder(roots: list[SpanRecord]) -> list[SpanRecord]:
    """The tree flattened depth first: every parent before its children."""
    out: list[SpanRecord] = []
    stack = list(reversed(roots))
    while stack:
        span = stack.pop()
        out.append(span)
        stack.extend(reversed(span.children))
    return out


def _echo(text: str) -> None:
    click.echo(mask(text))


@click.command("trace")
@click.argument("trace_id", required=False)
@click.option("--last", is_flag=True, help="The most recent trace (the default without TRACE_ID).")
@click.option("--json", "as_json", is_flag=True, help="Print span objects as JSON.")
@click.option("--flat", is_flag=True, help="With --json: a flat list instead of a nested tree.")
@click.option("--state-root", type=click.Path(), default=None, help="State root to inspect.")
@store_option
def trace(
    trace_id: str | None, last: bool, as_json: bool, flat: bool, state_root: str | None,
    store: str | None,
) -> None:
    """The span tree of trace TRACE_ID (or --last) across every agent and process (with a
    PostgreSQL --store: from the store, across machines)."""
    from goondan.commands.store_read import jsonl_root, postgres_location

    opts = get_globals()
    root = opts.resolve_state_root(jsonl_root(store, state_root))
    wanted = None if last else trace_id
    location = postgres_location(store)
    if location is not None:  # the store's span table (every machine's spans)
        from goondan.commands.store_read import opened_store

        with opened_store(location) as backend:
            chosen, members = trace_spans(stored_spans(span_table(backend), wanted), wanted)
    else:
        chosen, members = trace_spans(load_spans(root), wanted)
    roots = build_tree(members)
    totals = trace_totals(members)
    if as_json:
        spans: list[Any] = (
            [s.to_dict() for s in _preorder(roots)] if flat
            else [r.to_dict(nested=True) for r in roots]
        )
        _echo(
            json.dumps({"traceId": chosen, **totals, "spans": spans}, ensure_ascii=False, indent=2)
        )
        return
    usage = totals["tokenUsage"]
    cost = totals["cost"]
    _echo(style(f"trace {chosen}", opts.color, bold=True)
          + f"  ({len(members)} spans, tokens {usage.get('prompt', 0)}→{usage.get('completion', 0)}"
          + (f", cost ${cost:.6f}" if cost is not None else "") + ")")
    for line in format_tree(roots):
        _echo(line)
    from goondan.studio.record import trace_hint

    _echo(trace_hint(root, chosen))


def _summary_line(summary: TraceSummary) -> str:
    cost = f"${summary.cost:.6f}" if summary.cost is not None else "-"
    duration = f"{summary.duration_ms:.0f} ms" if summary.duration_ms is not None else "running"
    return (
        f"  {summary.trace_id}  {summary.start_time[:19].replace('T', ' ')}  "
        f"{summary.root_name:<24} {duration:>10}  tokens {summary.usage.total_tokens:>7}  "
        f"{cost:>11}  {','.join(summary.agents)}"
        + (f"  errors {summary.errors}" if summary.errors else "")
    )


def print_instance_traces(root: Path, info: InstanceInfo | Any, *, as_json: bool,
                          limit: int, backend: Any = None) -> None:
    """``inspect instance KEY --traces``: the recent traces this instance took part in (from
    the span table of ``backend``, a PostgreSQL store, when given)."""
    if backend is None:
        spans = load_spans(root)
    else:
        table = span_table(backend)
        ids = table.traces_of_instance(info.workspace_id, info.agent_name, info.instance_key,
                                       limit)
        spans = [SpanRecord.from_dict(doc, start) for doc, start in table.of_traces(ids)]
    own = {s.trace_id for s in spans if s.instance_key == info.instance_key
           and s.agent_name == info.agent_name}
    summaries = summarize_traces(s for s in spans if s.trace_id in own)
    if limit:
        summaries = summaries[-limit:]
    if as_json:
        _echo(json.dumps({"instance": info.label, "traces": [t.to_dict() for t in summaries]},
                         ensure_ascii=False, indent=2))
        return
    _echo(f"-- traces of {info.label}: {len(summaries)} --")
    for summary in summaries:
        _echo(_summary_line(summary))
