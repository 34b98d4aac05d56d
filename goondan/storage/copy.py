"""``goondan store copy``: move a store's state into another store, verifiably
(docs/storage.md "Moving state: goondan store copy").

Both ends are storage backends (:class:`~goondan.storage.contract.StorageBackend`), so a copy
goes either way: a JSONL state root into PostgreSQL, or back. For every instance of every
workspace of the source:

* its snapshot (:meth:`~goondan.storage.contract.StorageBackend.snapshot`) is read while the
  source instance is held open (``open_instance(create=False)``): an instance in use by a
  running swarm is not copied (``E_INSTANCE_LOCKED``), nor one that still has to be recovered
  (``needs_fold``: run ``goondan fold`` first);
* the conversation is copied **as stored**: committed messages, and the events of a turn cut
  short as events, which the target folds the same way when the instance next opens (both
  backends share the recovery planners) — nothing is folded on the way;
* the target keeps an instance that already holds exactly this content (a re-run changes
  nothing), refuses one that differs (``E_STORE_INSTANCE_EXISTS``) unless ``replace``, and is
  written whole (:meth:`~goondan.storage.contract.StorageBackend.restore`);
* then both are read back through the contract and compared message by message, record by
  record; any difference is reported.

Approvals are copied after the instances (``ApprovalIndex.restore``, as they are, decided or
not), then every queue's inputs (``InputQueue.restore``: a pending input whole, in acceptance
order; one whose start is final by its id, which keeps a repeated input refused), each compared
the same way. A target input with the same id but other content is a difference.

Spans (the ``inspect trace`` span objects, docs/storage.md "Spans"), when the caller passes
them — the command does for a JSONL state root copied into a store that keeps spans — are
upserted per workspace and read back: each must then be stored as given, except that a span
the target holds finished is not taken back to ``running``. A span that differed is
``updated`` (spans are observations: the later one wins), not refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from goondan.errors import GoondanError
from goondan.storage.contract import InstanceSnapshot, StorageBackend
from goondan.types import JsonObject

__all__ = ["CopyReport", "copy_store", "differences"]


@dataclass
class CopyReport:
    """What a copy did: one row per instance, approval counts, every difference found."""

    instances: list[dict[str, Any]] = field(default_factory=list)
    approvals: dict[str, int] = field(default_factory=lambda: {
        "copied": 0, "unchanged": 0, "refused": 0})
    inputs: dict[str, int] = field(default_factory=lambda: {
        "copied": 0, "unchanged": 0, "refused": 0})
    spans: dict[str, int] = field(default_factory=lambda: {
        "copied": 0, "unchanged": 0, "updated": 0})
    problems: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def totals(self) -> dict[str, int]:
        out = {"instances": 0, "messages": 0, "events": 0, "journalRecords": 0,
               "extensionStates": 0}
        for row in self.instances:
            if row["outcome"] in ("copied", "replaced", "unchanged", "would copy",
                                  "would replace"):
                out["instances"] += 1
                for key in ("messages", "events", "journalRecords", "extensionStates"):
                    out[key] += row[key]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "dryRun": self.dry_run, "totals": self.totals(),
                "approvals": self.approvals, "inputs": self.inputs, "spans": self.spans,
                "instances": self.instances,
                "problems": self.problems}


def _lines_differ(what: str, ours: list[str], theirs: list[str]) -> list[str]:
    found = [f"{what} #{i + 1} differs" for i, (a, b) in enumerate(zip(ours, theirs, strict=False))
             if a != b]
    if len(ours) != len(theirs):
        found.append(f"{len(ours)} {what}s in the source, {len(theirs)} in the target")
    return found


def differences(source: InstanceSnapshot, target: InstanceSnapshot) -> list[str]:
    """How ``target`` differs from ``source``, message by message, record by record."""
    found: list[str] = []
    if source.metadata != target.metadata:
        keys = sorted(k for k in {*source.metadata, *target.metadata}
                      if source.metadata.get(k) != target.metadata.get(k))
        found.append(f"metadata differs ({', '.join(keys)})")
    found += _lines_differ("message", source.messages, target.messages)
    found += _lines_differ("event", source.events, target.events)
    found += _lines_differ("journal record", source.journal, target.journal)
    for name in sorted({*source.extensions, *target.extensions}):
        if source.extensions.get(name) != target.extensions.get(name):
            found.append(f"extension state {name} differs")
    return found


def _read_held(source: StorageBackend, workspace: str, agent: str,
               key: str) -> InstanceSnapshot | None:
    with source.open_instance(workspace, agent, key, create=False):
        return source.snapshot(workspace, agent, key)


Spans = Mapping[str, list[tuple[JsonObject, int]]]  # workspace -> [(span object, start ns)]


def copy_store(source: StorageBackend, target: StorageBackend, *, replace: bool = False,
               dry_run: bool = False, spans: Spans | None = None) -> CopyReport:
    """Copy every instance and approval of ``source`` into ``target``, and ``spans`` into its
    span table (see the module doc)."""
    report = CopyReport(dry_run=dry_run)
    for workspace in source.workspaces():
        replaced: list[tuple[str, str]] = []
        for meta in list(source.instances(workspace)):
            agent, key = str(meta.get("agentName")), str(meta.get("instanceKey"))
            row = _copy_instance(source, target, workspace, agent, key, replace=replace,
                                 dry_run=dry_run, report=report)
            report.instances.append(row)
            if row["outcome"] in ("replaced", "would replace"):
                replaced.append((agent, key))
        _copy_approvals(source, target, workspace, replaced, dry_run=dry_run, report=report)
        for scope in source.queue_scopes(workspace):
            _copy_queue(source, target, workspace, scope, dry_run=dry_run, report=report)
    if spans:
        _copy_spans(target, spans, dry_run=dry_run, report=report)
    return report


def _copy_queue(source: StorageBackend, target: StorageBackend, workspace: str, scope: str, *,
                dry_run: bool, report: CopyReport) -> None:
    ours, theirs = source.queue(workspace, scope), target.queue(workspace, scope)
    try:
        existing = {r.id: r for r in theirs.records()}
        refused: set[str] = set()
        for record in ours.records():
            there = existing.get(record.id)
            if there is None and not dry_run:
                theirs.restore(record)
            if there is None:
                report.inputs["copied"] += 1
            elif there == record:
                report.inputs["unchanged"] += 1
            else:
                report.inputs["refused"] += 1
                refused.add(record.id)
                report.problems.append(f"{workspace} {scope}: input {record.id} differs in the "
                                       f"target")
        if not dry_run:
            copied = {r.id: r for r in theirs.records()}
            lost = [r.id for r in ours.records() if r.id not in refused and copied.get(r.id) != r]
            if lost:
                report.problems.append(f"{workspace} {scope}: the copy differs for input(s) "
                                       f"{', '.join(lost[:5])}")
    finally:
        ours.close()
        theirs.close()


def _copy_instance(source: StorageBackend, target: StorageBackend, workspace: str, agent: str,
                   key: str, *, replace: bool, dry_run: bool,
                   report: CopyReport) -> dict[str, Any]:
    row: dict[str, Any] = {"workspaceId": workspace, "agentName": agent, "instanceKey": key}
    label = f"{workspace} {agent}:{key}"
    try:
        snap = _read_held(source, workspace, agent, key)
        if snap is None:
            return {**row, "outcome": "gone"}  # deleted since it was listed
        row.update(messages=len(snap.messages), events=len(snap.events),
                   journalRecords=len(snap.journal), extensionStates=len(snap.extensions))
        if snap.needs_fold:
            report.problems.append(f"{label}: not copied, it must be recovered first "
                                   f"({snap.needs_fold}): run goondan fold {key}")
            return {**row, "outcome": "refused", "reason": snap.needs_fold}
        existing = target.snapshot(workspace, agent, key)
        if existing is not None and existing.content() == snap.content():
            return {**row, "outcome": "unchanged"}
        if existing is not None and not replace:
            diff = differences(snap, existing)
            report.problems.append(f"{label}: exists in the target and differs "
                                   f"({'; '.join(diff[:5])}); pass --replace to overwrite it")
            return {**row, "outcome": "refused", "differences": diff}
        outcome = "replaced" if existing is not None else "copied"
        if dry_run:
            return {**row, "outcome": f"would {outcome[:-1]}"}
        target.restore(workspace, snap, replace=existing is not None)
        again = target.snapshot(workspace, agent, key)
        diff = ["missing in the target"] if again is None else differences(snap, again)
        if diff:
            report.problems.append(f"{label}: the copy differs: {'; '.join(diff[:5])}")
            return {**row, "outcome": "differs", "differences": diff}
        return {**row, "outcome": outcome}
    except GoondanError as exc:
        report.problems.append(f"{label}: [{exc.code}] {exc.message}")
        return {**row, "outcome": "failed", "error": exc.to_dict()}


def _copy_approvals(source: StorageBackend, target: StorageBackend, workspace: str,
                    replaced: list[tuple[str, str]], *, dry_run: bool,
                    report: CopyReport) -> None:
    ours, theirs = source.approvals(workspace), target.approvals(workspace)
    if not dry_run:
        for agent, key in replaced:  # the replaced instance's approvals go with it
            theirs.remove_instance(agent, key)
    for approval in ours.list():
        mine = (str(approval.request.get("agent")), str(approval.request.get("instanceKey")))
        existing = None if dry_run and mine in replaced else theirs.get(approval.id)
        if existing is None and dry_run:
            report.approvals["copied"] += 1
            continue
        if existing is None:
            theirs.restore(approval.request, approval.decision)
            existing = theirs.get(approval.id)
            if existing is not None and existing.to_dict() == approval.to_dict():
                report.approvals["copied"] += 1
                continue
        elif existing.to_dict() == approval.to_dict():
            report.approvals["unchanged"] += 1
            continue
        report.approvals["refused"] += 1
        report.problems.append(f"{workspace} approval {approval.id}: the target's differs "
                               f"from the source's")


_CHUNK = 1000
SpanRows = list[tuple[JsonObject, int]]


def _stored_spans(table: Any, workspace: str, rows: SpanRows) -> dict[Any, Any]:
    """The target's spans with the ids of ``rows``, by (trace id, span id)."""
    ids = sorted({str(doc["spanId"]) for doc, _ in rows})
    return {(d["traceId"], d["spanId"]): (d, s) for d, s in table.by_span_id(workspace, ids)}


def _holds(there: tuple[JsonObject, int] | None, row: tuple[JsonObject, int]) -> bool:
    """The target holds ``row``: as it is, or finished where the source's is still running."""
    return there == row or (there is not None and row[0].get("status") == "running"
                            and there[0].get("status") != "running")


def _copy_spans(target: Any, spans: Spans, *, dry_run: bool, report: CopyReport) -> None:
    table = target.spans()
    for workspace, rows in spans.items():
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start:start + _CHUNK]
            before = _stored_spans(table, workspace, chunk)
            changed = []
            for row in chunk:
                there = before.get((row[0]["traceId"], row[0]["spanId"]))
                if _holds(there, row):
                    report.spans["unchanged"] += 1
                    continue
                report.spans["copied" if there is None else "updated"] += 1
                changed.append(row)
            if dry_run or not changed:
                continue
            table.upsert(workspace, changed)
            after = _stored_spans(table, workspace, changed)
            for doc, nanos in changed:
                if after.get((doc["traceId"], doc["spanId"])) != (doc, nanos):
                    report.problems.append(f"{workspace} span {doc['spanId']} of trace "
                                           f"{doc['traceId']}: the copy differs")
